"""OTLP JSON lines decoded by msgspec straight into read spans (used when msgspec is installed).

The reference reader parses a line into dicts (orjson or the standard library), then decodes
each span's attributes out of them: two dicts per attribute made, read and freed. Here msgspec
decodes the line into small typed records holding only what the collector reads, which takes
about 40 % less time per span than parsing, decoding and freeing the dicts.

It takes only lines in the usual shape, and only when the result is certain to be the
reference reader's: an id, time or count the reference reader would refuse, a value it would
refuse, JSON that msgspec reads differently from the standard library (NaN, lone surrogates,
numbers beyond double range, bytes that are not UTF-8): any of these makes :func:`read_line`
return None, and the reference reader reads the line again (and words the error). Nothing is
recorded until the whole line has been read.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from otel_agentguard import attributes as A
from otel_agentguard.judge import _ranges
from otel_agentguard.judge.span_events import needs_events
from otel_agentguard.judge.steps import TOOL, step_kind
from otel_agentguard.replay import otlp
from otel_agentguard.replay.otlp import ReadSpan, counts_in_range, decode_value, session_facts

# Every class below is decoded from JSON, which has no cycles: the garbage collector need not track them.


class _AnyValue(msgspec.Struct, gc=False):
    # Absent members stay UNSET (a null member is None). One is set, as a rule; of several, the
    # reference reader's precedence picks one (see _attributes). Unknown members are ignored, as
    # the reference reader ignores them.
    stringValue: Any = UNSET
    intValue: Any = UNSET
    boolValue: Any = UNSET
    doubleValue: Any = UNSET
    arrayValue: Any = UNSET
    kvlistValue: Any = UNSET
    bytesValue: Any = UNSET


class _KeyValue(msgspec.Struct, gc=False):
    key: str
    value: _AnyValue | None = None


class _Status(msgspec.Struct, gc=False):
    code: Any = None


class _Span(msgspec.Struct, gc=False):
    traceId: Any = None
    spanId: Any = None
    parentSpanId: Any = None
    name: Any = None
    startTimeUnixNano: Any = None
    endTimeUnixNano: Any = None
    attributes: list[_KeyValue] | None = None
    status: _Status | None = None
    events: msgspec.Raw | None = None  # skipped unread; a step span that needs its events goes to the reference reader


class _ScopeSpans(msgspec.Struct, gc=False):
    spans: list[_Span] | None = None


class _ResourceSpans(msgspec.Struct, gc=False):
    scopeSpans: list[_ScopeSpans] | None = None


class _Request(msgspec.Struct, gc=False):
    resourceSpans: list[_ResourceSpans] | None = None


_decode = msgspec.json.Decoder(_Request).decode
# How the exporters (this package's and the Collector's file exporter) start a line; any other
# line, whatever it is, goes to the reference reader, which tells the formats apart.
_LINE_START = b'{"resourceSpans":'


_NO_EVENTS = frozenset({b"[]", b"null"})


class _Unusual(Exception):
    """Not the usual shape: the reference reader reads the line."""


# What reading a line may raise: msgspec refusing it, a value the reference reader would refuse
# (or read differently), an error the reference reader would name. It then reads the line.
_LEFT_TO_THE_REFERENCE = (
    msgspec.MsgspecError, _Unusual, AttributeError, KeyError, TypeError, ValueError, OverflowError, RecursionError,
)


def read_line(line: bytes, path: str) -> list[ReadSpan] | None:
    """The spans of one OTLP JSON line, or None when the reference reader is to read it."""
    if not line.startswith(_LINE_START):
        return None
    try:
        if not line.isascii():
            # msgspec checks the UTF-8 of what it decodes, not of the members it skips (a span's
            # events, its resource): the whole line is checked as the standard library reads it.
            line.decode("utf-8", "surrogatepass")
        return _read_request(_decode(line), path)
    except _LEFT_TO_THE_REFERENCE:
        return None


def _read_request(request: _Request, path: str) -> list[ReadSpan]:
    """The spans of a decoded line."""
    shared: dict[str, str] = {}
    return [_read_span(span, _attributes(span.attributes, shared), path, shared)
            for resource in request.resourceSpans or ()
            for scope in resource.scopeSpans or () for span in scope.spans or ()]


def _read_span(span: _Span, attrs: dict[str, Any], path: str, shared: dict[str, str]) -> ReadSpan:
    """``shared``: the strings of this line kept once (the decoder makes a string per occurrence,
    and a replay keeps what it reads to the end: a trace's spans share their trace and parent ids,
    a session's spans its id and tool names)."""
    span_id = span.spanId or ""
    parent_id = span.parentSpanId or ""
    trace_id = span.traceId or ""
    if type(span_id) is not str or type(parent_id) is not str or type(trace_id) is not str:
        raise _Unusual
    trace_id = shared.setdefault(trace_id, trace_id)
    parent_id = shared.setdefault(parent_id, parent_id)
    if not span_id or not trace_id:
        raise _Unusual
    start_ns = int(span.startTimeUnixNano or 0)
    end_ns = int(span.endTimeUnixNano or 0)
    if not (0 <= start_ns <= _ranges.MAX_UNIX_NANO and 0 <= end_ns <= _ranges.MAX_UNIX_NANO):
        raise _Unusual
    status = span.status
    code = status.code if status is not None else None
    error = code in otlp.ERROR_CODES if code else False
    kind = None if attrs.get(A.NESTED_STEP) else step_kind(attrs)
    name = ""
    if kind is not None:
        if not counts_in_range(attrs):
            raise _Unusual
        if span.events is not None and bytes(span.events) not in _NO_EVENTS and needs_events(kind == TOOL, attrs):
            raise _Unusual  # what the span lacks may be in its events: the reference reader reads them
        name = span.name or ""
        name = shared.setdefault(name, name) if type(name) is str else str(name)
    session_id, run = session_facts(attrs, path, start_ns, end_ns, error)
    return kind, attrs, name, trace_id, span_id, parent_id, start_ns, end_ns, error, session_id, run


def _attributes(items: list[_KeyValue] | None, shared: dict[str, str]) -> dict[str, Any]:
    """As :func:`otlp.decode_read_attributes` decodes them (every value checked, the read ones kept);
    the values of keys that repeat them across spans (:data:`otlp.REPEATED_VALUE_KEYS`) kept once."""
    decoded: dict[str, Any] = {}
    if not items:
        return decoded
    shared_keys = otlp.SHARED_READ_KEYS
    repeated_value_keys = otlp.REPEATED_VALUE_KEYS
    is_read_key = otlp.is_read_key
    for item in items:
        shared_key = shared_keys.get(item.key)  # (a str: the record's type says so)
        if shared_key is not None:
            key = shared_key  # kept instead of the decoder's copy
            wanted = True
        else:
            key = item.key
            wanted = is_read_key(key)
        value = item.value
        if value is None:
            if wanted:
                decoded[key] = None
            continue
        # The members in the reference reader's order of precedence (otlp.MEMBER_PRECEDENCE;
        # one member is the usual case).
        inner = value.stringValue
        if inner is not UNSET:
            if wanted:
                if key in repeated_value_keys and type(inner) is str:
                    inner = shared.setdefault(inner, inner)
                decoded[key] = inner
            continue
        inner = value.intValue
        if inner is not UNSET:
            inner = otlp.int64(inner)
        elif value.boolValue is not UNSET:
            inner = bool(value.boolValue)
        elif value.doubleValue is not UNSET:
            inner = float(value.doubleValue)
        elif value.arrayValue is not UNSET:
            inner = otlp.decode_array(value.arrayValue)
        elif value.kvlistValue is not UNSET:
            inner = decode_value({"kvlistValue": value.kvlistValue})
        elif value.bytesValue is not UNSET:
            inner = decode_value({"bytesValue": value.bytesValue})
        else:
            inner = None  # an empty value
        if wanted:
            decoded[key] = inner
    return decoded
