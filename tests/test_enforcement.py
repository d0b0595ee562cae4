"""Enforce mode with the real openai SDK against the strict scripted model server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading

import openai
import pytest

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.history import SYNTHETIC_RESULT, history_problems
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.scripted_model import Request, ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

POLICY = parse_policy(
    """
version = "enforce-tests"
[profiles.default]
max_steps = 30
max_tokens = 100000
[profiles.tight]
max_model_calls = 2
[tools.refund]
effect = "write"
"""
)


@pytest.fixture
def enforced(instrumented_tracing):
    with instrumented_tracing(OpenAIInstrumentor(), policy=POLICY, mode="enforce") as tracing:
        yield tracing


class Agent:
    """A hand-written tool loop on the real SDK; keeps its history for inspection."""

    def __init__(self, tracing: GuardedTracing, server: ScriptedModelServer, on_result=None):
        provider = tracing.tracer_provider
        self.calls: list[str] = []
        self.on_result = on_result or (lambda name: None)

        @ag.tool(tracer_provider=provider)
        def query_logistics(order: str) -> dict:
            self.calls.append("query_logistics")
            return {"order": order, "state": "stalled"}

        @ag.tool(tracer_provider=provider)
        def get_order(order: str) -> dict:
            self.calls.append("get_order")
            return {"order": order, "state": "paid"}

        @ag.tool(tracer_provider=provider)
        def refund(order: str) -> dict:
            self.calls.append("refund")
            return {"refunded": order}

        self.tools = {"query_logistics": query_logistics, "get_order": get_order, "refund": refund}
        self.client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        self.messages: list[dict] = [{"role": "user", "content": "Where is my parcel?"}]

    def run(self, max_turns: int = 12) -> str:
        for _ in range(max_turns):
            response = self.client.chat.completions.create(model="gpt-4o", messages=self.messages)
            message = response.choices[0].message
            self.messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content
            for call in message.tool_calls:
                result = self.tools[call.function.name](**json.loads(call.function.arguments))
                self.messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
                self.on_result(call.function.name)
        return ""


def looping(request: Request) -> Turn:
    return Turn.call("query_logistics", order="A1")


def test_a_loop_is_first_nudged_then_stopped_with_every_call_paired(enforced):
    with ScriptedModelServer(looping) as server:
        agent = Agent(enforced, server)
        with pytest.raises(ag.AgentStopped) as stopped:
            with enforced.session("loop"):
                agent.run()
    # 3 identical calls ran; the 4th was answered by the guard (nudge); the 5th escalated
    assert agent.calls == ["query_logistics"] * 3
    tool_results = [m["content"] for m in agent.messages if m["role"] == "tool"]
    assert len(tool_results) == 5
    assert "Do not call it again" in tool_results[3] and "Do not call it again" in tool_results[4]
    assert server.rejected == []  # every request the SDK sent was valid
    assert history_problems(agent.messages) == []
    error = stopped.value
    assert error.stop_reason == "tool_loop" and not error.resumable
    assert error.breakpoint["steps"] == 5
    assert [a["name"] for a in error.breakpoint["last_actions"]][-1] == "query_logistics"
    assert error.breakpoint["has_partial_result"] is True
    assert len(server.requests) == 5  # the 6th model call never went out
    span = enforced.session_span("loop")
    assert span.attributes[A.STOP_REASON] == "tool_loop"
    assert span.attributes[A.ENFORCED] is True
    assert span.status.status_code.name == "UNSET"  # a stop by the guard is not an error
    interventions = [s for s in enforced.spans() if s.attributes.get(A.INTERVENTION)]
    assert [s.attributes[A.INTERVENTION] for s in interventions] == ["tool_loop", "tool_loop"]


def test_a_model_that_listens_to_the_nudge_finishes(enforced):
    def listens(request: Request) -> Turn:
        tool_results = [m["content"] for m in request.body["messages"] if m["role"] == "tool"]
        if tool_results and "otel_agentguard" in tool_results[-1]:
            return Turn.answer("The parcel is stalled at the hub and has not moved since Monday.")
        return Turn.call("query_logistics", order="A1")

    with ScriptedModelServer(listens) as server:
        agent = Agent(enforced, server)
        with enforced.session("recovers"):
            answer = agent.run()
    assert "stalled at the hub" in answer
    assert agent.calls == ["query_logistics"] * 3
    assert enforced.verdict("recovers").stop_reason == "tool_loop"  # what it would have stopped for


def test_a_parallel_batch_keeps_all_results_when_a_stop_is_requested_mid_batch(enforced):
    script = turns(
        Turn.calls(("get_order", {"order": "A1"}), ("query_logistics", {"order": "A1"}), ("refund", {"order": "A1"})),
        Turn.answer("Thanks, noted."),
    )
    with ScriptedModelServer(script) as server:
        agent = Agent(enforced, server, on_result=lambda name: name == "get_order" and ag.request_stop("batch", "steer"))
        with pytest.raises(ag.AgentStopped) as stopped:
            with enforced.session("batch"):
                agent.run()
        assert stopped.value.stop_reason == "steered" and stopped.value.resumable
        assert agent.calls == ["get_order", "query_logistics", "refund"]  # never cut inside the batch
        assert history_problems(agent.messages) == []
        # resume: the next request the SDK sends with this history is accepted
        agent.messages.append({"role": "user", "content": "Also, the parcel was a gift."})
        agent.client.chat.completions.create(model="gpt-4o", messages=agent.messages)
        assert server.rejected == []
    verdict = enforced.verdict("batch")
    assert verdict.stop_reason == "steered"
    assert verdict.alerts == ()
    sessions = {labels[A.STOP_REASON]: p.value for labels, p in enforced.metric_points(A.METRIC_SESSIONS) if p.value}
    assert sessions["steered"] == 1
    assert not set(sessions) & {"error", "abandoned", *A.PROBE_NAMES}  # never a failure, an empty answer or a loop
    assert [p.value for _, p in enforced.metric_points(A.METRIC_STALLS) if p.value] == []


def test_budget_stops_before_the_call_that_would_cross_it(enforced):
    with ScriptedModelServer(looping) as server:
        agent = Agent(enforced, server)
        with pytest.raises(ag.AgentStopped) as stopped:
            with enforced.session("tight", profile="tight"):
                agent.run()
    assert stopped.value.stop_reason == "budget_exceeded"
    assert len(server.requests) == 2  # the third model call was never made
    span = enforced.session_span("tight")
    assert span.attributes[A.STOP_REASON] == "budget_exceeded"
    events = [e for e in span.events if e.name == A.STALL_EVENT]
    assert [e.attributes[A.BUDGET_KIND] for e in events] == ["model_calls"]


def test_a_fake_completion_is_not_delivered(enforced):
    with ScriptedModelServer(turns(Turn.call("get_order", order="A1"), Turn.answer("Your refund has been submitted."))) as server:
        agent = Agent(enforced, server)
        with pytest.raises(ag.AgentStopped) as stopped:
            with enforced.session("fake"):
                agent.run()
    assert stopped.value.stop_reason == "fake_completion"
    assert all("refund has been submitted" not in str(m.get("content")) for m in agent.messages)
    assert enforced.verdict("fake").stop_reason == "fake_completion"


def test_observe_mode_changes_nothing():
    with GuardedTracing(POLICY) as tracing:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            script = turns(*[Turn.call("query_logistics", order="A1")] * 6, Turn.answer("In transit."))
            with ScriptedModelServer(script) as server:
                agent = Agent(tracing, server)
                with tracing.session("observed"):
                    assert ag.request_stop("observed", "steer") is False
                    assert agent.run() == "In transit."
        finally:
            instrumentor.uninstrument()
    assert agent.calls == ["query_logistics"] * 6
    assert tracing.verdict("observed").stop_reason == "tool_loop"


def test_budget_note_is_added_to_the_prompt_when_the_policy_asks():
    policy = parse_policy("budget_note = true\n[profiles.default]\nmax_steps = 15\n")
    with GuardedTracing(policy, mode="enforce") as tracing:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            with ScriptedModelServer(turns(Turn.call("get_order", order="A1"), Turn.answer("Paid."))) as server:
                agent = Agent(tracing, server)
                with tracing.session("noted"):
                    agent.run()
        finally:
            instrumentor.uninstrument()
    notes = [m["content"] for r in server.requests for m in r.body["messages"] if m["role"] == "system"]
    assert notes == [
        "[otel_agentguard] Step 1 of 15: 15 left. If you cannot make progress, call finalize with what you have.",
        "[otel_agentguard] Step 2 of 15: 14 left. If you cannot make progress, call finalize with what you have.",
    ]
    assert all(m["role"] != "system" for m in agent.messages)  # the user's own list is untouched


def test_history_middleware_repairs_a_bricked_history_before_the_request():
    broken = [
        {"role": "user", "content": "refund A1"},
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "refund", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "refund", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": "and?"},
    ]
    with ScriptedModelServer(turns(Turn.answer("Done."))) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="gpt-4o", messages=broken)  # as a provider would
        with GuardedTracing() as tracing:
            instrumentor = OpenAIInstrumentor()
            instrumentor.instrument(tracer_provider=tracing.tracer_provider, repair_history=True)
            try:
                client.chat.completions.create(model="gpt-4o", messages=broken)
            finally:
                instrumentor.uninstrument()
            (span,) = [s for s in tracing.spans() if s.name.startswith("chat")]
        sent = server.requests[-1].body["messages"]
    assert span.attributes[A.HISTORY_REPAIRED] == 1
    assert [m.get("content") for m in sent if m["role"] == "tool"] == ["ok", SYNTHETIC_RESULT]
    assert len(broken) == 4  # the caller's list is not modified


SIGTERM_AGENT = textwrap.dedent(
    """
    import json, os, sys, threading, time
    import openai
    from opentelemetry.sdk.trace import TracerProvider
    import otel_agentguard as ag
    from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
    from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns

    provider = TracerProvider()
    ag.install(tracer_provider=provider, mode="enforce")
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    ag.drain_on_sigterm()

    done = []

    @ag.tool(tracer_provider=provider)
    def slow(n: int) -> dict:
        if n == 0:
            print("batch-started", flush=True)
            time.sleep(1.0)  # SIGTERM arrives while the batch is in flight
        done.append(n)
        return {"n": n}

    script = turns(Turn.calls(("slow", {"n": 0}), ("slow", {"n": 1}), ("slow", {"n": 2})), Turn.answer("ok"))
    with ScriptedModelServer(script) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="t", max_retries=0)
        messages = [{"role": "user", "content": "go"}]
        try:
            with ag.session("worker"):
                for _ in range(5):
                    message = client.chat.completions.create(model="m", messages=messages).choices[0].message
                    messages.append(message.model_dump(exclude_none=True))
                    if not message.tool_calls:
                        break
                    for call in message.tool_calls:
                        result = slow(**json.loads(call.function.arguments))
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
        except ag.AgentStopped as stopped:
            print(json.dumps({"stop_reason": stopped.stop_reason, "resumable": stopped.resumable, "done": done,
                              "rejected": len(server.rejected), "requests": len(server.requests)}), flush=True)
    """
)


def test_sigterm_during_a_batch_drains_cleanly(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(SIGTERM_AGENT)
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env={**os.environ, "OTEL_AGENTGUARD_FINGERPRINT_KEY": "k"})
    try:
        assert process.stdout.readline().strip() == "batch-started"
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"stop_reason": "drained", "resumable": True, "done": [0, 1, 2], "rejected": 0, "requests": 1}


def test_request_stop_rejects_unknown_reasons():
    with pytest.raises(ValueError, match="steered"):
        ag.request_stop("s", "pause")


def test_interrupt_is_honoured_at_the_cut_point_from_another_thread(enforced):
    started = threading.Event()

    def script(request: Request) -> Turn:
        started.set()
        return Turn.call("get_order", order="A1")

    with ScriptedModelServer(script) as server:
        agent = Agent(enforced, server, on_result=lambda name: ag.request_stop("remote", "dispatch"))
        with pytest.raises(ag.AgentStopped) as stopped:
            with enforced.session("remote"):
                agent.run()
    assert stopped.value.stop_reason == "dispatched" and not stopped.value.resumable
    assert enforced.session_span("remote").attributes[A.STOP_REASON] == "dispatched"


@pytest.mark.parametrize("form", ["sync", "async", "helper"])
def test_a_streamed_fake_completion_is_stopped_when_the_stream_ends(enforced, form):
    """The text has already reached the caller chunk by chunk: the stop comes at the end of the stream."""
    script = turns(Turn.call("get_order", order="A1"), Turn.answer("Your refund has been submitted."))
    session_id = f"fake-stream-{form}"
    with ScriptedModelServer(script) as server:
        agent = Agent(enforced, server)
        with pytest.raises(ag.AgentStopped) as stopped:
            with enforced.session(session_id):
                agent.run(max_turns=1)  # the tool turn, plain
                pieces = []
                if form == "sync":
                    for chunk in agent.client.chat.completions.create(model="gpt-4o", messages=agent.messages,
                                                                      stream=True):
                        pieces.append(chunk.choices[0].delta.content or "" if chunk.choices else "")
                elif form == "async":
                    import asyncio

                    async def read() -> None:
                        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
                        stream = await client.chat.completions.create(model="gpt-4o", messages=agent.messages,
                                                                      stream=True)
                        async for chunk in stream:
                            pieces.append(chunk.choices[0].delta.content or "" if chunk.choices else "")

                    asyncio.run(read())
                else:
                    with agent.client.chat.completions.stream(model="gpt-4o", messages=agent.messages) as stream:
                        for event in stream:
                            pieces.append(getattr(event, "delta", "") if event.type == "content.delta" else "")
        assert "".join(pieces) == "Your refund has been submitted."  # delivered before the end
    assert stopped.value.stop_reason == "fake_completion"
    assert enforced.verdict(session_id).stop_reason == "fake_completion"
