"""OTLP trace request bodies (protobuf or JSON, optionally gzip) into per-trace documents.

Replay reads OTLP JSON; the service turns every body it receives into that same
shape (hex ids, ``AnyValue`` attributes) and hands it to the same collector, so
whatever replay learns to read from a span is read here too. The body is split
by trace id on the way, because a trace is the unit the service buffers and the
unit the Collector's ``loadbalancing`` exporter routes.

Every problem is a :class:`BadRequest` with a one-line message; a body is
checked whole before any of it is used, so a malformed request changes nothing.
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_agentguard import attributes as A
from otel_agentguard.judge.steps import FINAL_FINISH_REASONS, explicit_session

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

_SESSION_KEYS = frozenset({A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, A.SESSION_ID_SEMCONV})
_FINISH_KEYS = frozenset({A.GEN_AI_RESPONSE_FINISH_REASONS, "gen_ai.completion.0.finish_reason"})
_HEX = frozenset("0123456789abcdefABCDEF")


class BadRequest(ValueError):
    """A body the service cannot read (answered with 400 and this message)."""


class TooLarge(ValueError):
    """A body over the size limit, before or after decompression (answered with 413)."""


@dataclass(slots=True)
class TraceBatch:
    """The spans of one trace in one request, as an OTLP JSON document, with what the
    session tracker needs to know without reading every attribute again."""

    trace_id: str
    document: dict[str, Any] | None  # OTLP JSON bodies: the document, as replay reads it
    decoded: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)  # protobuf: (span, attributes)
    spans: int = 0
    root_span_id: str = ""  # a span without a parent: the trace is complete
    session_spans: dict[str, str] = field(default_factory=dict)  # session id -> its invoke_agent span id
    any_span_id: str = ""
    final_answer: bool = False  # a model span that finished its turn


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The body without its ``Content-Encoding``; never more than ``limit`` bytes."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise BadRequest(f"unsupported Content-Encoding {encoding!r} (OTLP uses gzip or none)")
    inflater = zlib.decompressobj(wbits=31)
    try:
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"invalid gzip body ({exc})") from None
    if len(data) > limit or inflater.unconsumed_tail:
        raise TooLarge(f"decompressed body exceeds {limit} bytes")
    if not inflater.eof:
        raise BadRequest("truncated gzip body")
    return data


def parse(body: bytes, content_type: str) -> list[TraceBatch]:
    """The request's spans grouped by trace, in arrival order."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == PROTOBUF:
        return _from_protobuf(body)
    if kind == JSON:
        return _from_json(body)
    raise BadRequest(f"unsupported Content-Type {content_type!r} (use {PROTOBUF} or {JSON})")


# --- protobuf ----------------------------------------------------------------------------


def _from_protobuf(body: bytes) -> list[TraceBatch]:
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BadRequest(f"not an OTLP ExportTraceServiceRequest ({exc})") from None
    return from_request(request)


def from_request(request: ExportTraceServiceRequest) -> list[TraceBatch]:
    """Batches from an already parsed request (the gRPC receiver gets it parsed).

    Each span becomes the OTLP JSON span replay reads, except that its attributes are decoded
    straight to values (what replay's decoder makes of them) instead of through the JSON shape.
    """
    batches: dict[str, TraceBatch] = {}
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                trace_id = span.trace_id.hex()
                span_id = span.span_id.hex()
                if len(trace_id) != 32 or len(span_id) != 16 or trace_id == "0" * 32:
                    raise BadRequest(f"span {span.name!r} has an invalid trace id or span id")
                encoded: dict[str, Any] = {
                    "traceId": trace_id,
                    "spanId": span_id,
                    "parentSpanId": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "startTimeUnixNano": span.start_time_unix_nano,
                    "endTimeUnixNano": span.end_time_unix_nano,
                    "status": {"code": span.status.code, "message": span.status.message},
                }
                if span.events:
                    encoded["events"] = [
                        {"name": event.name, "timeUnixNano": event.time_unix_nano,
                         "attributes": [_key_value(kv) for kv in event.attributes]}
                        for event in span.events
                    ]
                if span.links:
                    encoded["links"] = [
                        {"traceId": link.trace_id.hex(), "spanId": link.span_id.hex(),
                         "attributes": [_key_value(kv) for kv in link.attributes]}
                        for link in span.links
                    ]
                attrs = _values(span.attributes)
                batch = batches.get(trace_id)
                if batch is None:
                    batch = batches[trace_id] = TraceBatch(trace_id, None)
                batch.decoded.append((encoded, attrs))
                _note_decoded(batch, span_id, encoded["parentSpanId"], attrs)
    return list(batches.values())


