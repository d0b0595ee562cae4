"""The service's session tracker: bounded, and never loses a session without saying so."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from serve_support import emit_session, keeping_tracer

from otel_agentguard.judge.policy import coerce_policy

pytest.importorskip("aiohttp")

from otel_agentguard.serve.decode import from_request  # noqa: E402
from otel_agentguard.serve.sessions import LiveSessions  # noqa: E402


def _open_sessions(count: int) -> list:
    """Sessions without their root span: they stay open until something ends them."""
    tracer, kept = keeping_tracer()
    for index in range(count):
        emit_session(tracer, f"s{index}", "loop")
    return [span for span in kept if span.parent is not None]


def test_beyond_max_traces_the_least_recently_fed_is_judged_not_dropped():
    tracker = LiveSessions(coerce_policy(None), max_traces=3, idle_timeout_s=3600, settle_s=3600)
    judged = []
    for batch in from_request(encode_spans(_open_sessions(5))):
        judged.extend(tracker.judge(tracker.add(batch)))
    assert tracker.open_traces == 3
    assert [(j.reason, j.verdict.stop_reason) for j in judged] == [("evicted", "tool_loop")] * 2
    rest = tracker.judge(tracker.close())
    assert [j.reason for j in rest] == ["shutdown"] * 3
    assert tracker.counts.judged == 5 * 13


def test_spans_beyond_the_per_trace_cap_are_counted_as_over_limit():
    tracker = LiveSessions(coerce_policy(None), max_spans_per_trace=10)
    (batch,) = from_request(encode_spans(_open_sessions(1)))  # 13 spans in one request
    assert tracker.add(batch) == []
    assert tracker.counts.over_limit == 13 and tracker.open_traces == 1


def test_quiet_traces_fall_due_after_settle_or_idle():
    now = [0.0]
    tracker = LiveSessions(coerce_policy(None), idle_timeout_s=30, settle_s=2, clock=lambda: now[0])
    (batch,) = from_request(encode_spans(_open_sessions(1)))
    tracker.add(batch)  # a final answer arrived: settles in 2 s
    now[0] = 1.9
    assert tracker.judge(tracker.expire()) == []
    now[0] = 2.0
    (judged,) = tracker.judge(tracker.expire())
    assert judged.reason == "settled" and judged.verdict.stop_reason == "tool_loop"
