"""The live span processor on a real SDK TracerProvider."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import otel_agentguard as ag
from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import PolicyError, parse_policy
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.testing import GuardedTracing

LOOPY = parse_policy(
    """
version = "test-1"
[profiles.default]
window = 6
repeat_threshold = 3
[tools.refund]
effect = "write"
"""
)


def make_tools(tracing: GuardedTracing):
    provider = tracing.tracer_provider

    @ag.tool(tracer_provider=provider)
    def query_logistics(order: str) -> str:
        return "stalled"

    @ag.tool(tracer_provider=provider)
    def get_order(order: str, verbose: bool = False) -> dict:
        return {"order": order, "state": "paid"}

    @ag.tool(tracer_provider=provider)
    def refund(order: str) -> dict:
        return {"refunded": order}

    return query_logistics, get_order, refund


def stall_events(span):
    return [dict(event.attributes) for event in span.events if event.name == A.STALL_EVENT]


def test_session_span_carries_verdict_totals_and_stall_events():
    with GuardedTracing(LOOPY) as tracing:
        query_logistics, get_order, _ = make_tools(tracing)
        with tracing.session("s-loop", agent_name="support"):
            tracing.record_model_call(input_tokens=100, output_tokens=10, tool_calls=1)
            get_order("A1")
            for _ in range(3):
                tracing.record_model_call(input_tokens=100, output_tokens=10, tool_calls=1)
                query_logistics("A1")
            tracing.record_model_call(input_tokens=100, output_tokens=10, final_claims=())

        span = tracing.session_span("s-loop")
        attrs = span.attributes
        assert span.name == "invoke_agent support"
        assert attrs[A.GEN_AI_OPERATION_NAME] == "invoke_agent"
        assert attrs[A.STOP_REASON] == "tool_loop"
        assert attrs[A.PROFILE] == "default"
        assert attrs[A.POLICY_VERSION] == "test-1"
        assert attrs[A.MODE] == "observe"
        assert attrs[A.STEPS] == 5  # four tool steps plus the final answer
        assert attrs[A.TOKENS] == 550
        assert attrs[A.COST_USD] == pytest.approx(5 * (100 * 2.5 + 10 * 10) / 1e6)
        events = stall_events(span)
        assert [e[A.PROBE] for e in events] == ["tool_loop"]
        # model calls are steps too: get_order is 2, the query_logistics calls are 4, 6, 8
        assert list(events[0][A.EVIDENCE]) == [4, 6, 8]
        assert "query_logistics" in events[0][A.DETAIL]
        assert events[0][A.DISPOSAL]
        assert tracing.verdict("s-loop").stop_reason == "tool_loop"


def test_every_span_in_a_session_is_stamped_and_steps_are_numbered_in_start_order():
    with GuardedTracing() as tracing:
        _, get_order, _ = make_tools(tracing)
        with tracing.session("s-stamp"):
            with tracing.tracer.start_as_current_span("http GET /orders"):
                get_order("A1")
            tracing.record_model_call(tool_calls=0, final_claims=())
        spans = {s.name: s for s in tracing.spans()}
        assert spans["http GET /orders"].attributes[A.SESSION_ID] == "s-stamp"
        assert A.SEQUENCE not in spans["http GET /orders"].attributes  # not a step
        assert spans["execute_tool get_order"].attributes[A.SEQUENCE] == 1
        assert spans["chat gpt-4o"].attributes[A.SEQUENCE] == 2


def test_parallel_tool_calls_ending_out_of_order_are_judged_in_sequence_order():
    with GuardedTracing(LOOPY) as tracing:
        tracer = tracing.tracer
        attrs = {A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "lookup",
                 A.TOOL_ARGS_FINGERPRINT: "same", A.TOOL_RESULT_FINGERPRINT: "r"}
        with tracing.session("s-par"):
            spans = [tracer.start_span("execute_tool lookup", attributes=attrs) for _ in range(3)]
            for span in reversed(spans):  # the last started ends first
                span.end()
        verdict = tracing.verdict("s-par")
        assert verdict.alerts[0].probe == "tool_loop"
        assert verdict.alerts[0].evidence == (1, 2, 3)
        assert verdict.alerts[0].sequence == 3


def test_a_tool_span_answering_a_call_a_model_span_asked_for_is_the_calls_one_step():
    # A model span that recorded its output asks for call c1 (a step derived from it would wait for
    # a tool span); the tool span with that call id answers it: one tool step, not two.
    asks = json.dumps([{"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"q": "x"}}]}])
    with GuardedTracing(LOOPY) as tracing:
        tracer = tracing.tracer
        with tracing.session("s-answered"):
            tracer.start_span("chat", attributes={
                A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_OUTPUT_MESSAGES: asks,
                A.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"]}).end()
            tracer.start_span("execute_tool lookup", attributes={
                A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "lookup", A.GEN_AI_TOOL_CALL_ID: "c1",
                A.GEN_AI_TOOL_CALL_ARGUMENTS: '{"q": "x"}', A.GEN_AI_TOOL_CALL_RESULT: '"found"'}).end()
            tracing.record_model_call(final_claims=())
        verdict = tracing.verdict("s-answered")
        assert (verdict.steps, verdict.stop_reason) == (2, "completed")  # the tool step and the answer


def test_without_a_session_span_the_verdict_goes_on_a_verdict_span_in_the_same_trace():
    with GuardedTracing(LOOPY) as tracing:
        query_logistics, _, _ = make_tools(tracing)
        with tracing.tracer.start_as_current_span("request") as root:
            for _ in range(3):
                query_logistics("A1")
            tracing.record_model_call(final_claims=())
        trace_id = trace.format_trace_id(root.get_span_context().trace_id)
        verdict_span = tracing.session_span(trace_id)
        assert verdict_span.name == "agentguard.verdict"
        assert verdict_span.attributes[A.STOP_REASON] == "tool_loop"
        assert verdict_span.context.trace_id == root.get_span_context().trace_id
        assert [e[A.PROBE] for e in stall_events(verdict_span)] == ["tool_loop"]


def test_session_id_comes_from_conversation_id_attribute():
    with GuardedTracing() as tracing:
        with tracing.tracer.start_as_current_span(
            "execute_tool search",
            attributes={A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "search",
                        A.GEN_AI_CONVERSATION_ID: "conv-7"},
        ):
            pass
        tracing.tracer.start_span("chat", attributes={
            A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_CONVERSATION_ID: "conv-7",
            A.GEN_AI_RESPONSE_FINISH_REASONS: ["stop"]}).end()
        verdict_span = tracing.session_span("conv-7")
        assert verdict_span.attributes[A.STOP_REASON] == "completed"
        assert verdict_span.attributes[A.STEPS] == 2


def test_fake_completion_outranks_other_alerts_and_a_real_write_prevents_it():
    with GuardedTracing(LOOPY) as tracing:
        query_logistics, _, refund = make_tools(tracing)
        with tracing.session("fake"):
            for _ in range(3):
                query_logistics("A1")
            tracing.record_model_call(final_claims=("write",))
        with tracing.session("real"):
            refund("A1")
            tracing.record_model_call(final_claims=("write",))
        assert tracing.verdict("fake").stop_reason == "fake_completion"
        assert [a.probe for a in tracing.verdict("fake").alerts] == ["tool_loop", "fake_completion"]
        assert tracing.verdict("real").stop_reason == "completed"


def test_exception_in_session_is_error_and_propagates_unchanged():
    class Boom(Exception):
        pass

    with GuardedTracing() as tracing:
        _, get_order, _ = make_tools(tracing)
        with pytest.raises(Boom):
            with tracing.session("err"):
                get_order("A1")
                raise Boom("agent crashed")
        span = tracing.session_span("err")
        assert span.attributes[A.STOP_REASON] == "error"
        assert span.status.status_code is trace.StatusCode.ERROR


def test_async_sessions_run_concurrently_keep_their_own_sequences_and_verdicts():
    async def main(tracing: GuardedTracing) -> None:
        @ag.tool(tracer_provider=tracing.tracer_provider)
        async def poll(job: int, tick: int) -> dict:
            await asyncio.sleep(0)
            return {"job": job, "tick": tick}

        @ag.tool(tracer_provider=tracing.tracer_provider)
        async def stuck(job: int) -> dict:
            await asyncio.sleep(0)
            return {"job": job, "state": "pending"}

        async def agent(index: int) -> None:
            async with tracing.session(f"a-{index}"):
                for tick in range(4):
                    if index % 2:
                        await stuck(index)
                    else:
                        await poll(index, tick)
                tracing.record_model_call(final_claims=())

        await asyncio.gather(*(agent(i) for i in range(50)))

    with GuardedTracing() as tracing:
        asyncio.run(main(tracing))
        for index in range(50):
            verdict = tracing.verdict(f"a-{index}")
            expected = "tool_loop" if index % 2 else "completed"
            assert verdict.stop_reason == expected, index
            assert verdict.steps == 5
        by_session: dict[str, list[int]] = {}
        for span in tracing.spans():
            seq = span.attributes.get(A.SEQUENCE)
            if seq is not None:
                by_session.setdefault(span.attributes[A.SESSION_ID], []).append(seq)
        assert all(sorted(seqs) == [1, 2, 3, 4, 5] for seqs in by_session.values())
        assert len(by_session) == 50


def test_threads_sharing_one_processor_never_share_a_sequence_counter():
    with GuardedTracing() as tracing:
        _, get_order, _ = make_tools(tracing)

        def agent(index: int) -> None:
            with tracing.session(f"t-{index}"):
                for step in range(10):
                    get_order(f"{index}-{step}")
                tracing.record_model_call(final_claims=())

        threads = [threading.Thread(target=agent, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        by_session: dict[str, list[int]] = {}
        for span in tracing.spans():
            seq = span.attributes.get(A.SEQUENCE)
            if seq is not None:
                by_session.setdefault(span.attributes[A.SESSION_ID], []).append(seq)
        assert len(by_session) == 16
        assert all(sorted(seqs) == list(range(1, 12)) for seqs in by_session.values())
        assert all(tracing.verdict(f"t-{i}").stop_reason == "completed" for i in range(16))


def test_metrics_count_sessions_and_stalls_with_low_cardinality_labels():
    with GuardedTracing(LOOPY) as tracing:
        query_logistics, _, _ = make_tools(tracing)
        for index in range(3):
            with tracing.session(f"m-{index}"):
                for _ in range(3 if index == 0 else 1):
                    query_logistics("A1")
                tracing.record_model_call(final_claims=())
        sessions = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
        assert sessions == {"tool_loop": 1, "completed": 2}
        stalls = [(labels, point.value) for labels, point in tracing.metric_points(A.METRIC_STALLS) if point.value]
        assert stalls == [({A.PROBE: "tool_loop", A.PROFILE: "default"}, 1)]
        # every series of the profile starts at zero, so rate() sees the first increase
        seeded = {p[0][A.STOP_REASON] for p in tracing.metric_points(A.METRIC_SESSIONS)}
        assert seeded == set(A.STOP_REASONS)
        steps = tracing.metric_points(A.METRIC_SESSION_STEPS)
        assert sum(point.count for _, point in steps) == 3
        for name in (A.METRIC_SESSIONS, A.METRIC_STALLS, A.METRIC_SESSION_STEPS, A.METRIC_SESSION_TOKENS,
                     A.METRIC_SESSION_DURATION):
            for labels, _ in tracing.metric_points(name):
                assert not any(str(v).startswith("m-") for v in labels.values()), labels


def test_evicted_sessions_end_as_abandoned_and_are_counted():
    with GuardedTracing(max_sessions=2) as tracing:
        _, get_order, _ = make_tools(tracing)
        for index in range(3):  # named, with no session spans and no final answers: all stay open
            with tracing.tracer.start_as_current_span(f"request-{index}", attributes={A.SESSION_ID: f"s{index}"}):
                get_order(str(index))
        verdict_spans = [s for s in tracing.spans() if s.name == "agentguard.verdict"]
        assert [s.attributes[A.STOP_REASON] for s in verdict_spans] == ["abandoned"]
        counted = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
        assert counted == {"abandoned": 1}
    # shutdown ends the two still open, also as abandoned
    counted = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
    assert counted == {"abandoned": 3}


def test_a_lone_call_ends_its_session_with_its_trace():
    with GuardedTracing() as tracing:
        _, get_order, _ = make_tools(tracing)
        tracing.record_model_call(tool_calls=2)  # its trace's root: no session id, nothing can follow
        assert tracing.processor.live_session_count() == 0  # not left to eviction
        get_order("A1")  # the same for a tool called outside any span
        assert tracing.processor.live_session_count() == 0
        counted = {p[0][A.STOP_REASON]: p[1].value for p in tracing.metric_points(A.METRIC_SESSIONS) if p[1].value}
        assert counted == {"abandoned": 2}  # as eviction judges them
        verdict_spans = [s for s in tracing.spans() if s.name == "agentguard.verdict"]
        assert [(s.attributes[A.STOP_REASON], s.attributes[A.STEPS]) for s in verdict_spans] == [("abandoned", 1)]


def test_a_session_without_a_name_ends_with_its_trace_root_even_when_the_root_is_no_step():
    with GuardedTracing() as tracing:
        _, get_order, _ = make_tools(tracing)
        with tracing.tracer.start_as_current_span("request") as request:  # the app's span around a run
            get_order("A1")
            get_order("A1")
            assert tracing.processor.live_session_count() == 1
        assert tracing.processor.live_session_count() == 0  # judged when the trace ended, not at shutdown
        (verdict,) = [s for s in tracing.spans() if s.name == "agentguard.verdict"]
        assert (verdict.attributes[A.STOP_REASON], verdict.attributes[A.STEPS]) == ("abandoned", 2)
        assert verdict.parent.span_id == request.get_span_context().span_id  # it hangs off the run's root


def test_a_named_session_or_one_under_a_remote_parent_stays_open_after_its_trace_root():
    with GuardedTracing() as tracing:
        _, get_order, _ = make_tools(tracing)
        tracing.tracer.start_span("execute_tool get_order", attributes={  # a root step of a named session
            A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "get_order", A.SESSION_ID: "named"}).end()
        assert "named" in tracing.processor.live_session_ids()  # it may go on in another trace
        remote = trace.SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=trace.TraceFlags(1))
        with _detached(), trace.use_span(trace.NonRecordingSpan(remote)):
            get_order("A2")  # a remote parent's child is no root: its trace may come back here
        assert trace.format_trace_id(0xABC) in tracing.processor.live_session_ids()
        assert tracing.processor.live_session_count() == 2


@contextlib.contextmanager
def _detached():
    token = otel_context.attach(otel_context.Context())
    try:
        yield
    finally:
        otel_context.detach(token)


def test_a_step_still_running_when_its_trace_root_ends_keeps_the_session():
    with GuardedTracing() as tracing:
        with tracing.tracer.start_as_current_span("execute_tool research", attributes={
                A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "research"}):
            inner = tracing.tracer.start_span(  # a sub-agent's call that outlives the tool
                "chat gpt-4o", attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        assert tracing.processor.live_session_count() == 1
        inner.end()
        assert tracing.processor.live_session_count() == 1  # no trigger left: eviction, as before
        with trace.use_span(inner):
            tracing.record_model_call(final_claims=())
        assert tracing.processor.live_session_count() == 0
        assert tracing.session_span(trace.format_trace_id(inner.get_span_context().trace_id)).attributes[
            A.STOP_REASON] == "completed"


def test_steps_that_end_without_running_leave_the_count_balanced():
    with GuardedTracing() as tracing:
        with tracing.tracer.start_as_current_span("execute_tool research", attributes={
                A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "research"}):
            # numbered at start, no step at its end: skipped
            numbered = tracing.tracer.start_span("execute_tool x", attributes={
                A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "x"})
            numbered.set_attribute(A.GEN_AI_OPERATION_NAME, "not a step any more")
            numbered.end()
            # the same call seen by a second instrumentation: a duplicate, never numbered
            with tracing.tracer.start_as_current_span("execute_tool research", attributes={
                    A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "research"}):
                pass
        assert tracing.processor.live_session_count() == 0


def test_a_stop_waiting_to_be_raised_keeps_the_lone_call_session():
    policy = parse_policy("""
