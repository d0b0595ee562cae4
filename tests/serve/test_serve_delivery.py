"""Every verdict is accounted for: exported, retried while the exporter's endpoint is down, or
dropped and counted, never lost inside the SDK without a word."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export import SpanExportResult
from serve_support import emit_session, free_port, keeping_tracer, start_serve_process, wait_for

pytest.importorskip("aiohttp")

from otel_agentguard.serve.delivery import DeliveringExporter, Delivery  # noqa: E402


class _Flaky:
    def __init__(self, failures: int):
        self.failures = failures
        self.exported: list = []

    def export(self, spans):
        if self.failures:
            self.failures -= 1
            return SpanExportResult.FAILURE
        self.exported.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        pass


def test_a_failed_batch_is_tried_again_and_counted():
    delivery = Delivery()
    flaky = _Flaky(failures=2)
    exporter = DeliveringExporter(flaky, delivery, sleep=lambda s: None)
    assert all(delivery.admit() for _ in range(3))
    assert exporter.export(["a", "b", "c"]) is SpanExportResult.SUCCESS
    assert delivery.snapshot() == {"written": 3, "exported": 3, "retried": 6, "dropped": 0, "in_flight": 0}


def test_without_an_exporter_nothing_is_counted_or_refused():
    delivery = Delivery(room=1)
    assert all(delivery.admit() for _ in range(3)) and not delivery.crowded


def test_past_its_retry_time_or_at_exit_a_batch_is_dropped_and_counted():
    delivery = Delivery()
    exporter = DeliveringExporter(_Flaky(failures=10**6), delivery, retry_for_s=0.0, sleep=lambda s: None)
    delivery.admit()
    assert exporter.export(["a"]) is SpanExportResult.FAILURE
    exporter = DeliveringExporter(_Flaky(failures=10**6), delivery, sleep=lambda s: None)
    exporter.stop_retrying()
    delivery.admit()
    exporter.export(["b"])
    assert delivery.snapshot()["dropped"] == 2 and delivery.in_flight == 0


def test_beyond_its_room_a_verdict_is_dropped_before_the_sdk_and_counted():
    delivery = Delivery(room=2)
    DeliveringExporter(_Flaky(failures=0), delivery)  # (with no exporter there is nothing to deliver)
    assert [delivery.admit() for _ in range(4)] == [True, True, False, False]
    assert delivery.snapshot() == {"written": 2, "exported": 0, "retried": 0, "dropped": 2, "in_flight": 2}
    assert delivery.crowded


class _Receiver(BaseHTTPRequestHandler):
    spans: list = []

    def do_POST(self):  # noqa: N802 - the http.server name
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                _Receiver.spans.extend(span.span_id for span in scope.spans)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_verdicts_written_while_the_downstream_is_down_arrive_once_it_is_back(tmp_path):
    port = free_port()
    serve = start_serve_process(tmp_path, "--settle", "0.2", env={
        "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "1", "OTEL_BSP_SCHEDULE_DELAY": "100"})
    health = serve.url.replace("/v1/traces", "/health")
    receiver = None
    try:
        tracer, kept = keeping_tracer()
        for index in range(200):
            emit_session(tracer, f"d-{index}", "loop")
        sender = OTLPSpanExporter(endpoint=serve.url)
        for start in range(0, len(kept), 500):
            assert sender.export(kept[start:start + 500]).name == "SUCCESS"
        def all_waiting() -> bool:
            delivery = httpx.get(health).json()["delivery"]
            return delivery["in_flight"] == 200 and delivery["retried"] > 0

        wait_for(all_waiting, timeout_s=20)  # every verdict written, none exported: tried again
        down = httpx.get(health).json()["delivery"]
        assert down["exported"] == 0 and down["dropped"] == 0
        _Receiver.spans = []
        receiver = ThreadingHTTPServer(("127.0.0.1", port), _Receiver)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        wait_for(lambda: httpx.get(health).json()["delivery"]["exported"] == 200, timeout_s=60)
    finally:
        code, err = serve.stop()
        if receiver is not None:
            receiver.shutdown()
    assert code == 0, err
    assert len(set(_Receiver.spans)) == 200
    assert "verdicts exported 200, dropped 0" in err
