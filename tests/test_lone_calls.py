"""Lone calls: a model or tool call that is its trace's root span, with no session anywhere.

In observe mode such a call opens no live session: it is numbered 1 at its start and its
one step is judged alone at its end. These tests hold that shortcut to the verdicts, spans
and metrics the same calls get when each opens a session, as in enforce mode.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time

import openai
import pytest
from opentelemetry import trace

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.judge.session_judge import SessionJudge, Verdict
from otel_agentguard.live.sessions import LiveSessions
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

POLICY = parse_policy(
    """
version = "lone-1"
[profiles.default]
max_tokens = 1000
[profiles.strict]
max_tokens = 100
[tools.refund]
effect = "write"
"""
)
ASKED_FOR = json.dumps([{"role": "assistant", "parts": [
    {"type": "tool_call", "id": "c1", "name": "get_order", "arguments": {"order": "A1"}}]}])


def _lone_calls(tracing: GuardedTracing) -> None:
    """Lone calls of every shape: what each is judged, the sessions' path must agree on."""
    provider = tracing.tracer_provider

    @ag.tool(tracer_provider=provider)
    def get_order(order: str) -> dict:
        return {"order": order}

    @ag.tool(tracer_provider=provider)
    def refund(order: str) -> dict:
        raise RuntimeError("payment service down")

    tracing.record_model_call(tool_calls=2, input_tokens=400, output_tokens=50)  # a turn: abandoned
    tracing.record_model_call(final_claims=())  # an honest final answer: completed
    tracing.record_model_call(final_claims=("write",))  # a write nobody made: fake_completion
    tracing.record_model_call(input_tokens=5000, tool_calls=1)  # one call over the token budget
    tracing.tracer.start_span("chat gpt-4o", attributes={  # the profile its span names
        A.GEN_AI_OPERATION_NAME: "chat", A.PROFILE: "strict", A.GEN_AI_USAGE_INPUT_TOKENS: 500}).end()
    get_order("A1")  # a tool call alone: worth a verdict span
    with pytest.raises(RuntimeError):
        refund("A1")  # a failed one
    tracing.tracer.start_span("chat gpt-4o", attributes={  # names a call to derive: judged in a session
        A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"],
        A.GEN_AI_OUTPUT_MESSAGES: ASKED_FOR}).end()
    stopped = tracing.tracer.start_span("execute_tool x", attributes={  # no step by its end
        A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "x"})
    stopped.set_attribute(A.GEN_AI_OPERATION_NAME, "not a step any more")
    stopped.end()


def _observed(tracing: GuardedTracing) -> tuple[list, list]:
    """Every span's name, sequence and verdict attributes and stall events, in order (trace ids
    and response ids differ between runs: they are left out), and every metric point of the guard."""
    spans = []
    for span in tracing.spans():
        attributes = {k: v for k, v in span.attributes.items() if k not in (A.SESSION_ID, A.GEN_AI_RESPONSE_ID)}
        events = [(e.name, dict(e.attributes)) for e in span.events]
        spans.append((span.name, sorted(attributes.items()), events))
    metrics = []
    for name in (A.METRIC_SESSIONS, A.METRIC_STALLS, A.METRIC_SESSION_STEPS, A.METRIC_SESSION_TOKENS):
        for labels, point in tracing.metric_points(name):
            metrics.append((name, sorted(labels.items()), getattr(point, "value", None), getattr(point, "sum", None)))
    return spans, sorted(metrics)


def test_lone_calls_judged_alone_as_their_sessions_would_judge_them(monkeypatch):
    with GuardedTracing(POLICY) as tracing:
        _lone_calls(tracing)
        assert tracing.processor.live_session_count() == 0
        alone = _observed(tracing)
    monkeypatch.setattr(LiveSessions, "start_lone_call", lambda self, session_id, attrs, start_ns: None)
    with GuardedTracing(POLICY) as tracing:
        _lone_calls(tracing)
        in_sessions = _observed(tracing)
    assert alone == in_sessions
    spans, metrics = alone
    reasons: dict[str, int] = {}
    for name, labels, value, _ in metrics:
        if name == A.METRIC_SESSIONS and value:
            reason = dict(labels)[A.STOP_REASON]
            reasons[reason] = reasons.get(reason, 0) + value
    assert reasons == {"abandoned": 5, "completed": 1, "fake_completion": 1, "budget_exceeded": 2}
    verdicts = [dict(attributes)[A.STOP_REASON] for name, attributes, _ in spans if name == "agentguard.verdict"]
    assert verdicts == ["fake_completion", "budget_exceeded", "budget_exceeded", "abandoned", "abandoned"]