version = "t"
[tools.refund]
effect = "write"
""")
    with GuardedTracing(policy, mode="enforce") as tracing:
        with tracing.tracer.start_as_current_span("chat gpt-4o", attributes={
                A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_RESPONSE_FINISH_REASONS: ["stop"],
                A.FINAL_CLAIMS: ["write"]}) as call:
            session_id = trace.format_trace_id(call.get_span_context().trace_id)
        assert tracing.processor.live_session_ids() == [session_id]  # the wrapper raises it after the span
        with pytest.raises(ag.AgentStopped) as stopped:
            tracing.processor.after_model_call(session_id, 0, ())
        assert stopped.value.stop_reason == "fake_completion"


def test_tool_calls_a_lone_model_call_asked_for_make_no_verdict_span():
    asked = {A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"],
             A.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [
                 {"type": "tool_call", "id": "c1", "name": "get_order", "arguments": {"order": "A1"}},
                 {"type": "tool_call", "id": "c2", "name": "refund", "arguments": {"order": "A1"}}]}])}
    with GuardedTracing() as tracing:
        _, get_order, _ = make_tools(tracing)
        tracing.tracer.start_span("chat gpt-4o", attributes=asked).end()  # its trace's root: the run is over
        assert tracing.processor.live_session_count() == 0
        assert not [s for s in tracing.spans() if s.name == "agentguard.verdict"]  # nothing shows the tools ran
        steps = tracing.metric_points(A.METRIC_SESSION_STEPS)
        assert sum(point.sum for _, point in steps) == 2  # the asked-for calls are still judged as steps
        with tracing.tracer.start_as_current_span("request"):
            tracing.tracer.start_span("chat gpt-4o", attributes=asked).end()
            get_order("A1")  # one call ran: an agent run, worth its verdict span
        tracing.processor.shutdown()  # ends it (the request's end does not)
        verdicts = [s for s in tracing.spans() if s.name == "agentguard.verdict"]
        assert [(s.attributes[A.STOP_REASON], s.attributes[A.STEPS]) for s in verdicts] == [("abandoned", 2)]


def test_a_failing_probe_never_reaches_the_application(monkeypatch):
    import otel_agentguard.judge.probes.tool_loop as tool_loop

    def explode(self, step, totals):
        raise RuntimeError("probe bug")

    monkeypatch.setattr(tool_loop.ToolLoop, "observe", explode)
    before = _internal_errors.counts().get("probe.tool_loop", 0)
    with GuardedTracing(LOOPY) as tracing:
        query_logistics, _, _ = make_tools(tracing)
        with tracing.session("broken"):
            for _ in range(3):
                assert query_logistics("A1") == "stalled"
            tracing.record_model_call(final_claims=("write",))
        # the other probes still judged the session
        assert tracing.verdict("broken").stop_reason == "fake_completion"
    assert _internal_errors.counts()["probe.tool_loop"] == before + 1


def test_a_step_that_cannot_be_read_is_lost_alone(monkeypatch):
    import otel_agentguard.live.processor as processor_module

    real = processor_module.step_from_attributes

    def flaky(attrs, *args, **kwargs):
        if attrs.get(A.GEN_AI_TOOL_NAME) == "get_order":
            raise ValueError("adapter bug")
        return real(attrs, *args, **kwargs)

    monkeypatch.setattr(processor_module, "step_from_attributes", flaky)
    before = _internal_errors.counts().get("processor.step", 0)
    with GuardedTracing(LOOPY) as tracing:
        query_logistics, get_order, _ = make_tools(tracing)
        with tracing.session("contained") as handle:
            assert get_order("A1") == {"order": "A1", "state": "paid"}
            for _ in range(3):
                query_logistics("A1")
            # judged while the session runs: the unreadable step 1 holds nothing back
            assert [e[A.PROBE] for e in stall_events(handle.span)] == ["tool_loop"]
        assert tracing.verdict("contained").alerts[0].evidence == (2, 3, 4)
    assert _internal_errors.counts()["processor.step"] == before + 1


def test_install_is_idempotent_and_rejects_a_non_sdk_provider():
    provider = TracerProvider()
    try:
        first = ag.install(tracer_provider=provider, policy=LOOPY)
        second = ag.install(tracer_provider=provider)
        assert first is second
        assert isinstance(first, AgentGuardSpanProcessor)
        assert provider._active_span_processor._span_processors.count(first) == 1
    finally:
        provider.shutdown()
    with pytest.raises(ValueError, match="SDK TracerProvider"):
        ag.install(tracer_provider=trace.NoOpTracerProvider())


def test_install_fails_loudly_on_bad_setup(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="observe"):
        AgentGuardSpanProcessor(mode="enforcing")
    monkeypatch.setenv("OTEL_AGENTGUARD_MODE", "loud")
    with pytest.raises(ValueError, match="OTEL_AGENTGUARD_MODE"):
        AgentGuardSpanProcessor()
    monkeypatch.delenv("OTEL_AGENTGUARD_MODE")
    bad = tmp_path / "bad.toml"
    bad.write_text("[profiles.default]\nwindow = 0\n")
    with pytest.raises(PolicyError, match=r"bad.toml:2: profiles.default.window"):
        ag.install(tracer_provider=TracerProvider(), policy=bad)


def test_profile_and_task_type_choose_thresholds():
    policy = parse_policy(
        """
[profiles.strict]
max_steps = 2
[task_types]
refund = "strict"
"""
    )
    with GuardedTracing(policy) as tracing:
        _, get_order, _ = make_tools(tracing)
        with tracing.session("by-task", task_type="refund"):
            for index in range(3):
                get_order(str(index))
        with tracing.session("by-default"):
            for index in range(3):
                get_order(str(index))
        assert tracing.verdict("by-task").stop_reason == "budget_exceeded"
        assert tracing.verdict("by-task").profile == "strict"
        assert tracing.verdict("by-default").stop_reason == "abandoned"
