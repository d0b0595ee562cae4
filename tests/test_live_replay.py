"""Replaying a live run's exported trace gives the same alerts at the same sequence numbers."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.replay import replay_files
from otel_agentguard.testing import record_model_call

POLICY = parse_policy(
    """
version = "live-replay"
[profiles.default]
window = 6
repeat_threshold = 3
no_progress_steps = 4
error_streak = 3
max_steps = 14
max_tokens = 3000
[tools.refund]
effect = "write"
"""
)


def run_scripted_sessions(provider: TracerProvider) -> dict[str, ag.Verdict]:
    tracer = provider.get_tracer("scripted-agent")
    verdicts: dict[str, ag.Verdict] = {}

    @ag.tool(tracer_provider=provider)
    def lookup(order: str) -> dict:
        return {"order": order, "state": "stalled"}

    @ag.tool(tracer_provider=provider)
    def search(q: str) -> list:
        return []

    @ag.tool(tracer_provider=provider)
    def flaky(n: int) -> dict:
        raise TimeoutError("upstream timed out")

    @ag.tool(tracer_provider=provider)
    def refund(order: str) -> dict:
        return {"refunded": order}

    @ag.tool(tracer_provider=provider)
    def step(name: str) -> dict:
        return {"visited": name}

    def model(**kwargs):
        record_model_call(tracer, input_tokens=150, output_tokens=30, **kwargs)

    def session(session_id: str, body) -> None:
        with ag.session(session_id, tracer_provider=provider) as handle:
            try:
                body()
            except TimeoutError:
                pass
        verdicts[session_id] = handle.verdict

    def looping():
        model(tool_calls=1)
        for _ in range(4):
            lookup("A1")
            model(tool_calls=1)
        model(final_claims=("write",))

    def cycling():
        for _ in range(3):
            for name in ("a", "b", "c"):
                step(name)
        model(final_claims=())

    def erroring():
        for n in range(2):
            search(f"q{n}")
        for n in range(2):
            try:
                flaky(n)
            except TimeoutError:
                pass
        model(final_claims=())

    def honest():
        lookup("B2")
        refund("B2")
        model(final_claims=("write",))

    def spending():
        for n in range(18):  # the 15th tool step crosses max_steps, the 17th model call max_tokens
            model(tool_calls=1)
            step(f"s{n}")

    def parallel_batch():
        model(tool_calls=3)
        attrs = {A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "fetch",
                 A.TOOL_ARGS_FINGERPRINT: "same-args", A.TOOL_RESULT_FINGERPRINT: "same-result"}
        spans = [tracer.start_span("execute_tool fetch", attributes=attrs) for _ in range(3)]
        for span in (spans[1], spans[2], spans[0]):
            span.end()
        model(final_claims=())

    scripts = {"looping": looping, "cycling": cycling, "erroring": erroring, "honest": honest,
               "spending": spending, "parallel": parallel_batch}
    threads = [threading.Thread(target=session, args=(name, body)) for name, body in scripts.items()]
    for thread in threads:  # interleave the sessions' spans in time and in the file
        thread.start()
    for thread in threads:
        thread.join()

    # A session with no session span: its verdict goes on a verdict span.
    with tracer.start_as_current_span("request"):
        for _ in range(3):
            lookup("C3")
        model(final_claims=())
    return verdicts


def alert_keys(verdict):
    return [(a.probe, a.sequence, a.evidence, a.budget_kind) for a in verdict.alerts]


@pytest.fixture
def live_run(tmp_path):
    path = tmp_path / "trace.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(path), max_export_batch_size=7))
    processor = AgentGuardSpanProcessor(POLICY, tracer_provider=provider)
    provider.add_span_processor(processor)
    verdicts = run_scripted_sessions(provider)
    provider.shutdown()
    return path, verdicts


def test_replay_of_live_trace_reproduces_every_alert(live_run):
    path, live = live_run
    replayed = {session.session_id: verdict for session, verdict in replay_files([path], POLICY)}
    assert set(live) <= set(replayed)
    expected = {
        "looping": "fake_completion",
        "cycling": "no_progress",  # no new state from the 4th step on; the cycle follows at the 9th
        "erroring": "error_streak",
        "honest": "completed",
        "spending": "budget_exceeded",
        "parallel": "tool_loop",
    }
    for session_id, stop_reason in expected.items():
        assert live[session_id].stop_reason == stop_reason, session_id
        assert replayed[session_id].stop_reason == stop_reason, session_id
        assert alert_keys(replayed[session_id]) == alert_keys(live[session_id]), session_id
        assert replayed[session_id].steps == live[session_id].steps
        assert replayed[session_id].tokens == live[session_id].tokens
    assert [a.probe for a in live["cycling"].alerts] == ["no_progress", "cycle"]
    assert [a.budget_kind for a in live["spending"].alerts] == ["steps", "tokens"]
    # every shape raised something checkable
    assert alert_keys(live["looping"])[0] == ("tool_loop", 6, (2, 4, 6), None)
    assert alert_keys(live["parallel"])[0] == ("tool_loop", 4, (2, 3, 4), None)


def test_replay_of_a_spanless_session_matches_its_verdict_span(live_run):
    path, _ = live_run
    import json

    verdict_spans = []
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                verdict_spans += [s for s in ss["spans"] if s["name"] == "agentguard.verdict"]
    assert len(verdict_spans) == 1
    attrs = {a["key"]: a["value"] for a in verdict_spans[0]["attributes"]}
    session_id = attrs[A.SESSION_ID]["stringValue"]
    events = verdict_spans[0]["events"]
    replayed = {s.session_id: v for s, v in replay_files([path], POLICY)}
    verdict = replayed[session_id]
    assert attrs[A.STOP_REASON]["stringValue"] == verdict.stop_reason == "tool_loop"
    assert [e["attributes"][0]["value"]["stringValue"] for e in events] == [a.probe for a in verdict.alerts]


def test_session_lifecycles_agree_between_live_and_replay(tmp_path):
    """Reused ids, framework session spans, late steps and baggage: the two feeds agree."""
    from opentelemetry import baggage, context
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    path = tmp_path / "lifecycles.jsonl"
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    provider.add_span_processor(AgentGuardSpanProcessor(POLICY, tracer_provider=provider))
    tracer = provider.get_tracer("framework")

    @ag.tool(tracer_provider=provider)
    def lookup(order: str) -> dict:
        return {"order": order}

    def answer():
        record_model_call(tracer, final_claims=())

    # 1. one conversation id, three ag.session() runs: numbering goes on, three verdicts
    for _ in range(3):
        with ag.session("conv-1", tracer_provider=provider):
            lookup("A1")
            answer()
    # 2. the same without session spans: a final answer ends each run
    for _ in range(3):
        with tracer.start_as_current_span("turn", attributes={A.GEN_AI_CONVERSATION_ID: "conv-2"}):
            lookup("A1")
            answer()
    # 3. a framework's own invoke_agent span (not ag.session) that ends in an error
    with pytest.raises(RuntimeError):
        with tracer.start_as_current_span("invoke_agent planner", attributes={
                A.GEN_AI_OPERATION_NAME: "invoke_agent", A.GEN_AI_CONVERSATION_ID: "fw-1"}):
            for _ in range(3):
                lookup("B2")
            raise RuntimeError("framework crashed")
    # 4. a tool span that ends after its session ended is ignored by both feeds
    with ag.session("late", tracer_provider=provider):
        lookup("C3")
        lookup("C3")
        straggler = tracer.start_span("execute_tool lookup", attributes={
            A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "lookup",
            A.TOOL_ARGS_FINGERPRINT: "x", A.TOOL_RESULT_FINGERPRINT: "y"})
        answer()
    straggler.end()
    # 5. the session id comes in baggage, from a caller in another process
    token = context.attach(baggage.set_baggage("session.id", "from-baggage"))
    try:
        for _ in range(3):
            lookup("D4")
        answer()
    finally:
        context.detach(token)
    provider.shutdown()

    def stalls(span):
        return [(e.attributes[A.PROBE], tuple(e.attributes[A.EVIDENCE])) for e in span.events
                if e.name == A.STALL_EVENT]

    spans = memory.get_finished_spans()
    live = []
    for span in spans:
        attrs = span.attributes
        if A.STOP_REASON in attrs:
            events = stalls(span)
            if attrs.get(A.VERDICT):  # alerts raised while a framework's session span was open stay there
                events += [e for other in spans if other.attributes.get(A.SESSION_ID) == attrs[A.SESSION_ID]
                           and other.attributes.get(A.GEN_AI_OPERATION_NAME) == "invoke_agent" for e in stalls(other)]
            live.append((attrs[A.SESSION_ID], attrs[A.STOP_REASON], attrs[A.STEPS], events))
    replayed = [
        (v.session_id, v.stop_reason, v.steps, [(a.probe, a.evidence) for a in v.alerts])
        for _, v in replay_files([path], POLICY)
    ]
    assert sorted(live) == sorted(replayed)
    assert sorted(live) == sorted([
        ("conv-1", "completed", 2, []), ("conv-1", "completed", 2, []), ("conv-1", "completed", 2, []),
        ("conv-2", "completed", 2, []), ("conv-2", "completed", 2, []), ("conv-2", "completed", 2, []),
        ("fw-1", "tool_loop", 3, [("tool_loop", (1, 2, 3))]),
        ("late", "completed", 3, []),
        ("from-baggage", "tool_loop", 4, [("tool_loop", (1, 2, 3))]),
    ])
    conv1 = sorted(s.attributes[A.SEQUENCE] for s in memory.get_finished_spans()
                   if s.attributes.get(A.SESSION_ID) == "conv-1" and A.SEQUENCE in s.attributes)
    assert conv1 == [1, 2, 3, 4, 5, 6]  # monotonic per session id across its runs


@pytest.mark.parametrize("duration_ns", [0, -5], ids=["zero-duration", "ends-before-it-starts"])
def test_foreign_step_spans_without_duration_replay_as_judged_live(tmp_path, duration_ns):
    """Coarse clocks give a span one timestamp for start and end (and skewed ones an end
    before the start): another instrumentation's tool spans are still numbered and judged."""
    from opentelemetry import trace

    path = tmp_path / "trace.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    processor = AgentGuardSpanProcessor(POLICY, tracer_provider=provider)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("another-instrumentation")
    t0 = 1_760_000_000_000_000_000
    agent = tracer.start_span("invoke_agent support", start_time=t0, attributes={
        A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.GEN_AI_CONVERSATION_ID: "coarse-clock"})
    inside = trace.set_span_in_context(agent)
    for index in range(4):
        at = t0 + 1_000 * (index + 1)
        span = tracer.start_span("execute_tool lookup", context=inside, start_time=at, attributes={
            A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup",
            A.GEN_AI_TOOL_CALL_ARGUMENTS: '{"order": "A-1"}', A.GEN_AI_TOOL_CALL_RESULT: '{"state": "stalled"}'})
        span.end(end_time=at + duration_ns)
    live = processor.end_session(agent)
    agent.end(end_time=t0 + 10_000)
    provider.shutdown()
    (replayed,) = [verdict for session, verdict in replay_files([path], POLICY) if session.session_id == "coarse-clock"]
    assert live is not None and live.stop_reason == "tool_loop"
    assert replayed.stop_reason == live.stop_reason
    assert alert_keys(replayed) == alert_keys(live) == [("tool_loop", 3, (1, 2, 3), None)]
