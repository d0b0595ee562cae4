"""A verdict does not depend on the order spans arrive in.

A Collector exports batches concurrently and retries a refused one after later ones succeeded:
a session's root span may come first, its children split over requests in any order, some
twice. The service judges a trace ``--settle`` seconds after its last span, whichever span that
is; spans that come after the verdict re-open the trace while it is still kept, and a session
whose verdict changes gets an amended verdict (``agentguard.verdict.amended``).
"""

from __future__ import annotations

import random
import time

import pytest
from concurrently import run_concurrently
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from serve_support import emit_session, free_port, keeping_tracer, service_in_thread

from otel_agentguard.judge.policy import coerce_policy

pytest.importorskip("aiohttp")

from otel_agentguard.serve.decode import from_request  # noqa: E402
from otel_agentguard.serve.sessions import LiveSessions  # noqa: E402

EXPECTED = {"loop": "tool_loop", "clean": "completed", "fake": "fake_completion"}
KINDS = tuple(EXPECTED)


def _session(session_id: str, kind: str) -> list:
    tracer, kept = keeping_tracer()
    emit_session(tracer, session_id, kind)
    return kept


def _feed(tracker: LiveSessions, spans: list) -> list:
    judged = []
    for batch in from_request(encode_spans(spans)):
        judged.extend(tracker.judge(tracker.add(batch)))
    return judged


@pytest.mark.parametrize("seed", range(12))
def test_root_first_and_children_in_any_order_give_the_verdict_in_order_gives(seed):
    rng = random.Random(seed)
    kind = KINDS[seed % 3]
    spans = _session(f"s-{seed}", kind)
    root = [span for span in spans if span.parent is None]
    children = [span for span in spans if span.parent is not None]
    rng.shuffle(children)
    cuts = sorted(rng.sample(range(1, len(children)), min(3, len(children) - 1)))
    requests = [root] + [children[a:b] for a, b in zip([0, *cuts], [*cuts, len(children)], strict=True)]
    now = [0.0]
    tracker = LiveSessions(coerce_policy(None), idle_timeout_s=30, settle_s=2, clock=lambda: now[0])
    judged = []
    for request in requests:
        judged += _feed(tracker, request)
        now[0] += 1.5  # each request within the settle window of the one before
    assert judged == []  # never on the root alone
    now[0] += 2
    judged = tracker.judge(tracker.expire())
    assert [(j.verdict.session_id, j.verdict.stop_reason, j.reason) for j in judged] == \
        [(f"s-{seed}", EXPECTED[kind], "settled")]
    assert tracker.counts.late == tracker.counts.reopened == 0


def test_spans_after_the_verdict_reopen_the_trace_and_amend_what_changed():
    spans = _session("s-amend", "clean")
    answer = max((span for span in spans if span.name.startswith("chat")), key=lambda span: span.end_time)
    now = [0.0]
    tracker = LiveSessions(coerce_policy(None), idle_timeout_s=30, settle_s=2, clock=lambda: now[0])
    _feed(tracker, [span for span in spans if span is not answer])  # the answer's batch was refused
    now[0] = 2.0
    (early,) = tracker.judge(tracker.expire())
    now[0] = 5.0
    assert _feed(tracker, [answer]) == []  # retried, after the verdict
    assert _feed(tracker, [answer]) == []  # and again: the same span counts once
    now[0] = 7.0
    (amended,) = tracker.judge(tracker.expire())
    assert (early.reason, early.verdict.stop_reason) == ("settled", "abandoned")
    assert (amended.reason, amended.verdict.stop_reason) == ("amended", "completed")
    assert amended.verdict.steps == early.verdict.steps + 1
    assert tracker.counts.reopened == 2 and tracker.counts.late == 0
    now[0] = 9.0
    assert _feed(tracker, spans[:1]) == []  # a retry that changes nothing: no new verdict
    now[0] = 11.0
    assert tracker.judge(tracker.expire()) == []