def _values(items: Any) -> dict[str, Any]:
    """Attributes as replay's decoder makes them; the common case (a string) inline (hot path)."""
    out: dict[str, Any] = {}
    for kv in items:
        value = kv.value
        kind = value.WhichOneof("value")
        out[kv.key] = value.string_value if kind == "string_value" else _value(value, kind)
    return out


def _value(value: Any, kind: str | None) -> Any:
    if kind == "string_value":
        return value.string_value
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return value.double_value
    if kind == "array_value":
        return tuple(_value(item, item.WhichOneof("value")) for item in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value, kv.value.WhichOneof("value")) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return value.bytes_value
    return None


def _key_value(kv: Any) -> dict[str, Any]:
    return {"key": kv.key, "value": _any_value(kv.value)}


def _any_value(value: Any) -> dict[str, Any]:
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return {"stringValue": value.string_value}
    if kind == "int_value":
        return {"intValue": value.int_value}
    if kind == "bool_value":
        return {"boolValue": value.bool_value}
    if kind == "double_value":
        return {"doubleValue": value.double_value}
    if kind == "array_value":
        return {"arrayValue": {"values": [_any_value(item) for item in value.array_value.values]}}
    if kind == "kvlist_value":
        return {"kvlistValue": {"values": [_key_value(kv) for kv in value.kvlist_value.values]}}
    if kind == "bytes_value":
        return {"bytesValue": base64.b64encode(value.bytes_value).decode("ascii")}
    return {}


# --- JSON --------------------------------------------------------------------------------


def _from_json(body: bytes) -> list[TraceBatch]:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"invalid JSON ({exc})") from None
    if not isinstance(document, dict):
        raise BadRequest("the JSON body is not an object")
    if b"\\ud" in body or b"\\uD" in body:  # an escaped surrogate: is each one half of a pair?
        try:
            _check_text(document, "request")
        except RecursionError:
            raise BadRequest("the JSON body is nested too deeply") from None
    batches: dict[str, TraceBatch] = {}
    documents: dict[str, dict[str, Any]] = {}
    for r_index, resource_spans in enumerate(_list(document, "resourceSpans", "request")):
        where = f"resourceSpans[{r_index}]"
        _mapping(resource_spans, where)
        resource = resource_spans.get("resource") or {}
        _mapping(resource, f"{where}.resource")
        _check_attributes(resource.get("attributes"), f"{where}.resource")
        for s_index, scope_spans in enumerate(_list(resource_spans, "scopeSpans", where)):
            scope_where = f"{where}.scopeSpans[{s_index}]"
            _mapping(scope_spans, scope_where)
            groups: dict[str, list[dict[str, Any]]] = {}
            for index, span in enumerate(_list(scope_spans, "spans", scope_where)):
                span_where = f"{scope_where}.spans[{index}]"
                _check_span(span, span_where)
                trace_id = span["traceId"].lower()
                batch = batches.get(trace_id)
                if batch is None:
                    documents[trace_id] = {"resourceSpans": []}
                    batch = batches[trace_id] = TraceBatch(trace_id, documents[trace_id])
                _note(batch, span, span.get("attributes") or ())
                groups.setdefault(trace_id, []).append(span)
            for trace_id, spans in groups.items():
                documents[trace_id]["resourceSpans"].append(
                    {"resource": resource, "scopeSpans": [{"scope": scope_spans.get("scope") or {}, "spans": spans}]})
    return list(batches.values())


