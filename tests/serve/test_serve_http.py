"""`agentguard serve` over OTLP/HTTP: real OpenTelemetry exporters in, verdict spans and metrics out,
and the endpoint behaviour the OTLP specification asks for."""

from __future__ import annotations

import gzip
import json
import time

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import format_span_id, format_trace_id
from serve_support import EXPECTED, emit_session, keeping_tracer, service_in_thread, wait_for

from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.judge.policy import coerce_policy
from otel_agentguard.replay.runner import replay_files

pytest.importorskip("aiohttp")


def _send_sessions(url: str, kinds: dict[str, str], compression: Compression = Compression.NoCompression,
                   headers: dict[str, str] | None = None) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url, compression=compression,
                                                                    headers=headers)))
    tracer = provider.get_tracer("agent")
    for session_id, kind in kinds.items():
        emit_session(tracer, session_id, kind)
    provider.force_flush()
    provider.shutdown()
    return provider


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip], ids=["plain", "gzip"])
def test_protobuf_sessions_from_the_real_otlp_exporter_are_judged(compression):
    kinds = {"s-loop": "loop", "s-clean": "clean", "s-fake": "fake"}
    with service_in_thread(settle_s=0.2) as running:
        _send_sessions(running.url, kinds, compression)
        wait_for(lambda: len(running.verdicts()) == 3)
        verdicts = running.verdicts()
        counts = running.span_counts()
    assert {sid: v["agentguard.stop_reason"] for sid, v in verdicts.items()} == {
        sid: EXPECTED[kind] for sid, kind in kinds.items()}
    loop = verdicts["s-loop"]
    assert loop["agentguard.verdict"] is True and loop["agentguard.mode"] == "observe"
    assert loop["agentguard.steps"] == 7 and loop["agentguard.tokens"] == 7 * 120
    assert [alert["agentguard.probe"] for alert in loop["alerts"]][0] == "tool_loop"
    assert counts["accepted"] == sum(1 + {"loop": 13, "clean": 7, "fake": 3}[k] for k in kinds.values())


def test_verdict_span_sits_in_the_sessions_trace_under_its_session_span():
    with service_in_thread(settle_s=0.2) as running:
        provider = TracerProvider()
        seen = []

        class Keep(BatchSpanProcessor):
            def on_end(self, span):
                seen.append(span)
                super().on_end(span)

        provider.add_span_processor(Keep(OTLPSpanExporter(endpoint=running.url)))
        emit_session(provider.get_tracer("agent"), "s-1", "loop")
        provider.force_flush()
        wait_for(lambda: running.verdict_spans())
        verdict = running.verdict_spans()[0]
    root = next(span for span in seen if span.parent is None)
    assert format_trace_id(verdict.context.trace_id) == format_trace_id(root.context.trace_id)
    assert verdict.parent.span_id == root.context.span_id
    assert [format_span_id(link.context.span_id) for link in verdict.links] == [format_span_id(root.context.span_id)]


def test_json_bodies_are_judged_like_replay_judges_the_same_file(tmp_path):
    """The same spans, once posted as OTLP/JSON (gzip) and once replayed from a file: same verdicts."""
    path = tmp_path / "trace.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(str(path))))
    tracer = provider.get_tracer("agent")
    for index, kind in enumerate(("loop", "clean", "fake", "loop")):
        emit_session(tracer, f"s{index}", kind)
    provider.shutdown()
    replayed = {session.session_id: verdict for session, verdict in replay_files([path], coerce_policy(None))}
    with service_in_thread(settle_s=0.2) as running:
        for line in path.read_text().splitlines():
            response = httpx.post(running.url, content=gzip.compress(line.encode()),
                                  headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
            assert response.status_code == 200 and response.json() == {}
        wait_for(lambda: len(running.verdicts()) == 4)
        served = running.verdicts()
    assert set(served) == set(replayed)
    for session_id, verdict in replayed.items():
        got = served[session_id]
        assert got["agentguard.stop_reason"] == verdict.stop_reason
        assert got["agentguard.steps"] == verdict.steps
        assert [(a["agentguard.probe"], list(a["agentguard.evidence"])) for a in got["alerts"]] == [
            (a.probe, list(a.evidence)) for a in verdict.alerts]


def _post(url: str, body: bytes, content_type: str = "application/x-protobuf", **headers: str) -> httpx.Response:
    return httpx.post(url, content=body, headers={"Content-Type": content_type, **headers})


@pytest.mark.parametrize(("body", "content_type", "message"), [
    (b"\x0a\xff\xff\xff", "application/x-protobuf", "not an OTLP ExportTraceServiceRequest"),
    (b"{not json", "application/json", "invalid JSON"),
    (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz", "spanId": "0" * 16}]}]}]}).encode(),
     "application/json", "traceId is not 32 hex digits"),
    (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "a" * 32, "spanId": "b" * 16,
        "attributes": [{"key": "k", "value": {"intValue": "x"}}]}]}]}]}).encode(),
     "application/json", "intValue is not a valid value"),
    (b"{}", "text/plain", "unsupported Content-Type"),
])
def test_a_malformed_body_gets_400_with_a_message_and_changes_nothing(body, content_type, message):
    with service_in_thread(settle_s=0.2) as running:
        response = _post(running.url, body, content_type)
        assert response.status_code == 400
        assert message in response.text
        assert running.service.queued_spans == 0 and running.service.sessions.open_traces == 0
        _send_sessions(running.url, {"after": "clean"})  # the next good request is judged as usual
        wait_for(lambda: "after" in running.verdicts())
        assert running.span_counts()["rejected"] == 1


