"""The OpenAI Agents SDK instrumentor: real ``agents.Agent`` runs against the scripted model server.

Nothing leaves the machine: each test gets a fresh Agents SDK trace provider
that holds only the "user's" processor (the SDK's default processor, which
exports to api.openai.com, is only added by ``get_trace_provider()`` when it
builds the global default provider), ``OPENAI_API_KEY`` is unset (the default
exporter skips without a key), a socket guard fails any connection that is
not to loopback, and every test ends by flushing the SDK's traces and checking
that its default exporter got nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from typing import Any

import agents
import agents.tracing.setup
import httpx2
import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
)
from agents.exceptions import MaxTurnsExceeded
from agents.tracing import TracingProcessor
from agents.tracing.processors import BackendSpanExporter
from agents.tracing.provider import DefaultTraceProvider
from openai import AsyncOpenAI
from opentelemetry.trace import StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.exporters import encode_request
from otel_agentguard.instrumentation._model_call import ModelCall, ModelResult
from otel_agentguard.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.live.registry import active_policy
from otel_agentguard.replay.runner import replay_files
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

MODEL = "gpt-4o-mini"
POLICY = parse_policy('[tools.refund]\neffect = "write"\n')
LOOKUP = Turn.call("lookup", order="A1")


def same_call_forever(request) -> Turn:
    """A stuck model: the same call again and again (a fresh call id each time, as a real model's)."""
    return Turn.call("lookup", order="A1")


ANSWER = Turn.answer("Order A1 is in transit.")


# --- isolation: no network, no SDK export ---------------------------------------------------------
@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Fail (and remember) any attempt to resolve or reach a host that is not loopback."""
    attempts: list[Any] = []
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

    def loopback(host: Any) -> bool:
        return str(host) in ("127.0.0.1", "::1", "localhost")

    def getaddrinfo(host, *args, **kwargs):
        if not loopback(host):
            attempts.append(host)
            raise OSError(f"test blocked DNS lookup of {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(self, address):
        if isinstance(address, tuple) and not loopback(address[0]):
            attempts.append(address)
            raise OSError(f"test blocked connection to {address}")
        return real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield
    assert attempts == [], f"something tried to leave the machine: {attempts}"


@pytest.fixture(autouse=True)
def no_contained_failures(caplog):
    """Nothing went wrong quietly: no failure contained by the guard, no context left attached."""
    before = _internal_errors.counts()
    caplog.set_level(logging.ERROR, logger="opentelemetry.context")
    yield
    after = _internal_errors.counts()
    assert {kind: n for kind, n in after.items() if n != before.get(kind, 0)} == {}
    records = caplog.get_records("setup") + caplog.get_records("call") + caplog.records
    assert [r.getMessage() for r in records if r.name == "opentelemetry.context"] == []


class UserProcessor(TracingProcessor):
    """The application's own Agents SDK processor, added before the guard."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.trace_ids: list[str] = []

    def on_trace_start(self, trace) -> None:
        self.trace_ids.append(trace.trace_id)
        self.events.append(("trace_start", trace.name))

    def on_trace_end(self, trace) -> None:
        self.events.append(("trace_end", trace.name))

    def on_span_start(self, span) -> None:
        self.events.append(("span_start", span.span_data.type))

    def on_span_end(self, span) -> None:
        self.events.append(("span_end", span.span_data.type))

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


@pytest.fixture
def user_processor(monkeypatch):
    # Whatever reaches the SDK's default exporter (the one that posts to api.openai.com) is kept here.
    sent_to_openai: list[Any] = []
    monkeypatch.setattr(BackendSpanExporter, "export", lambda self, items: sent_to_openai.extend(items))
    # A fresh provider (no default OpenAI exporter) instead of the process-wide one.
    monkeypatch.setattr(agents.tracing.setup, "GLOBAL_TRACE_PROVIDER", DefaultTraceProvider())
    processor = UserProcessor()
    agents.add_trace_processor(processor)
    yield processor
    agents.flush_traces()
    assert sent_to_openai == [], "the SDK's default exporter got spans"


@pytest.fixture
def tracing(user_processor):
    with GuardedTracing(POLICY) as tracing:
        instrumentor = OpenAIAgentsInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            yield tracing
        finally:
            instrumentor.uninstrument()


# --- the agent ------------------------------------------------------------------------------------------
@function_tool
def lookup(order: str) -> dict:
    """Look up an order."""
    return {"order": order, "status": "in transit"}


@function_tool
def refund(order: str, amount: float) -> str:
    """Refund an order."""
    return f"refund of {amount} for {order} queued"


@function_tool
def broken(order: str) -> str:
    """Always fails."""
    raise RuntimeError("warehouse database is down")


def make_agent(server: ScriptedModelServer, api: str = "chat", tools=(lookup,), **client_options) -> Agent:
    client = AsyncOpenAI(base_url=server.openai_url, api_key="x", max_retries=0, **client_options)
    if api == "chat":
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    else:
        model = OpenAIResponsesModel(model=MODEL, openai_client=client)
    return Agent(name="support", instructions="Help with orders.", tools=list(tools), model=model,
                 model_settings=ModelSettings(include_usage=True))


def by_operation(tracing: GuardedTracing, operation: str) -> list:
    return [s for s in tracing.spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == operation]


def session_spans(tracing: GuardedTracing) -> list:
    return by_operation(tracing, A.OP_INVOKE_AGENT)


def stalls(span) -> list[dict]:
    return [dict(e.attributes) for e in span.events if e.name == A.STALL_EVENT]


def assert_completed_lookup(tracing: GuardedTracing, session_id: str) -> None:
    """The documented attributes of a model -> tool -> model (final answer) run."""
    (session,) = session_spans(tracing)
    first, final = by_operation(tracing, "chat")
    (tool,) = by_operation(tracing, A.OP_EXECUTE_TOOL)
    assert session.name == "invoke_agent support"
    assert session.attributes[A.SESSION_ID] == session_id
    assert session.attributes[A.GEN_AI_AGENT_NAME] == "support"
    assert session.attributes[A.STOP_REASON] == A.COMPLETED
    assert session.attributes[A.STEPS] == 2  # the tool step and the final answer
    assert session.attributes[A.TOKENS] == 300
    assert stalls(session) == []
    for span in (first, tool, final):
        assert span.attributes[A.SESSION_ID] == session_id
        assert span.attributes[A.GEN_AI_AGENT_NAME] == "support"
        assert span.parent.span_id == session.context.span_id
    assert [s.attributes[A.SEQUENCE] for s in (first, tool, final)] == [1, 2, 3]

    assert first.name == final.name == f"chat {MODEL}"
    assert first.attributes[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert first.attributes[A.RESPONSE_TOOL_CALLS] == 1
    assert tuple(first.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("tool_calls",)
    assert A.FINAL_CLAIMS not in first.attributes
    assert final.attributes[A.RESPONSE_TOOL_CALLS] == 0
    assert tuple(final.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)
    assert tuple(final.attributes[A.FINAL_CLAIMS]) == ()
    for span in (first, final):
        assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 120
        assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 30

    assert tool.name == "execute_tool lookup"
    assert tool.attributes[A.GEN_AI_TOOL_NAME] == "lookup"
    # Fingerprinted from the parsed arguments, exactly as any other instrumentation would.
    fingerprinter = active_policy().fingerprinter("lookup")
    assert tool.attributes[A.TOOL_ARGS_FINGERPRINT] == fingerprinter.arguments({"order": "A1"}).fingerprint
    assert tuple(tool.attributes[A.TOOL_ARGS_KEYS]) == ("order",)
    assert tool.attributes[A.TOOL_ARGS_SIZE] > 0
    assert tool.attributes[A.TOOL_RESULT_FINGERPRINT] == fingerprinter.result(
        {"order": "A1", "status": "in transit"})
    assert tool.attributes[A.TOOL_RESULT_EMPTY] is False
    assert tool.status.status_code is StatusCode.UNSET


# --- runs ------------------------------------------------------------------------------------------------
def test_async_run_is_one_session_keyed_by_the_sdk_trace_id(tracing, user_processor):
    with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
        result = asyncio.run(Runner.run(make_agent(server), "Where is order A1?"))
    assert result.final_output == "Order A1 is in transit."
    (trace_id,) = user_processor.trace_ids
    assert_completed_lookup(tracing, trace_id)


def test_run_sync_session_is_the_group_id(tracing):
    with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
        result = Runner.run_sync(make_agent(server), "Where is order A1?", run_config=RunConfig(group_id="conv-42"))
    assert result.final_output == "Order A1 is in transit."
    assert_completed_lookup(tracing, "conv-42")
    (session,) = session_spans(tracing)
    assert session.attributes[A.GEN_AI_CONVERSATION_ID] == "conv-42"


def test_streamed_run(tracing, user_processor):
    async def run(agent: Agent) -> Any:
        streamed = Runner.run_streamed(agent, "Where is order A1?")
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
        assert asyncio.run(run(make_agent(server))) == "Order A1 is in transit."
        assert all(request.stream for request in server.requests)
    (trace_id,) = user_processor.trace_ids
    assert_completed_lookup(tracing, trace_id)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_responses_model(tracing, stream):
    async def run(agent: Agent) -> Any:
        config = RunConfig(group_id="conv-responses")
        if not stream:
            return (await Runner.run(agent, "Where is order A1?", run_config=config)).final_output
        streamed = Runner.run_streamed(agent, "Where is order A1?", run_config=config)
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
        assert asyncio.run(run(make_agent(server, api="responses"))) == "Order A1 is in transit."
        assert {request.api for request in server.requests} == {"responses"}
    assert_completed_lookup(tracing, "conv-responses")
    for span in by_operation(tracing, "chat"):
        assert span.attributes[A.GEN_AI_RESPONSE_MODEL] == MODEL
        assert span.attributes["gen_ai.response.id"].startswith("resp_")


def test_agent_stuck_on_one_tool_gets_tool_loop(tracing):
    with ScriptedModelServer(same_call_forever) as server:
        with pytest.raises(MaxTurnsExceeded):
            Runner.run_sync(make_agent(server), "Where is order A1?", max_turns=5,
                            run_config=RunConfig(group_id="conv-loop"))
    session = tracing.session_span("conv-loop")
    assert session.attributes[A.STOP_REASON] == A.TOOL_LOOP
    (alert,) = [a for a in stalls(session) if a[A.PROBE] == A.TOOL_LOOP]
    # model 1, tool 2, model 3, tool 4, model 5, tool 6: the third identical call is the loop.
    assert tuple(alert[A.EVIDENCE]) == (2, 4, 6)
    assert alert[A.SEQUENCE] == 6
    tools = by_operation(tracing, A.OP_EXECUTE_TOOL)
    assert [s.attributes[A.SEQUENCE] for s in tools] == [2, 4, 6, 8, 10]
    assert len({s.attributes[A.TOOL_ARGS_FINGERPRINT] for s in tools}) == 1
    # MaxTurnsExceeded ended the run: the session span says so.
    assert session.status.status_code is StatusCode.ERROR
    assert session.attributes[A.ERROR_TYPE] == "agent_error"


@pytest.mark.parametrize(("script", "stop_reason"), [
    ((Turn.call("refund", order="A1", amount=10.0), Turn.answer("I have submitted the refund for order A1.")),
     A.COMPLETED),
    ((LOOKUP, Turn.answer("I have submitted the refund for order A1.")), A.FAKE_COMPLETION),
], ids=["refund-made", "refund-claimed-only"])
def test_claims_of_the_final_answer_against_the_write_tools(tracing, script, stop_reason):
    with ScriptedModelServer(turns(*script)) as server:
        Runner.run_sync(make_agent(server, tools=(lookup, refund)), "Refund A1", run_config=RunConfig(group_id="c"))
    session = tracing.session_span("c")
    assert session.attributes[A.STOP_REASON] == stop_reason
    final = by_operation(tracing, "chat")[-1]
    assert tuple(final.attributes[A.FINAL_CLAIMS]) == ("write",)
    (tool,) = by_operation(tracing, A.OP_EXECUTE_TOOL)
    expected_effect = "write" if tool.attributes[A.GEN_AI_TOOL_NAME] == "refund" else None
    assert tool.attributes.get(A.TOOL_EFFECT) == expected_effect


def test_tool_error_marks_the_tool_span(tracing):
    with ScriptedModelServer(turns(Turn.call("broken", order="A1"), ANSWER)) as server:
        Runner.run_sync(make_agent(server, tools=(broken,)), "Where is A1?", run_config=RunConfig(group_id="c"))
    (tool,) = by_operation(tracing, A.OP_EXECUTE_TOOL)
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.attributes[A.ERROR_TYPE] == "tool_error"
    assert tool.status.description is None  # the SDK's message may quote the user's data
    # The SDK turned the error into a message for the model, which then answered.
    assert tracing.session_span("c").attributes[A.STOP_REASON] == A.COMPLETED


def test_failed_model_call_ends_the_session_as_error(tracing):
    with ScriptedModelServer(turns(ANSWER)) as server:
        agent = make_agent(server)
        agent.model._client = AsyncOpenAI(base_url=server.base_url + "/missing", api_key="x", max_retries=0)
        with pytest.raises(openai.APIStatusError):
            Runner.run_sync(agent, "Where is A1?", run_config=RunConfig(group_id="c"))
    (model,) = by_operation(tracing, "chat")
    assert model.status.status_code is StatusCode.ERROR
    assert model.attributes[A.ERROR_TYPE] == "model_error"
    session = tracing.session_span("c")
    assert session.attributes[A.STOP_REASON] == A.ERROR
    assert session.status.status_code is StatusCode.ERROR


def test_steps_join_an_active_agentguard_session(tracing):
    async def run(agent: Agent) -> None:
        async with tracing.session("outer-7", agent_name="support"):
            await Runner.run(agent, "Where is order A1?", run_config=RunConfig(group_id="ignored"))

    with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
        asyncio.run(run(make_agent(server)))
    (session,) = session_spans(tracing)  # the user's; no second session span
    assert session.attributes[A.SESSION_ID] == "outer-7"
    steps = by_operation(tracing, "chat") + by_operation(tracing, A.OP_EXECUTE_TOOL)
    assert len(steps) == 3
    assert {s.attributes[A.SESSION_ID] for s in steps} == {"outer-7"}
    verdict = tracing.verdict("outer-7")
    assert (verdict.stop_reason, verdict.steps, verdict.tokens) == (A.COMPLETED, 2, 300)


def test_baggage_session_is_used_without_a_group_id(tracing):
    from opentelemetry import baggage, context

    token = context.attach(baggage.set_baggage("session.id", "from-baggage"))
    try:
        with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
            Runner.run_sync(make_agent(server), "Where is order A1?")
    finally:
        context.detach(token)
    assert_completed_lookup(tracing, "from-baggage")


def test_parallel_tool_calls_are_numbered_when_they_start(tracing):
    script = turns(Turn.calls(("lookup", {"order": "A1"}), ("lookup", {"order": "B2"})), ANSWER)
    with ScriptedModelServer(script) as server:
        Runner.run_sync(make_agent(server), "Where are A1 and B2?", run_config=RunConfig(group_id="c"))
    session = tracing.session_span("c")
    first, final = by_operation(tracing, "chat")
    tools = by_operation(tracing, A.OP_EXECUTE_TOOL)
    assert first.attributes[A.RESPONSE_TOOL_CALLS] == 2
    assert sorted(s.attributes[A.SEQUENCE] for s in tools) == [2, 3]
    assert final.attributes[A.SEQUENCE] == 4
    assert len({s.attributes[A.TOOL_ARGS_FINGERPRINT] for s in tools}) == 2
    assert all(s.parent.span_id == session.context.span_id for s in tools)
    assert (session.attributes[A.STOP_REASON], session.attributes[A.STEPS]) == (A.COMPLETED, 3)


def test_steps_carry_the_agent_that_made_them_across_a_handoff(tracing):
    script = turns(Turn.call("transfer_to_billing"), LOOKUP, ANSWER)
    with ScriptedModelServer(script) as server:
        billing = make_agent(server)
        billing.name = "billing"
        triage = make_agent(server, tools=())
        triage.name, triage.handoffs = "triage", [billing]
        Runner.run_sync(triage, "Where is order A1?", run_config=RunConfig(group_id="c"))
    session = tracing.session_span("c")
    assert session.name == "invoke_agent triage"
    assert session.attributes[A.STOP_REASON] == A.COMPLETED
    steps = sorted(by_operation(tracing, "chat") + by_operation(tracing, A.OP_EXECUTE_TOOL),
                   key=lambda s: s.attributes[A.SEQUENCE])
    assert [(s.name, s.attributes[A.GEN_AI_AGENT_NAME]) for s in steps] == [
        (f"chat {MODEL}", "triage"), (f"chat {MODEL}", "billing"), ("execute_tool lookup", "billing"),
        (f"chat {MODEL}", "billing"),
    ]


def test_agents_handing_control_back_and_forth_are_a_handoff_loop_live_and_on_replay(tracing, tmp_path):
    """Triage hands to billing, billing hands back, four times, no write tool: then "Please
    contact support." No tool repeats; the bouncing is the stall."""
    script = turns(*[Turn.call("transfer_to_billing"), Turn.call("transfer_to_triage")] * 2,
                   Turn.answer("Please contact support."))
    with ScriptedModelServer(script) as server:
        billing = make_agent(server, tools=())
        triage = make_agent(server, tools=())
        billing.name, triage.name = "billing", "triage"
        triage.handoffs, billing.handoffs = [billing], [triage]
        Runner.run_sync(triage, "I want a refund for order A1.", run_config=RunConfig(group_id="bounce"))
    session = tracing.session_span("bounce")
    assert session.attributes[A.STOP_REASON] == A.HANDOFF_LOOP
    (alert,) = [e for e in session.events if e.name == A.STALL_EVENT]
    assert alert.attributes[A.PROBE] == A.HANDOFF_LOOP
    assert "between billing and triage 4 times" in alert.attributes[A.DETAIL]
    models = sorted(by_operation(tracing, "chat"), key=lambda s: s.attributes[A.SEQUENCE])
    hops = [s.attributes[A.SEQUENCE] for s in models[1:]]  # each model call after the first is another agent's
    assert list(alert.attributes[A.EVIDENCE]) == hops[:4]
    # the same judge on the recorded trace
    recording = tmp_path / "trace.jsonl"
    recording.write_text(json.dumps(encode_request([s for s in tracing.spans()
                                                   if not s.attributes.get(A.VERDICT)])) + "\n")
    (replayed,) = [verdict for _, verdict in replay_files([recording], POLICY)]
    assert replayed.stop_reason == A.HANDOFF_LOOP
    assert [(a.probe, list(a.evidence)) for a in replayed.alerts] == [(A.HANDOFF_LOOP, hops[:4])]


def test_a_write_between_the_handoffs_is_work_not_a_loop(tracing):
    script = turns(Turn.call("transfer_to_billing"), Turn.call("transfer_to_triage"), Turn.call("refund", order="A1", amount=5.0),
                   Turn.call("transfer_to_billing"), Turn.call("transfer_to_triage"), Turn.answer("Refunded."))
    with ScriptedModelServer(script) as server:
        billing = make_agent(server, tools=())
        triage = make_agent(server, tools=(refund,))
        billing.name, triage.name = "billing", "triage"
        triage.handoffs, billing.handoffs = [billing], [triage]
        Runner.run_sync(triage, "I want a refund for order A1.", run_config=RunConfig(group_id="work"))
    assert tracing.session_span("work").attributes[A.STOP_REASON] == A.COMPLETED


def test_a_tripped_guardrail_ends_the_session_as_error(tracing):
    from agents import GuardrailFunctionOutput, InputGuardrailTripwireTriggered, input_guardrail

    @input_guardrail
    def no_orders(context, agent, user_input) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    with ScriptedModelServer(turns(ANSWER)) as server:
        agent = make_agent(server)
        agent.input_guardrails = [no_orders]
        with pytest.raises(InputGuardrailTripwireTriggered):
            Runner.run_sync(agent, "Where is order A1?", run_config=RunConfig(group_id="c"))
    session = tracing.session_span("c")
    assert session.attributes[A.ERROR_TYPE] == "guardrail_tripwire"
    assert session.attributes[A.STOP_REASON] == A.ERROR


# --- privacy ---------------------------------------------------------------------------------------------
SECRETS = {
    "prompt": "PROMPT-SECRET-3141",
    "argument": "ARGUMENT-SECRET-2718",
    "result": "RESULT-SECRET-1618",
    "answer": "ANSWER-SECRET-1414",
}


@function_tool
def vault(code: str) -> str:
    """Open the vault."""
    return f"the vault says {SECRETS['result']}"


@pytest.mark.parametrize("capture", [False, True], ids=["default", "capture-on"])
def test_raw_content_is_exported_only_with_capture_on(tracing, monkeypatch, capture):
    if capture:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    else:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    script = turns(Turn.call("vault", code=SECRETS["argument"]), Turn.answer(f"It says {SECRETS['answer']}."))
    with ScriptedModelServer(script) as server:
        Runner.run_sync(make_agent(server, tools=(vault,)), f"My pin is {SECRETS['prompt']}")
    exported = json.dumps(encode_request(tracing.spans()))
    assert len(by_operation(tracing, A.OP_EXECUTE_TOOL)) == 1
    found = {where for where, secret in SECRETS.items() if secret in exported}
    assert found == (set(SECRETS) if capture else set())


def test_without_sdk_sensitive_data_there_are_no_fingerprints_and_no_false_loop(tracing):
    config = RunConfig(group_id="c", trace_include_sensitive_data=False)
    with ScriptedModelServer(same_call_forever) as server:
        with pytest.raises(MaxTurnsExceeded):
            Runner.run_sync(make_agent(server), "Where is order A1?", max_turns=4, run_config=config)
    tools = by_operation(tracing, A.OP_EXECUTE_TOOL)
    assert len(tools) == 4
    assert all(A.TOOL_ARGS_FINGERPRINT not in s.attributes for s in tools)
    for model in by_operation(tracing, "chat"):
        assert model.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 120
        assert A.GEN_AI_RESPONSE_FINISH_REASONS not in model.attributes  # unknown, not guessed
    session = tracing.session_span("c")
    assert stalls(session) == []  # unknown arguments match nothing
    assert session.attributes[A.STOP_REASON] == A.ERROR


def test_write_effect_is_known_without_sdk_sensitive_data(tracing):
    config = RunConfig(group_id="c", trace_include_sensitive_data=False)
    script = turns(Turn.call("refund", order="A1", amount=10.0), Turn.answer("Done."))
    with ScriptedModelServer(script) as server:
        Runner.run_sync(make_agent(server, tools=(lookup, refund)), "Refund A1", run_config=config)
    (tool,) = by_operation(tracing, A.OP_EXECUTE_TOOL)
    assert A.TOOL_ARGS_FINGERPRINT not in tool.attributes
    assert tool.attributes[A.TOOL_EFFECT] == "write"  # from the policy's contract, at span start


# --- living beside the user's processors, the OpenAI instrumentation, and uninstrument ------------------------
def test_user_processor_still_receives_everything(tracing, user_processor):
    with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
        Runner.run_sync(make_agent(server), "Where is order A1?")
    events = user_processor.events
    assert events[0] == ("trace_start", "Agent workflow")
    assert events[-1] == ("trace_end", "Agent workflow")
    for kind in ("agent", "generation", "function"):
        assert ("span_start", kind) in events and ("span_end", kind) in events
    assert events.count(("span_end", "generation")) == 2


def test_guard_survives_set_trace_processors(tracing, user_processor):
    agents.set_trace_processors([user_processor])  # what apps do to stop the export to OpenAI
    with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
        Runner.run_sync(make_agent(server), "Where is order A1?", run_config=RunConfig(group_id="c"))
    assert tracing.session_span("c").attributes[A.STOP_REASON] == A.COMPLETED
    assert ("trace_end", "Agent workflow") in user_processor.events


@pytest.mark.parametrize("removable", [True, False], ids=["removed", "sdk-without-removal"])
def test_uninstrument_stops_the_spans_and_keeps_the_users_processor(user_processor, monkeypatch, removable):
    if not removable:  # an SDK whose internals we cannot reach: the processor stays, inert
        from otel_agentguard.instrumentation.openai_agents import _registration

        monkeypatch.setattr(_registration, "_remove", lambda provider, processor: None)

    def run_once(server: ScriptedModelServer) -> None:
        server.script = turns(LOOKUP, ANSWER)
        Runner.run_sync(make_agent(server), "Where is order A1?")

    with GuardedTracing() as tracing, ScriptedModelServer(turns(ANSWER)) as server:
        instrumentor = OpenAIAgentsInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        run_once(server)
        instrumented = len(tracing.spans())
        assert instrumented == 4
        instrumentor.uninstrument()
        run_once(server)
        assert len(tracing.spans()) == instrumented
        assert user_processor.events.count(("trace_end", "Agent workflow")) == 2
        # And back again, once.
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            run_once(server)
        finally:
            instrumentor.uninstrument()
        assert len(tracing.spans()) == 2 * instrumented


class ModelCallTransport(httpx2.AsyncBaseTransport):
    """Does at the HTTP layer what ``agentguard_openai`` does around ``create()``: a ModelCall."""

    def __init__(self, tracer) -> None:
        self._tracer = tracer
        self._inner = httpx2.AsyncHTTPTransport()
        self.calls: list[ModelCall] = []

    async def handle_async_request(self, request):
        call = ModelCall.start(self._tracer, provider="openai", request_model=MODEL)
        self.calls.append(call)
        with call.activated():
            response = await self._inner.handle_async_request(request)
            await response.aread()
        usage = json.loads(response.content)["usage"]
        call.finish(ModelResult(input_tokens=usage["prompt_tokens"], output_tokens=usage["completion_tokens"]))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def test_one_model_step_per_call_beside_a_model_call_instrumentation(tracing):
    transport = ModelCallTransport(tracing.tracer_provider.get_tracer("provider-instrumentation"))
    with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
        agent = make_agent(server, http_client=httpx2.AsyncClient(transport=transport))
        Runner.run_sync(agent, "Where is order A1?", run_config=RunConfig(group_id="c"))
    assert len(transport.calls) == 2
    assert not any(call.owned for call in transport.calls)  # each enriched the open model span
    assert_completed_lookup(tracing, "c")


def test_one_model_step_per_call_beside_agentguard_openai(tracing):
    openai_instrumentation = pytest.importorskip("otel_agentguard.instrumentation.openai")
    instrumentor = openai_instrumentation.OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    try:
        with ScriptedModelServer(turns(LOOKUP, ANSWER)) as server:
            Runner.run_sync(make_agent(server), "Where is order A1?", run_config=RunConfig(group_id="c"))
    finally:
        instrumentor.uninstrument()
    assert_completed_lookup(tracing, "c")


def test_enforce_mode_stops_the_run_through_agentguard_openai(user_processor):
    """The model span made here is current during the SDK's OpenAI call, so the OpenAI
    instrumentation's cut point finds the session and stops the looping run there."""
    from otel_agentguard import AgentStopped

    openai_instrumentation = pytest.importorskip("otel_agentguard.instrumentation.openai")
    policy = parse_policy('[escalation]\ntool_loop = ["stop"]\n')
    with GuardedTracing(policy, mode="enforce") as tracing:
        instrumentors = [OpenAIAgentsInstrumentor(), openai_instrumentation.OpenAIInstrumentor()]
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            with ScriptedModelServer(same_call_forever) as server:
                with pytest.raises(AgentStopped) as stopped:
                    Runner.run_sync(make_agent(server), "Where is order A1?", max_turns=20,
                                    run_config=RunConfig(group_id="c"))
                assert len(server.requests) == 3  # the fourth model call was never sent
        finally:
            for instrumentor in instrumentors:
                instrumentor.uninstrument()
        assert stopped.value.stop_reason == A.TOOL_LOOP
        session = tracing.session_span("c")
        assert session.attributes[A.STOP_REASON] == A.TOOL_LOOP
        assert session.attributes[A.ENFORCED] is True
        # A stop by the guard is how the run was meant to end, not an error.
        assert session.status.status_code is StatusCode.UNSET
        assert all(s.status.status_code is StatusCode.UNSET for s in by_operation(tracing, "chat"))


def test_enforce_mode_answers_a_repeated_function_tool_call_itself(user_processor):
    """With the default ladder the fourth identical call is not run: the guard's message is its result."""
    from otel_agentguard import AgentStopped

    openai_instrumentation = pytest.importorskip("otel_agentguard.instrumentation.openai")
    with GuardedTracing(mode="enforce") as tracing:
        instrumentors = [OpenAIAgentsInstrumentor(), openai_instrumentation.OpenAIInstrumentor()]
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            with ScriptedModelServer(same_call_forever) as server:
                with pytest.raises(AgentStopped) as stopped:
                    Runner.run_sync(make_agent(server), "Where is order A1?", max_turns=20,
                                    run_config=RunConfig(group_id="n"))
        finally:
            for instrumentor in instrumentors:
                instrumentor.uninstrument()
    assert stopped.value.stop_reason == A.TOOL_LOOP
    sent = server.requests[-1].body["messages"]
    nudges = [m["content"] for m in sent if m["role"] == "tool" and "otel_agentguard" in str(m["content"])]
    assert len(nudges) == 1 and "Do not call it again" in nudges[0]
    assert server.rejected == []
    tools = [s for s in by_operation(tracing, "execute_tool") if s.attributes.get(A.INTERVENTION)]
    assert [s.attributes[A.INTERVENTION] for s in tools] == ["tool_loop", "tool_loop"]


# --- output repetition: a streamed answer that chants -----------------------------------------------
CHANT_PREFIX = ("Order A1 left the warehouse on Monday and reached the regional depot on Tuesday. The carrier "
                "reports a delay at the depot because a customs document is missing. The parcel should move "
                "again within a day and reach you by Friday. If it has not moved by Thursday evening, please "
                "write to us again with the order number.\n\n"
                "Deliveries in your area usually take two to three working days from the depot. The driver "
                "will ring before arriving, and if nobody is at home the parcel goes to the nearest pickup "
                "point, where it waits for ten days. You can also change the delivery day on the carrier's "
                "site with the tracking number from your confirmation email.\n\n")
CHANT = Turn.chant(CHANT_PREFIX, "Let me check the status of order A1 once more. ", copies=200)


@pytest.mark.parametrize("mode", ["observe", "enforce"])
def test_a_chanting_streamed_answer_through_agentguard_openai(user_processor, mode):
    """The SDK's model span is current during its OpenAI stream, which agentguard_openai checks chunk by
    chunk: observe mode records the alert, enforce mode stops the run inside the stream."""
    from otel_agentguard import AgentStopped
    from otel_agentguard.judge.repetition import RepetitionSummary

    openai_instrumentation = pytest.importorskip("otel_agentguard.instrumentation.openai")
    received: list[str] = []
    stopped = None

    async def run(agent):
        streamed = Runner.run_streamed(agent, "Where is order A1?", run_config=RunConfig(group_id="r"))
        async for event in streamed.stream_events():
            if event.type == "raw_response_event" and getattr(event.data, "type", "") == "response.output_text.delta":
                received.append(event.data.delta)

    with GuardedTracing(mode=mode) as tracing:
        instrumentors = [OpenAIAgentsInstrumentor(), openai_instrumentation.OpenAIInstrumentor()]
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            with ScriptedModelServer(turns(CHANT)) as server:
                try:
                    asyncio.run(run(make_agent(server, tools=())))
                except AgentStopped as exc:
                    stopped = exc
        finally:
            for instrumentor in instrumentors:
                instrumentor.uninstrument()
    (model,) = by_operation(tracing, "chat")
    summary = RepetitionSummary.from_attribute(model.attributes[A.OUTPUT_REPETITION])
    session = tracing.session_span("r")
    assert session.attributes[A.STOP_REASON] == A.OUTPUT_REPETITION_PROBE
    assert [s[A.PROBE] for s in stalls(session)] == [A.OUTPUT_REPETITION_PROBE]
    assert stalls(session)[0][A.EVIDENCE] == (model.attributes[A.SEQUENCE],)
    onset = len(CHANT_PREFIX) + len("Let me check the status of order A1 once more. ")
    assert summary.finding is not None and summary.finding.end_offset <= 1.3 * onset
    text = "".join(received)
    if mode == "observe":
        assert stopped is None and text == CHANT.text
    else:
        assert stopped is not None and stopped.stop_reason == A.OUTPUT_REPETITION_PROBE
        assert stopped.breakpoint["partial_text_chars"] == len(text) < summary.finding.end_offset
        assert session.attributes[A.ENFORCED] is True
