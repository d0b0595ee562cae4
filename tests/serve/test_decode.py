"""The protobuf path reads a span exactly as replay reads the same span from OTLP JSON."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agentguard.exporters import encode_span
from otel_agentguard.replay.otlp import decode_attributes

pytest.importorskip("aiohttp")

from otel_agentguard.serve.decode import from_request, parse  # noqa: E402


def test_protobuf_attributes_decode_to_what_replay_reads_from_json():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    attributes = {"s": "text", "i": 42, "f": 1.5, "b": True, "strings": ["a", "b"], "ints": [1, 2],
                  "floats": [0.5], "bools": [False, True], "empty": "", "zero": 0}
    with provider.get_tracer("t").start_as_current_span("root", attributes=attributes):
        pass
    (span,) = exporter.get_finished_spans()
    (batch,) = from_request(encode_spans([span]))
    ((_, decoded),) = batch.decoded
    assert decoded == decode_attributes(encode_span(span)["attributes"])
    assert decoded["strings"] == ("a", "b") and decoded["i"] == 42 and decoded["zero"] == 0


def test_kvlist_and_bytes_values_decode_like_replay():
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    kv = span.attributes.add(key="map")
    inner = kv.value.kvlist_value.values.add(key="k")
    inner.value.string_value = "v"
    span.attributes.add(key="raw").value.bytes_value = b"\x00\xff"
    span.attributes.add(key="unset")
    json_form = [{"key": "map", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"stringValue": "v"}}]}}},
                 {"key": "raw", "value": {"bytesValue": "AP8="}}, {"key": "unset", "value": {}}]
    ((_, decoded),) = parse(request.SerializeToString(), "application/x-protobuf")[0].decoded
    assert decoded == decode_attributes(json_form) == {"map": {"k": "v"}, "raw": b"\x00\xff", "unset": None}
