"""``OTLPJsonLinesSpanExporter``: spans as OTLP JSON lines, the format ``agentguard replay`` reads.

Each export call appends one ``ExportTraceServiceRequest`` in the OTLP/JSON
encoding (hex ids, string-encoded 64-bit integers, ``AnyValue`` attributes)
as a single line, the same shape the Collector's ``file`` exporter writes::

    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter("trace.jsonl")))
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import IO, Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from otel_agentguard.environment_variables import OTEL_AGENTGUARD_JSONL_PATH

_STATUS = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}


def encode_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, (bytes, bytearray)):
        return {"bytesValue": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": encode_attributes(value)}}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [encode_value(v) for v in value]}}
    return {"stringValue": str(value)}


def encode_attributes(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"key": key, "value": encode_value(value)} for key, value in (attributes or {}).items()]


def encode_span(span: ReadableSpan) -> dict[str, Any]:
    context = span.get_span_context()
    assert context is not None  # the SDK gives every span it ends a context
    data: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
        "name": span.name,
        "kind": span.kind.value + 1,  # OTLP numbers kinds from 1 (INTERNAL)
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": encode_attributes(span.attributes),
        "status": {"code": _STATUS[span.status.status_code]},
    }
    if span.parent is not None:
        data["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.status.description:
        data["status"]["message"] = span.status.description
    if span.events:
        data["events"] = [
            {"timeUnixNano": str(event.timestamp), "name": event.name,
             "attributes": encode_attributes(event.attributes)}
            for event in span.events
        ]
    return data


def encode_request(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """One ExportTraceServiceRequest: spans grouped by resource, then by scope."""
    grouped: dict[Any, dict[Any, list[ReadableSpan]]] = defaultdict(lambda: defaultdict(list))
    for span in spans:
        grouped[span.resource][span.instrumentation_scope].append(span)
    resource_spans = []
    for resource, scopes in grouped.items():
        scope_spans = []
        for scope, members in scopes.items():
            scope_data: dict[str, Any] = {"name": scope.name if scope else ""}
            if scope is not None and scope.version:
                scope_data["version"] = scope.version
            scope_spans.append({"scope": scope_data, "spans": [encode_span(s) for s in members]})
        resource_spans.append({
            "resource": {"attributes": encode_attributes(resource.attributes if resource else {})},
            "scopeSpans": scope_spans,
        })
    return {"resourceSpans": resource_spans}


DEFAULT_PATH = "agentguard-traces.jsonl"


class OTLPJsonLinesSpanExporter(SpanExporter):
    """Appends each batch of spans to a file (or stream) as one OTLP JSON line.

    Also the ``agentguard_jsonl`` traces exporter of ``opentelemetry-instrument``
    (``OTEL_TRACES_EXPORTER=agentguard_jsonl``), which builds it without
    arguments: the file is then ``OTEL_AGENTGUARD_JSONL_PATH`` (default
    ``agentguard-traces.jsonl``).
    """

    def __init__(self, path_or_stream: str | os.PathLike[str] | IO[str] | None = None):
        if path_or_stream is None:
            path_or_stream = os.environ.get(OTEL_AGENTGUARD_JSONL_PATH) or DEFAULT_PATH
        if isinstance(path_or_stream, (str, os.PathLike)):
            self._stream: IO[str] = open(path_or_stream, "a", encoding="utf-8")  # noqa: SIM115 - closed in shutdown
            self._owned = True
        else:
            self._stream = path_or_stream
            self._owned = False
        self._lock = threading.Lock()
        self._closed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._closed:
            return SpanExportResult.FAILURE
        if not spans:
            return SpanExportResult.SUCCESS
        request = encode_request(spans)
        line = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
        with self._lock:
            try:
                self._stream.write(line + "\n")
            except UnicodeEncodeError:  # a lone surrogate (say in a foreign tool name): escape it
                self._stream.write(json.dumps(request, ensure_ascii=True, separators=(",", ":")) + "\n")
            self._stream.flush()
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if not self._closed:
                self._stream.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._owned:
                self._stream.close()
