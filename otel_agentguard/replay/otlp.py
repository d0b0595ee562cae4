"""Sessions from OTLP JSON: what the OpenTelemetry file exporters and the
Collector's ``file`` exporter write, one ExportTraceServiceRequest per line.

Spans of many sessions may interleave in one file, and a session's spans may
arrive in any order (children usually end, and are written, before their
parents). Every span's session is therefore resolved once the whole input is
read: its own session attributes first, then its parent chain, then its trace.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from otel_agentguard import attributes as A
from otel_agentguard.policy import Policy
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.recorded import RecordedSession
from otel_agentguard.steps import explicit_session, step_from_attributes, step_kind

_MAX_PARENT_HOPS = 256
_ERROR_CODES = (2, "2", "STATUS_CODE_ERROR", "ERROR")


def decode_value(value: Mapping[str, Any]) -> Any:
    """One OTLP ``AnyValue`` as a Python value."""
    if not isinstance(value, Mapping):
        return None
    for key, item in value.items():
        if key == "stringValue":
            return item
        if key == "intValue":
            return int(item)
        if key == "doubleValue":
            return float(item)
        if key == "boolValue":
            return bool(item)
        if key == "arrayValue":
            return tuple(decode_value(v) for v in (item or {}).get("values", ()))
        if key == "kvlistValue":
            return {kv.get("key"): decode_value(kv.get("value")) for kv in (item or {}).get("values", ())}
        if key == "bytesValue":
            return base64.b64decode(item)
    return None


def decode_attributes(items: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: decode_value(item.get("value")) for item in items or ()}


@dataclass(slots=True)
class _Candidate:
    kind: str
    attrs: dict[str, Any]
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    error: bool
    line: int


class OTLPCollector:
    """Accumulates spans from any number of OTLP JSON documents, then yields sessions."""

    def __init__(self, policy: Policy):
        self._policy = policy
        self._parents: dict[str, str] = {}
        self._seen: set[tuple[str, str]] = set()
        self._session_of: dict[str, str] = {}
        self._candidates: list[_Candidate] = []
        self._sessions: dict[str, RecordedSession] = {}

    def add_document(self, document: Mapping[str, Any], path: str, line: int) -> None:
        try:
            for resource_spans in document.get("resourceSpans") or ():
                for scope_spans in resource_spans.get("scopeSpans") or ():
                    for span in scope_spans.get("spans") or ():
                        self._add_span(span, path, line)
        except InputError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
            raise InputError(path, f"not a valid OTLP JSON span ({type(exc).__name__}: {exc})", line) from None

    def _add_span(self, span: Mapping[str, Any], path: str, line: int) -> None:
        attrs = decode_attributes(span.get("attributes"))
        if attrs.get(A.VERDICT):
            return  # a verdict is an output of the judge, not an input
        span_id = str(span.get("spanId") or "")
        parent_id = str(span.get("parentSpanId") or "")
        trace_id = str(span.get("traceId") or "")
        if not span_id or not trace_id:
            raise InputError(path, "span without traceId or spanId", line)
        if (trace_id, span_id) in self._seen:
            return  # the same span exported twice (a retry, or one file given twice) is one span
        self._seen.add((trace_id, span_id))
        start_ns = int(span.get("startTimeUnixNano") or 0)
        end_ns = int(span.get("endTimeUnixNano") or 0)
        error = (span.get("status") or {}).get("code") in _ERROR_CODES
        if parent_id:
            self._parents[span_id] = parent_id
        session_id = explicit_session(attrs)
        if session_id:
            self._session_of[span_id] = session_id
            if attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT:
                self._add_session_span(session_id, attrs, path, start_ns, end_ns, error)
        kind = None if attrs.get(A.NESTED_MODEL_CALL) else step_kind(attrs)
        if kind is not None:
            self._candidates.append(_Candidate(
                kind, attrs, str(span.get("name") or ""), trace_id, span_id, parent_id, start_ns, end_ns, error, line,
            ))

    def _add_session_span(
        self, session_id: str, attrs: Mapping[str, Any], path: str, start_ns: int, end_ns: int, error: bool
    ) -> None:
        session = self._sessions.setdefault(session_id, RecordedSession(session_id, path))
        session.profile = _text(attrs.get(A.PROFILE)) or session.profile
        session.task_type = _text(attrs.get(A.TASK_TYPE)) or session.task_type
        session.error = session.error or error
        stop_reason = attrs.get(A.STOP_REASON)
        if stop_reason in A.INTERRUPTS:
            session.interrupt = stop_reason
        session.start_ns = start_ns
        session.end_ns = end_ns

    def _resolve(self, candidate: _Candidate) -> str:
        found = explicit_session(candidate.attrs)
        if found:
            return found
        span_id = candidate.parent_id
        for _ in range(_MAX_PARENT_HOPS):
            if not span_id:
                break
            found = self._session_of.get(span_id)
            if found:
                return found
            span_id = self._parents.get(span_id, "")
        return candidate.trace_id

    def sessions(self) -> list[RecordedSession]:
        grouped: dict[str, list[_Candidate]] = {}
        for candidate in self._candidates:
            grouped.setdefault(self._resolve(candidate), []).append(candidate)
        result = []
        for session_id, candidates in grouped.items():
            session = self._sessions.get(session_id) or RecordedSession(session_id, "")
            if not session.source:
                session.source = "otlp"
            numbered = all(isinstance(c.attrs.get(A.SEQUENCE), int) for c in candidates)
            if numbered:
                candidates.sort(key=lambda c: c.attrs[A.SEQUENCE])
            else:
                candidates.sort(key=lambda c: (c.start_ns, c.end_ns))
            for index, candidate in enumerate(candidates, start=1):
                session.steps.append(step_from_attributes(
                    candidate.attrs,
                    kind=candidate.kind,
                    session_id=session_id,
                    sequence=candidate.attrs[A.SEQUENCE] if numbered else index,
                    policy=self._policy,
                    span_name=candidate.name,
                    start_ns=candidate.start_ns,
                    end_ns=candidate.end_ns,
                    status_error=candidate.error,
                ))
            result.append(session)
        # Sessions that only have a session span (no step) are still reported.
        for session_id, session in self._sessions.items():
            if session_id not in grouped:
                result.append(session)
        result.sort(key=lambda s: (s.start_ns or (s.steps[0].start_ns if s.steps else 0), s.session_id))
        return result


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
