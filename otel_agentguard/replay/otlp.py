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
from otel_agentguard.replay._derive import with_derived_steps
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.recorded import RecordedSession
from otel_agentguard.steps import Step, explicit_session, nested_step, step_from_attributes, step_kind

_MAX_PARENT_HOPS = 256
_ERROR_CODES = (2, "2", "STATUS_CODE_ERROR", "ERROR")


def decode_value(value: Mapping[str, Any]) -> Any:
    """One OTLP ``AnyValue`` as a Python value."""
    if type(value) is dict:  # what a JSON parser gives: skip the ABC check below
        if len(value) == 1:  # the usual shape: one typed member
            item = value.get("stringValue", _ABSENT)
            if item is not _ABSENT:
                return item
    elif not isinstance(value, Mapping):
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


_ABSENT = object()


def decode_attributes(items: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    decoded: dict[str, Any] = {}
    for item in items or ():
        value = item.get("value")
        # Most attributes are strings: read them without a call.
        if type(value) is dict and len(value) == 1:
            text = value.get("stringValue", _ABSENT)
            if text is not _ABSENT:
                decoded[item["key"]] = text
                continue
        decoded[item["key"]] = decode_value(value)
    return decoded


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
    path: str
    line: int


class OTLPCollector:
    """Accumulates spans from any number of OTLP JSON documents, then yields sessions."""

    def __init__(self, policy: Policy):
        self._policy = policy
        self._parents: dict[str, str] = {}
        self._seen: set[tuple[str, str]] = set()
        self._session_of: dict[str, str] = {}
        self._candidates: list[_Candidate] = []
        self._runs: dict[str, RecordedSession] = {}  # session span id -> the run it delimits
        self._steps_by_span: dict[str, tuple[str, dict[str, Any]]] = {}

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
        span_id = str(span.get("spanId") or "")
        parent_id = str(span.get("parentSpanId") or "")
        trace_id = str(span.get("traceId") or "")
        if not span_id or not trace_id:
            raise InputError(path, "span without traceId or spanId", line)
        if attrs.get(A.VERDICT):
            if parent_id:  # not an input to judge, but a link in its children's parent chain
                self._parents.setdefault(span_id, parent_id)
            return
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
                self._runs[span_id] = _run(session_id, attrs, path, start_ns, end_ns, error)
        kind = None if attrs.get(A.NESTED_STEP) else step_kind(attrs)
        if kind is not None:
            self._steps_by_span[span_id] = (kind, attrs)
            self._candidates.append(_Candidate(
                kind, attrs, str(span.get("name") or ""), trace_id, span_id, parent_id, start_ns, end_ns, error,
                path, line,
            ))

    def _resolve(self, candidate: _Candidate) -> tuple[str, str | None]:
        """The step's session id and, when it ran inside one, the span id of its session span.

        Like the live processor: the span's own session attributes first, then its
        parent chain, else the trace; the run is the outermost session span of that
        session around it (an inner ``invoke_agent`` of the same session joins it).
        """
        session_id = explicit_session(candidate.attrs)
        run = None
        span_id = candidate.parent_id
        for _ in range(_MAX_PARENT_HOPS):
            if not span_id:
                break
            if session_id is None:
                session_id = self._session_of.get(span_id)
            found = self._runs.get(span_id)
            if found is not None and found.session_id == session_id:
                run = span_id
            span_id = self._parents.get(span_id, "")
        return session_id or candidate.trace_id, run

    def _nested_run(self, span_id: str) -> bool:
        """A session span inside an outer session span of the same session is part of that run."""
        session_id = self._runs[span_id].session_id
        parent = self._parents.get(span_id, "")
        for _ in range(_MAX_PARENT_HOPS):
            if not parent:
                return False
            found = self._runs.get(parent)
            if found is not None and found.session_id == session_id:
                return True
            parent = self._parents.get(parent, "")
        return False

    def _joined_runs(self) -> dict[str, str]:
        """Session span id -> the run it belongs to. Like the live processor, a session span
        that starts while another run of its session is open (nested or a sibling) joins it."""
        joined: dict[str, str] = {}
        by_session: dict[str, list[tuple[int, str]]] = {}
        for span_id, run in self._runs.items():
            by_session.setdefault(run.session_id, []).append((run.start_ns, span_id))
        for starts in by_session.values():
            starts.sort()
            owner = ""
            for start_ns, span_id in starts:
                if owner and (start_ns < self._runs[owner].end_ns or self._nested_run(span_id)):
                    joined[span_id] = owner
                else:
                    owner = span_id
                    joined[span_id] = span_id
        return joined

    def sessions(self) -> list[RecordedSession]:
        joined = self._joined_runs()
        by_session: dict[str, list[tuple[str | None, _Candidate]]] = {}
        for candidate in self._candidates:
            parent = self._steps_by_span.get(candidate.parent_id)
            if parent is not None and nested_step(candidate.kind, candidate.attrs, *parent):
                continue  # the same step seen twice (e.g. an MCP server's span under the client's call)
            session_id, run = self._resolve(candidate)
            by_session.setdefault(session_id, []).append((joined.get(run, run) if run else None, candidate))
        result = [run for span_id, run in self._runs.items() if joined.get(span_id) == span_id]
        for session_id, members in by_session.items():
            # Sequence numbers count per session id across its runs, as live.
            numbered = all(isinstance(c.attrs.get(A.SEQUENCE), int) for _, c in members)
            if numbered:
                members.sort(key=lambda m: m[1].attrs[A.SEQUENCE])
            else:
                members.sort(key=lambda m: (m[1].start_ns, m[1].end_ns))
            spanless: RecordedSession | None = None
            for run, candidate, step in self._with_derived(members, numbered, session_id):
                if run is not None:
                    session = self._runs[run]
                    if candidate is not None and session.end_ns and candidate.end_ns > session.end_ns:
                        continue  # ended after its session: the live judge never saw it either
                else:
                    if spanless is None:
                        spanless = RecordedSession(session_id, members[0][1].path)
                        result.append(spanless)
                    session = spanless
                session.steps.append(step)
                if run is None and step.final:
                    spanless = None  # without a session span, a final answer ends the run
        result.sort(key=lambda s: (s.start_ns or (s.steps[0].start_ns if s.steps else 0), s.session_id))
        return result

    def _with_derived(
        self, members: list[tuple[str | None, _Candidate]], numbered: bool, session_id: str
    ) -> list[tuple[str | None, _Candidate | None, Step]]:
        """The members' steps, with tool steps derived from their model spans in between."""
        try:
            return with_derived_steps(  # type: ignore[return-value]
                members, numbered=numbered, session_id=session_id, policy=self._policy,
                build=lambda candidate, sequence: self._step(candidate, session_id, sequence),  # type: ignore[arg-type]
            )
        except InputError:
            raise
        except Exception as exc:  # a tool call the adapter cannot read: name the file, never a traceback
            first = members[0][1]
            raise InputError(first.path, f"unreadable tool call in session {session_id!r} ({type(exc).__name__}: {exc})",
                             first.line) from None

    def _step(self, candidate: _Candidate, session_id: str, sequence: int) -> Step:
        try:
            return step_from_attributes(
                candidate.attrs,
                kind=candidate.kind,
                session_id=session_id,
                sequence=sequence,
                policy=self._policy,
                span_name=candidate.name,
                start_ns=candidate.start_ns,
                end_ns=candidate.end_ns,
                status_error=candidate.error,
            )
        except Exception as exc:  # a span the adapter cannot read: name it, never a traceback
            raise InputError(candidate.path, f"unreadable span {candidate.name!r} ({type(exc).__name__}: {exc})",
                             candidate.line) from None


def _run(session_id: str, attrs: Mapping[str, Any], path: str, start_ns: int, end_ns: int, error: bool) -> RecordedSession:
    stop_reason = attrs.get(A.STOP_REASON)
    # An interrupt, or a stop the guard made (enforce mode), is a fact of the run, not a judgement:
    # a budget stopped before the call that would cross it leaves no step to judge.
    forced = stop_reason in A.INTERRUPTS or (attrs.get(A.ENFORCED) and stop_reason in A.PROBE_NAMES)
    return RecordedSession(
        session_id,
        path,
        profile=_text(attrs.get(A.PROFILE)),
        task_type=_text(attrs.get(A.TASK_TYPE)),
        error=error and not attrs.get(A.ENFORCED),
        interrupt=stop_reason if forced else None,
        start_ns=start_ns,
        end_ns=end_ns,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