def _openai_lone_calls(tracing: GuardedTracing) -> None:
    """Real openai calls, each its own trace: sync, streamed and async."""
    script = turns(
        Turn.call("get_order", order="A1"),
        Turn.calls(("get_order", {"order": "A2"}), input_tokens=5000),  # over the budget
        Turn.answer("Your order A1 is on its way."),
        Turn.answer("I have refunded order A1."),  # streamed; no refund tool ran: fake_completion
        Turn.answer("Done, I refunded it."),
    )
    messages = [{"role": "user", "content": "Where is my refund?"}]
    with ScriptedModelServer(script) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        for _ in range(3):
            client.chat.completions.create(model="gpt-4o", messages=messages)
        for _ in client.chat.completions.create(model="gpt-4o", messages=messages, stream=True):
            pass

        async def answer() -> None:
            async with openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0) as client:
                await client.chat.completions.create(model="gpt-4o", messages=messages)

        asyncio.run(answer())


def test_real_openai_lone_calls_judged_alone_as_in_sessions(instrumented_tracing, monkeypatch):
    with instrumented_tracing(OpenAIInstrumentor(), policy=POLICY) as tracing:
        _openai_lone_calls(tracing)
        assert tracing.processor.live_session_count() == 0
        alone = _observed(tracing)
    monkeypatch.setattr(LiveSessions, "start_lone_call", lambda self, session_id, attrs, start_ns: None)
    with instrumented_tracing(OpenAIInstrumentor(), policy=POLICY) as tracing:
        _openai_lone_calls(tracing)
        in_sessions = _observed(tracing)
    assert alone == in_sessions
    spans, metrics = alone
    verdicts = [dict(attributes)[A.STOP_REASON] for name, attributes, _ in spans if name == "agentguard.verdict"]
    assert verdicts == ["budget_exceeded", "fake_completion", "fake_completion"]


def test_a_lone_call_opens_no_session_while_it_runs():
    with GuardedTracing() as tracing:
        with tracing.tracer.start_as_current_span("chat gpt-4o", attributes={A.GEN_AI_OPERATION_NAME: "chat"}) as call:
            assert len(tracing.processor._store) == 0
            assert tracing.processor.live_session_count() == 1  # still live, for a drain to wait on
            assert tracing.processor.live_session_ids() == [call.attributes[A.SESSION_ID]]
            assert call.attributes[A.SEQUENCE] == 1
            assert call.attributes[A.SESSION_ID] == trace.format_trace_id(call.get_span_context().trace_id)
        counted = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
        assert counted == {"abandoned": 1}
        assert not tracing.processor._sessions.lone  # forgotten with its end


def test_a_step_inside_a_lone_call_makes_it_a_session_from_its_step_one():
    with GuardedTracing(POLICY) as tracing:
        with tracing.tracer.start_as_current_span("execute_tool research", attributes={
                A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "research",
                A.PROFILE: "strict"}) as tool:  # its session's profile: at most 100 tokens
            assert len(tracing.processor._store) == 0
            for _ in range(2):  # a sub-agent inside the tool
                tracing.record_model_call(tool_calls=1, input_tokens=60)
            assert len(tracing.processor._store) == 1
            assert tracing.processor.live_session_count() == 1  # the claimed lone call counted once
        session_id = trace.format_trace_id(tool.get_span_context().trace_id)
        steps = sorted(s.attributes[A.SEQUENCE] for s in tracing.spans() if A.SEQUENCE in s.attributes)
        assert steps == [1, 2, 3]
        verdict = tracing.session_span(session_id)  # the tool's end ended the trace's session
        assert {key: verdict.attributes[key] for key in (A.STOP_REASON, A.PROFILE, A.STEPS, A.TOKENS)} == {
            A.STOP_REASON: "budget_exceeded", A.PROFILE: "strict", A.STEPS: 1, A.TOKENS: 120}
        assert tracing.processor.live_session_count() == 0


@pytest.mark.parametrize(("asked_for", "next_number"), [(None, 2), (ASKED_FOR, 3)],  # the call asked for: 2
                         ids=["judged alone", "judged in a session"])