def test_a_body_over_the_limit_gets_413_compressed_or_not():
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add()
    for index in range(200):
        span = spans.spans.add(trace_id=b"\x01" * 16, span_id=index.to_bytes(8, "big") or b"\x01", name="x" * 100)
        span.attributes.add(key="pad", value={"string_value": "y" * 100})
    body = request.SerializeToString()
    with service_in_thread(max_body_bytes=len(body) // 2) as running:
        assert _post(running.url, body).status_code == 413
        bomb = gzip.compress(b"\x00" * (len(body) * 4))  # small on the wire, large inflated
        assert len(bomb) < len(body) // 2
        response = _post(running.url, bomb, **{"Content-Encoding": "gzip"})
        assert response.status_code == 413 and "decompressed body exceeds" in response.text
        assert running.service.sessions.open_traces == 0


def test_bearer_token_is_required_when_configured(monkeypatch):
    monkeypatch.setenv("OTEL_AGENTGUARD_SERVE_TOKEN", "s3cret")
    with service_in_thread(settle_s=0.2) as running:
        body = ExportTraceServiceRequest().SerializeToString()
        assert _post(running.url, body).status_code == 401
        assert _post(running.url, body, Authorization="Bearer wrong").status_code == 401
        assert _post(running.url, body, Authorization="Bearer s3cret").status_code == 200
        _send_sessions(running.url, {"authed": "loop"}, headers={"Authorization": "Bearer s3cret"})
        wait_for(lambda: "authed" in running.verdicts())


def test_a_retry_of_a_judged_trace_reopens_it_and_changes_nothing():
    with service_in_thread(settle_s=0.2) as running:
        tracer, kept = keeping_tracer()
        emit_session(tracer, "s-late", "clean")
        exporter = OTLPSpanExporter(endpoint=running.url)
        exporter.export(kept)  # the whole trace: judged once it settled
        wait_for(lambda: "s-late" in running.verdicts())
        exporter.export(kept[:2])  # a retry of two of its spans
        wait_for(lambda: running.span_counts().get("reopened") == 2)
        time.sleep(0.5)  # settled again: the same verdict, so nothing is written
        assert len(running.verdict_spans()) == 1


def test_a_session_without_its_root_span_is_judged_after_the_idle_timeout():
    with service_in_thread(settle_s=30, idle_timeout_s=0.3) as running:
        tracer, kept = keeping_tracer()
        emit_session(tracer, "s-idle", "loop")
        steps = [span for span in kept if span.parent is not None and "execute_tool" in span.name]
        OTLPSpanExporter(endpoint=running.url).export(steps)  # tool spans only: no final answer, no root
        wait_for(lambda: running.verdicts())
        (verdict,) = running.verdicts().values()
    assert verdict["agentguard.stop_reason"] == "tool_loop"


def test_a_step_ending_a_millisecond_after_its_session_span_still_counts():
    """The OpenTelemetry JS SDK stamps starts in whole milliseconds and ends as start plus a measured
    duration: a final answer can seem to end just after the invoke_agent span that encloses it."""
    trace_id, root = "c" * 32, "d" * 16

    def span(span_id, parent, start_ms, end_ns_after, attrs):
        start = 1_700_000_000_000_000_000 + start_ms * 1_000_000
        return {"traceId": trace_id, "spanId": span_id, "parentSpanId": parent, "name": "x",
                "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + end_ns_after),
                "attributes": [{"key": k, "value": {"stringValue": v} if isinstance(v, str) else
                                {"arrayValue": {"values": [{"stringValue": x} for x in v]}}} for k, v in attrs.items()]}

    final = span("1" * 16, root, 10, 2_000_000,
                 {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": ["stop"]})
    session = span(root, "", 0, 11_500_000, {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": "js"})
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [final, session]}]}]}).encode()
    with service_in_thread(settle_s=0.2) as running:
        assert _post(running.url, body, "application/json").status_code == 200
        wait_for(lambda: "js" in running.verdicts())
        verdict = running.verdicts()["js"]
    assert verdict["agentguard.stop_reason"] == "completed" and verdict["agentguard.steps"] == 1
