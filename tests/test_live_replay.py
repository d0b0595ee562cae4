"""Replaying a live run's exported trace gives the same alerts at the same sequence numbers."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.policy import parse_policy
from otel_agentguard.processor import AgentGuardSpanProcessor
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
