"""Backpressure, shutdown and OTLP/gRPC: the parts of `agentguard serve` a Collector relies on."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from serve_support import (
    EXPECTED,
    emit_session,
    free_port,
    keeping_tracer,
    service_in_thread,
    start_serve_process,
    wait_for,
)

from otel_agentguard.judge.policy import coerce_policy

aiohttp = pytest.importorskip("aiohttp")

from aiohttp import web  # noqa: E402

from otel_agentguard.serve.http import create_app  # noqa: E402
from otel_agentguard.serve.service import JudgeService  # noqa: E402
from otel_agentguard.serve.verdicts import VerdictWriter  # noqa: E402


def _spans(session_id: str, kind: str) -> list:
    tracer, kept = keeping_tracer()
    emit_session(tracer, session_id, kind)
    return kept


def test_a_full_queue_answers_503_with_retry_after_and_counts_the_refused_spans():
    """The judge is held (its worker not running): the first request fills the queue, the next
    is refused with the retryable status; once the judge runs, what was accepted is judged."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    service = JudgeService(coerce_policy(None), VerdictWriter(tracer_provider, meter_provider), queue_spans=20,
                           retry_after_s=3, meter_provider=meter_provider)
    loop = asyncio.new_event_loop()
    port = free_port()
    runner = web.AppRunner(create_app(service), auto_decompress=False)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    loop.run_until_complete(start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        exporter_a = OTLPSpanExporter(endpoint=url)
        assert exporter_a.export(_spans("first", "loop")).name == "SUCCESS"  # 14 spans: queued
        body = _body(_spans("second", "clean"))
        response = httpx.post(url, content=body, headers={"Content-Type": "application/x-protobuf"})
        assert response.status_code == 503
        assert response.headers["Retry-After"] == "3"
        assert service.queued_spans == 14
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        asyncio.run_coroutine_threadsafe(service.drain(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    (verdict,) = exporter.get_finished_spans()
    assert verdict.attributes["agentguard.session.id"] == "first"
    counts = {point.attributes["outcome"]: point.value
              for metric in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
              if metric.name == "agentguard.serve.spans" for point in metric.data.data_points}
    assert counts == {"accepted": 14, "refused": 8}


def _body(spans: list) -> bytes:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(spans).SerializeToString()


def test_sigterm_judges_open_sessions_and_flushes_verdicts_before_exit(tmp_path):
    """Sessions still open at shutdown (no root span yet, a long idle timeout) are judged and
    their verdicts written before the process exits."""
    serve = start_serve_process(tmp_path, "--idle-timeout", "600", "--settle", "600")
    try:
        spans = [span for span in _spans("open-loop", "loop") if span.parent is not None]
        assert OTLPSpanExporter(endpoint=serve.url).export(spans).name == "SUCCESS"
        clean = [span for span in _spans("open-clean", "clean") if span.parent is not None]
        assert OTLPSpanExporter(endpoint=serve.url).export(clean).name == "SUCCESS"
        wait_for(lambda: httpx.get(serve.url.replace("/v1/traces", "/health")).json()["open_traces"] == 2)
        assert serve.verdicts() == []
    finally:
        code, err = serve.stop()
    assert code == 0, err
    verdicts = {v["agentguard.session.id"]: v["agentguard.stop_reason"] for v in serve.verdicts()}
    # Without their session span, sessions take the trace id; the verdicts are right all the same.
    assert sorted(verdicts.values()) == ["completed", "tool_loop"]
    assert "stopped after 2 verdicts" in err


def test_otlp_grpc_receiver_judges_and_refuses_bad_tokens(monkeypatch):
    grpc = pytest.importorskip("grpc")
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    monkeypatch.setenv("OTEL_AGENTGUARD_SERVE_TOKEN", "tok")
    address = f"127.0.0.1:{free_port()}"
    with service_in_thread(settle_s=0.2, grpc_listen=address) as running:
        stub = TraceServiceStub(grpc.insecure_channel(address))
        request = encode_spans(_spans("g-loop", "loop") + _spans("g-fake", "fake"))
        with pytest.raises(grpc.RpcError) as refused:
            stub.Export(request, timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stub.Export(request, metadata=[("authorization", "Bearer tok")], timeout=5)
        wait_for(lambda: len(running.verdicts()) == 2)
        verdicts = {sid: v["agentguard.stop_reason"] for sid, v in running.verdicts().items()}
    assert verdicts == {"g-loop": EXPECTED["loop"], "g-fake": EXPECTED["fake"]}