def test_a_trace_judged_longer_ago_than_the_idle_timeout_counts_late_spans_as_late():
    spans = _session("s-old", "clean")
    now = [0.0]
    tracker = LiveSessions(coerce_policy(None), idle_timeout_s=30, settle_s=2, clock=lambda: now[0])
    _feed(tracker, spans)
    now[0] = 2.0
    assert len(tracker.judge(tracker.expire())) == 1
    now[0] = 40.0
    tracker.expire()  # forgets what it kept whole
    assert _feed(tracker, spans[:2]) == []
    assert tracker.counts.late == 2


def _shuffled_requests(rng: random.Random, sessions: int) -> tuple[list[list], dict[str, str]]:
    """Spans of many sessions as four concurrent senders with retries deliver them: mixed,
    roots first for half the sessions, a tenth of the requests sent twice, a tenth held back."""
    expected, spans = {}, []
    for index in range(sessions):
        kind = KINDS[index % 3]
        expected[f"c-{index}"] = EXPECTED[kind]
        session = _session(f"c-{index}", kind)
        if index % 2:
            session.sort(key=lambda span: span.parent is not None)  # the root first
        spans += session
    requests = [spans[start:start + 7] for start in range(0, len(spans), 7)]
    rng.shuffle(requests)
    retried = rng.sample(requests, len(requests) // 10)
    held = rng.sample(requests, len(requests) // 10)
    order = [r for r in requests if not any(r is h for h in held)] + retried + held
    return order, expected


def _send_concurrently(requests: list[list], send) -> None:
    """Four senders, each sending its share in turn; a sender's failure fails the test."""
    run_concurrently(lambda queue: [send(request) for request in queue], [requests[n::4] for n in range(4)])


def _exported(result) -> None:
    from opentelemetry.sdk.trace.export import SpanExportResult

    assert result is SpanExportResult.SUCCESS, result  # (the exporter retries on its own first)


def _export_with_retries(stub, spans: list, attempts: int = 5) -> None:
    """As a Collector's exporter does: a request refused, or not answered in time, is sent again."""
    import grpc

    for attempt in range(attempts):
        try:
            stub.Export(encode_spans(spans), timeout=10)
            return
        except grpc.RpcError as error:
            if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED) \
                    or attempt == attempts - 1:
                raise
            time.sleep(0.5)


def _wait_for_final_verdicts(running, expected: dict[str, str], timeout_s: float = 30.0) -> None:
    """Until every session's last verdict is the expected one; else the sessions that differ."""
    deadline = time.monotonic() + timeout_s
    while (final := _final_verdicts(running)) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    wrong = {key: (final.get(key), value) for key, value in expected.items() if final.get(key) != value}
    assert not wrong, f"(verdict, expected) of {len(wrong)} sessions: {dict(list(wrong.items())[:10])}, " \
                      f"counts {running.span_counts()}"


def _final_verdicts(running) -> dict[str, str]:
    """Each session's last word: its amended verdict where there is one."""
    final: dict[str, str] = {}
    for span in running.verdict_spans():  # in the order they were written
        final[span.attributes["agentguard.session.id"]] = span.attributes["agentguard.stop_reason"]
    return final


def test_four_concurrent_senders_with_retries_over_http():
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    requests, expected = _shuffled_requests(random.Random(4), 120)
    with service_in_thread(settle_s=1.0) as running:
        exporter = OTLPSpanExporter(endpoint=running.url)
        _send_concurrently(requests, lambda spans: _exported(exporter.export(spans)))
        _wait_for_final_verdicts(running, expected)
        counts = running.span_counts()
    assert counts.get("late", 0) == 0


def test_four_concurrent_senders_with_retries_over_grpc():
    grpc = pytest.importorskip("grpc")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    requests, expected = _shuffled_requests(random.Random(5), 120)
    address = f"127.0.0.1:{free_port()}"
    with service_in_thread(settle_s=1.0, grpc_listen=address) as running:
        stub = TraceServiceStub(grpc.insecure_channel(address))
        _send_concurrently(requests, lambda spans: _export_with_retries(stub, spans))
        _wait_for_final_verdicts(running, expected)
        counts = running.span_counts()
    assert counts.get("late", 0) == 0