def test_a_span_of_the_trace_after_the_lone_call_counts_on(asked_for, next_number):
    with GuardedTracing() as tracing:
        attributes = {A.GEN_AI_OPERATION_NAME: "chat"}
        if asked_for is not None:
            attributes[A.GEN_AI_OUTPUT_MESSAGES] = asked_for
        call = tracing.tracer.start_span("chat gpt-4o", attributes=attributes)
        call.end()
        with trace.use_span(call):  # a task the call started, still running after it
            tracing.record_model_call(tool_calls=1)
        late = [s for s in tracing.spans() if s.name == "chat gpt-4o" and s.parent is not None]
        assert late[0].attributes[A.SEQUENCE] == next_number
        assert late[0].attributes[A.SESSION_ID] == call.attributes[A.SESSION_ID]


def test_two_steps_claiming_one_lone_call_share_its_session():
    with GuardedTracing() as tracing:
        call = tracing.tracer.start_span("chat gpt-4o", attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        session_id = call.attributes[A.SESSION_ID]
        sessions = tracing.processor._sessions
        first = sessions._claim_lone_call(session_id)  # as two threads' steps may, before either is stored
        assert first is not None and sessions._claim_lone_call(session_id) is first
        assert first.sequence.last == 1 and first.running == 1  # the lone call's step 1, running
        call.end()


def test_a_claim_made_while_another_was_being_built_is_the_one_kept(monkeypatch):
    with GuardedTracing() as tracing:
        call = tracing.tracer.start_span("chat gpt-4o", attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        session_id = call.attributes[A.SESSION_ID]
        sessions = tracing.processor._sessions
        build = sessions._new_session
        other = []

        def another_thread_claims_meanwhile(*args, **kwargs):
            if not other:
                other.append(None)
                other[0] = sessions._claim_lone_call(session_id)
            return build(*args, **kwargs)

        monkeypatch.setattr(sessions, "_new_session", another_thread_claims_meanwhile)
        assert sessions._claim_lone_call(session_id) is other[0] is not None
        call.end()


def test_steps_starting_in_a_lone_call_from_many_threads_share_one_session():
    with GuardedTracing() as tracing:
        root = tracing.tracer.start_span("execute_tool fan_out", attributes={
            A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "fan_out"})
        start = threading.Barrier(8)

        def inner() -> None:
            start.wait()
            with trace.use_span(root):
                tracing.record_model_call(tool_calls=1)

        threads = [threading.Thread(target=inner) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert tracing.processor.live_session_count() == 1
        root.end()
        sequences = sorted(s.attributes[A.SEQUENCE] for s in tracing.spans() if A.SEQUENCE in s.attributes)
        assert sequences == list(range(1, 10))  # each number once, the root's 1 among them
        assert tracing.processor.live_session_count() == 0


def test_a_lone_call_running_at_shutdown_is_judged_once():
    tracing = GuardedTracing()
    with tracing:
        call = tracing.tracer.start_span("chat gpt-4o", attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        tracing.processor.shutdown()
        counted = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
        assert counted == {"abandoned": 1}  # as every session still open at shutdown
        call.end()
        counted = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
        assert counted == {"abandoned": 1}


def test_enforce_mode_gives_a_lone_call_its_session():
    with GuardedTracing(mode="enforce") as tracing:
        with tracing.tracer.start_as_current_span("chat gpt-4o", attributes={A.GEN_AI_OPERATION_NAME: "chat"}):
            assert tracing.processor.live_session_count() == 1  # its hooks ask it before and after the call


def test_a_verdict_made_by_the_judge_is_the_dataclass_it_claims_to_be():
    judge = SessionJudge("s", POLICY)
    verdict = judge.finish(end_ns=5)
    fields = {field.name: getattr(verdict, field.name) for field in dataclasses.fields(Verdict)}
    assert verdict == Verdict(**fields)  # every field set
    assert vars(verdict).keys() == fields.keys()
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.stop_reason = "completed"  # type: ignore[misc]
    assert dataclasses.replace(verdict, steps=3).steps == 3


def _lone_tool(tracing: GuardedTracing, **attributes):
    return tracing.tracer.start_span("execute_tool research", attributes={
        A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "research", **attributes})


def test_a_lone_call_ending_while_a_step_inside_claims_it_leaves_no_number_used_twice(monkeypatch):
    with GuardedTracing() as tracing:
        call = _lone_tool(tracing)
        sessions = tracing.processor._sessions
        build = sessions._new_session

        def the_call_ends_meanwhile(*args, **kwargs):  # as on another thread, mid-claim
            if call.is_recording():
                call.end()
            return build(*args, **kwargs)

        monkeypatch.setattr(sessions, "_new_session", the_call_ends_meanwhile)
        inner = tracing.tracer.start_span("chat gpt-4o", context=trace.set_span_in_context(call),
                                          attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        inner.end()
        assert (call.attributes[A.SEQUENCE], inner.attributes[A.SEQUENCE]) == (1, 2)


def test_a_step_starting_as_a_lone_call_goes_to_its_session_joins_that_session(monkeypatch):
    with GuardedTracing() as tracing:
        call = tracing.tracer.start_span("chat gpt-4o", attributes={  # names a call: judged in a session
            A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"],
            A.GEN_AI_OUTPUT_MESSAGES: ASKED_FOR})
        sessions = tracing.processor._sessions
        to_session = sessions.lone_call_session
        inner = []

        def a_step_starts_meanwhile(session_id, stored):  # as on another thread
            inner.append(tracing.tracer.start_span("chat gpt-4o", context=trace.set_span_in_context(call),
                                                   attributes={A.GEN_AI_OPERATION_NAME: "chat"}))
            return to_session(session_id, stored)

        monkeypatch.setattr(sessions, "lone_call_session", a_step_starts_meanwhile)
        call.end()
        inner[0].end()
        tracing.processor.shutdown()
        verdict = tracing.session_span(call.attributes[A.SESSION_ID])
        # the call's step, the step inside and the call it asked for, all in one session
        assert (verdict.attributes[A.STEPS], inner[0].attributes[A.SEQUENCE]) == (1, 2)
        steps = tracing.metric_points(A.METRIC_SESSION_STEPS)
        assert [point.sum for _, point in steps if point.sum] == [1]
        assert sum(point.value for _, point in tracing.metric_points(A.METRIC_SESSIONS)) == 1


def test_a_claimed_lone_call_evicted_is_not_brought_back_ended():
    with GuardedTracing(max_sessions=1) as tracing:
        call = _lone_tool(tracing)
        inside = trace.set_span_in_context(call)
        tracing.tracer.start_span("chat gpt-4o", context=inside, attributes={
            A.GEN_AI_OPERATION_NAME: "chat"}).end()  # claims the lone call
        tracing.tracer.start_span("chat other", attributes={  # a second session: the store is full
            A.GEN_AI_OPERATION_NAME: "chat", A.SESSION_ID: "other"}).end()
        session_id = call.attributes[A.SESSION_ID]
        assert tracing.processor._sessions.peek(session_id) is None  # evicted, its verdict written
        late = tracing.tracer.start_span("chat gpt-4o", context=inside, attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        session = tracing.processor._sessions.peek(session_id)
        assert session is not None and not session.ended  # a new run of the session, not the ended one
        assert late.attributes[A.SEQUENCE] == 3  # counting on
        late.end()
        call.end()


def test_lone_calls_beyond_the_limit_open_sessions(monkeypatch):
    import otel_agentguard.live.sessions as live_sessions

    monkeypatch.setattr(live_sessions, "_MAX_LONE_CALLS", 1)
    with GuardedTracing() as tracing:
        first = tracing.tracer.start_span("chat a", attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        second = tracing.tracer.start_span("chat b", attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        assert (len(tracing.processor._sessions.lone), len(tracing.processor._store)) == (1, 1)
        first.end()
        second.end()
        assert sum(point.value for _, point in tracing.metric_points(A.METRIC_SESSIONS)) == 2


def test_a_lone_call_that_never_ends_is_ended_when_idle(monkeypatch):
    with GuardedTracing(idle_timeout_s=0.05) as tracing:
        stuck = tracing.tracer.start_span("chat gpt-4o", attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        time.sleep(0.1)
        tracing.record_model_call(final_claims=())  # the next lone call finds it idle
        counted = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
        assert counted == {"abandoned": 1, "completed": 1}
        assert stuck.attributes[A.SESSION_ID] not in tracing.processor._sessions.lone
        stuck.end()  # too late: judged already
        counted = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
        assert counted == {"abandoned": 1, "completed": 1}