def _check_text(value: Any, where: str) -> None:
    """OTLP strings are UTF-8; JSON can still escape half a surrogate pair, which no exporter can
    send on (a session id with one would be exported without it): such a body is refused, naming
    where the string is."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(f"{where} is not valid UTF-8 (a lone surrogate escape)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key, f"{where} key")
            _check_text(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_text(item, f"{where}[{index}]")


def _list(container: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{where}.{key} is not a list")
    return value


def _mapping(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise BadRequest(f"{where} is not an object")


def _check_id(value: Any, length: int, where: str, key: str, required: bool = True) -> None:
    if value in (None, "") and not required:
        return
    if not isinstance(value, str) or len(value) != length or not _HEX.issuperset(value):
        raise BadRequest(f"{where}.{key} is not {length} hex digits")


_TIME_LIMIT = 1 << 64


def _check_span(span: Any, where: str) -> None:
    _mapping(span, where)
    _check_id(span.get("traceId"), 32, where, "traceId")
    _check_id(span.get("spanId"), 16, where, "spanId")
    _check_id(span.get("parentSpanId"), 16, where, "parentSpanId", required=False)
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        value = span.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise BadRequest(f"{where}.{key} is not an integer")
        if isinstance(value, str) and not (value.isascii() and value.isdigit()):
            raise BadRequest(f"{where}.{key} is not an integer")
        if not 0 <= int(value) < _TIME_LIMIT:
            raise BadRequest(f"{where}.{key} = {value} is not a time in nanoseconds (a fixed64: 0 to 2**64 - 1)")
    if not isinstance(span.get("name", ""), str):
        raise BadRequest(f"{where}.name is not a string")
    status = span.get("status", {})
    if status is not None and not isinstance(status, dict):
        raise BadRequest(f"{where}.status is not an object")
    _check_attributes(span.get("attributes"), where)


def _check_attributes(items: Any, where: str) -> None:
    if items is None:
        return
    if not isinstance(items, list):
        raise BadRequest(f"{where}.attributes is not a list")
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise BadRequest(f"{where}.attributes[{index}] has no string key")
        value = item.get("value")
        if value is not None and not isinstance(value, dict):
            raise BadRequest(f"{where}.attributes[{index}].value is not an AnyValue object")
        _check_value(value, f"{where}.attributes[{index}].value")


def _check_value(value: Any, where: str, depth: int = 0) -> None:
    """What replay's attribute decoder would choke on, found before anything is used."""
    if not value:
        return
    if depth > 32:
        raise BadRequest(f"{where} is nested too deeply")
    if not isinstance(value, dict):
        raise BadRequest(f"{where} is not an AnyValue object")
    for key, item in value.items():
        try:
            if key == "intValue":
                int(item)
            elif key == "doubleValue":
                float(item)
            elif key == "bytesValue":
                base64.b64decode(item, validate=True)
            elif key == "arrayValue":
                for child in (item or {}).get("values") or ():
                    _check_value(child, where, depth + 1)
            elif key == "kvlistValue":
                for kv in (item or {}).get("values") or ():
                    _check_value(kv.get("value"), where, depth + 1)
        except BadRequest:
            raise
        except (TypeError, ValueError, AttributeError, OverflowError):
            raise BadRequest(f"{where}.{key} is not a valid value") from None


# --- what the session tracker needs --------------------------------------------------------


def _note_decoded(batch: TraceBatch, span_id: str, parent_id: str, attrs: Mapping[str, Any]) -> None:
    """:func:`_note` for decoded attributes."""
    batch.spans += 1
    if not batch.any_span_id:
        batch.any_span_id = span_id
    if not parent_id:
        batch.root_span_id = span_id
    for key in _FINISH_KEYS:
        reasons = attrs.get(key)
        if reasons is not None:
            reasons = reasons if isinstance(reasons, tuple) else (reasons,)
            if any(str(reason).lower() in FINAL_FINISH_REASONS for reason in reasons):
                batch.final_answer = True
    if attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT:
        session = explicit_session(attrs)
        if session:
            batch.session_spans[session] = span_id


def _note(batch: TraceBatch, span: Mapping[str, Any], attrs: Any) -> None:
    """Record the span's trace-level facts: root, session span, final answer."""
    batch.spans += 1
    span_id = span["spanId"].lower()
    if not batch.any_span_id:
        batch.any_span_id = span_id
    if not span.get("parentSpanId"):
        batch.root_span_id = span_id
    session = None
    agent = False
    for item in attrs:
        key = item["key"]
        if key in _SESSION_KEYS or key == A.GEN_AI_OPERATION_NAME or key in _FINISH_KEYS:
            value = _plain(item.get("value") or {})
            if key == A.GEN_AI_OPERATION_NAME:
                agent = value == A.OP_INVOKE_AGENT
            elif key in _FINISH_KEYS:
                reasons = value if isinstance(value, list) else [value]
                if any(str(reason).lower() in FINAL_FINISH_REASONS for reason in reasons):
                    batch.final_answer = True
            elif value and (session is None or key == A.SESSION_ID):
                session = str(value)
    if agent and session:
        batch.session_spans[session] = span_id


def _plain(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "arrayValue" in value:
        return [_plain(item) for item in (value["arrayValue"] or {}).get("values") or ()]
    for item in value.values():
        return item
    return None
