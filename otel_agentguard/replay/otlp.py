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
from functools import partial
from typing import Any

from otel_agentguard import attributes as A
from otel_agentguard.judge import _ranges
from otel_agentguard.judge.fingerprints.payloads import PayloadFingerprints
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.span_events import EVENT_NAMES, event_attributes, needs_events
from otel_agentguard.judge.steps import TOOL, Step, explicit_session, nested_step, step_from_attributes, step_kind
from otel_agentguard.replay._derive import with_derived_steps
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.recorded import RecordedSession

_MAX_PARENT_HOPS = 256
# The OpenTelemetry JS SDK stamps a span's start in whole milliseconds and its end as start plus
# a measured duration, so a child can seem to end up to a millisecond after its parent. A session
# span started on a whole millisecond gets that much slack; one stamped in nanoseconds none.
_MS_NS = 1_000_000
_CLOCK_SLACK_NS = 2 * _MS_NS
ERROR_CODES = (2, "2", "STATUS_CODE_ERROR", "ERROR")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
# Attributes the judge reads as counts: range-checked, so a bad file is an error naming the
# field instead of an OverflowError deep in the judge.
_COUNT_ATTRIBUTES = (
    A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS, *A.LEGACY_INPUT_TOKENS, *A.LEGACY_OUTPUT_TOKENS,
    A.SEQUENCE, A.RESPONSE_TOOL_CALLS,
)
COUNT_KEYS = frozenset(_COUNT_ATTRIBUTES)


# A value holds one member. One with more (not valid OTLP) is read by this precedence, whatever
# their order in the file.
MEMBER_PRECEDENCE = (
    "stringValue", "intValue", "boolValue", "doubleValue", "arrayValue", "kvlistValue", "bytesValue",
)


def decode_value(value: Mapping[str, Any] | None) -> Any:
    """One OTLP ``AnyValue`` as a Python value."""
    if type(value) is dict:  # what a JSON parser gives: skip the ABC check below
        if len(value) == 1:  # the usual shape: one typed member
            item = value.get("stringValue", _ABSENT)
            if item is not _ABSENT:
                return item
    elif value is None:
        return None
    elif not isinstance(value, Mapping):
        raise TypeError("an AnyValue must be an object")  # _explain says where
    if len(value) > 1:
        value = {key: value[key] for key in MEMBER_PRECEDENCE if key in value}
    for key, item in value.items():
        if key == "stringValue":
            return item
        if key == "intValue":
            return int64(item)
        if key == "doubleValue":
            return float(item)
        if key == "boolValue":
            return bool(item)
        if key == "arrayValue":
            return decode_array(item)
        if key == "kvlistValue":
            return {kv.get("key"): decode_value(kv.get("value")) for kv in (item or {}).get("values", ())}
        if key == "bytesValue":
            return base64.b64decode(item)
    return None


def decode_array(item: Mapping[str, Any] | None) -> tuple[Any, ...]:
    """An ``arrayValue``'s members (strings, the usual ones, read inline)."""
    return tuple([v["stringValue"] if type(v) is dict and len(v) == 1 and "stringValue" in v
                  else decode_value(v) for v in (item or {}).get("values", ())])


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


# Every attribute key replay reads: the step adapter (steps.py), the tool-call readers
# (tool_calls.py, derived.py) and this module. Spans carry many more (HTTP, resource-like,
# provider details): a replay stores only these, and of the rest only checks that they are
# well formed, so a bad file is refused the same whatever it holds. A test records every key
# the readers ask for and holds this list to it.
READ_KEYS = frozenset({
    A.GEN_AI_OPERATION_NAME, A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, A.SESSION_ID_SEMCONV, A.TRACELOOP_SESSION_ID,
    A.VERDICT, A.NESTED_STEP, A.SEQUENCE, A.STOP_REASON, A.ENFORCED, A.PROFILE, A.TASK_TYPE, A.ERROR_TYPE,
    A.GEN_AI_AGENT_NAME, "traceloop.span.kind", "openinference.span.kind", "llm.request.type", "ai.operationId",
    # tool steps
    A.GEN_AI_TOOL_NAME, "traceloop.entity.name", "tool.name", "ai.toolCall.name", A.GEN_AI_TOOL_CALL_ID,
    A.TOOL_ARGS_FINGERPRINT, A.GEN_AI_TOOL_CALL_ARGUMENTS, "traceloop.entity.input", "input.value",
    "ai.toolCall.args", A.TOOL_RESULT_FINGERPRINT, A.TOOL_RESULT_EMPTY, A.GEN_AI_TOOL_CALL_RESULT,
    "traceloop.entity.output", "output.value", "ai.toolCall.result", A.TOOL_EFFECT,
    # model steps
    A.GEN_AI_RESPONSE_MODEL, A.GEN_AI_REQUEST_MODEL, "llm.model_name", A.GEN_AI_RESPONSE_FINISH_REASONS,
    A.GEN_AI_RESPONSE_ID,
    "llm.finish_reason", A.RESPONSE_TOOL_CALLS, "ai.response.toolCalls", A.GEN_AI_OUTPUT_MESSAGES,
    A.GEN_AI_INPUT_MESSAGES, A.FINAL_CLAIMS, A.FINAL_CLAIM_RULE, A.FINAL_CLAIM_CLAUSE, A.FINAL_CLAIMS_CHECKED,
    A.FINAL_CLAIMS_BORDERLINE,
    A.OUTPUT_REPETITION,
    "ai.response.text", *_COUNT_ATTRIBUTES,
})
# Each read key as one shared string: a decoder makes a new string for every key of every span,
# and a replay keeps the attributes of every step until the end (about 0.6 KB a span).
SHARED_READ_KEYS: dict[str, str] = {key: key for key in READ_KEYS}
# Read keys whose values repeat across a trace's spans (a few names, the session's id): a reader
# may keep each such value once.
REPEATED_VALUE_KEYS = frozenset({
    A.GEN_AI_OPERATION_NAME, A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, A.SESSION_ID_SEMCONV, A.TRACELOOP_SESSION_ID,
    A.PROFILE, A.TASK_TYPE, A.GEN_AI_TOOL_NAME, A.TOOL_EFFECT, A.GEN_AI_RESPONSE_MODEL, A.GEN_AI_REQUEST_MODEL,
    "traceloop.span.kind", "openinference.span.kind", "llm.request.type", "traceloop.entity.name", "tool.name",
    "ai.toolCall.name", "llm.model_name", "ai.operationId",
})
# Messages flattened into numbered keys (OpenInference, OpenLLMetry before the conventions).
READ_KEY_PREFIXES = ("llm.output_messages.", "llm.input_messages.", "gen_ai.completion.", "gen_ai.prompt.")


def with_event_attributes(kind: str, attrs: dict[str, Any], events: Any) -> dict[str, Any]:
    """A step span's attributes with what its GenAI events hold that they lack (see
    :mod:`otel_agentguard.judge.span_events`); ``events`` as OTLP JSON has them."""
    if type(events) is not list:
        raise TypeError("events must be a list")  # _explain says where
    found = []
    for event in events:
        if type(event) is dict and event.get("name") in EVENT_NAMES:
            found.append((event["name"], {item["key"]: decode_value(item.get("value"))
                                          for item in event.get("attributes") or ()}))
    added = event_attributes(kind == TOOL, attrs, found) if found else None
    return {**attrs, **added} if added else attrs


def decode_read_attributes(items: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    """The attributes in :data:`READ_KEYS` (and under its prefixes) as Python values; the others
    are decoded only to check them (an unset or string value needs no check)."""
    decoded: dict[str, Any] = {}
    if not items:
        return decoded
    for item in items:
        key = item["key"]
        value = item.get("value")
        shared = SHARED_READ_KEYS.get(key) if type(key) is str else None
        if shared is not None:
            key = shared
            wanted = True
        else:
            wanted = is_read_key(key)
        if type(value) is dict and len(value) == 1:  # the usual shape: one typed member, decoded inline
            if "stringValue" in value:  # most attributes are strings: nothing to check
                if wanted:
                    decoded[key] = value["stringValue"]
                continue
            if "intValue" in value:
                inner = int64(value["intValue"])
            elif "boolValue" in value:
                inner = bool(value["boolValue"])
            else:
                inner = decode_value(value)
            if wanted:
                decoded[key] = inner
        elif wanted:
            decoded[key] = decode_value(value)
        elif value is not None:
            decode_value(value)  # checked, not kept
    return decoded


# Whether an attribute key outside READ_KEYS is read (under a prefix), by key: a span's keys come
# from a small set, and a lookup is cheaper than the prefix test. Bounded: keys beyond it are
# tested every time.
_KEPT: dict[str, bool] = {}
_KEPT_MAX = 4096


def is_read_key(key: Any) -> bool:
    """Whether a key outside READ_KEYS is read (one under a read prefix, or not a string)."""
    # A key that is not a string is kept as it is, as every key the readers might ask for.
    wanted = _KEPT.get(key) if type(key) is str else True
    if wanted is None:
        wanted = key.startswith(READ_KEY_PREFIXES)
        if len(_KEPT) < _KEPT_MAX:
            _KEPT[key] = wanted
    return wanted


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
    session: str | None  # the session the span names itself, if any


# A span read in full, as the collector records it: kind (None: not a step), attributes, name,
# trace id, span id, parent span id, start and end (ns), error, the session it names, the run it
# opens (a session span).
ReadSpan = tuple[
    str | None, dict[str, Any], str, str, str, str, int, int, bool, str | None, RecordedSession | None
]


class OTLPCollector:
    """Accumulates spans from any number of OTLP JSON documents, then yields sessions."""

    def __init__(self, policy: Policy, payloads: PayloadFingerprints | None = None):
        """``payloads``: where raw tool payloads are fingerprinted and remembered (default: this
        collector's own memory; a service holding many traces open shares one)."""
        self._policy = policy
        self._payloads = payloads if payloads is not None else PayloadFingerprints()
        self._candidates: list[_Candidate] = []
        self._step_agents: dict[str, str] = {}  # step span id -> the agent of the span around it
        self._forget_spans()

    def _forget_spans(self) -> None:
        self._parents: dict[str, str] = {}
        # Span ids seen, with their trace id; the same span id in another trace too (rare) also
        # goes in the set of (trace id, span id) pairs.
        self._seen: dict[str, str] = {}
        self._seen_elsewhere: set[tuple[str, str]] = set()
        self._session_of: dict[str, str] = {}
        self._runs: dict[str, RecordedSession] = {}  # session span id -> the run it delimits
        self._agents: dict[str, str | None] = {}  # invoke_agent span id -> the session it names, if any
        self._steps_by_span: dict[str, _Candidate] = {}
        self._agent_names: dict[str, str] = {}  # span id -> its gen_ai.agent.name (agent spans, mostly)

    def add_document(self, document: Mapping[str, Any], path: str, line: int) -> None:
        for r, resource_spans in enumerate(_members(document, "resourceSpans", "", path, line)):
            for s, scope_spans in enumerate(_members(resource_spans, "scopeSpans", f"resourceSpans[{r}]", path, line)):
                spans = _members(scope_spans, "spans", f"resourceSpans[{r}].scopeSpans[{s}]", path, line)
                for k, span in enumerate(spans):
                    try:
                        if not isinstance(span, dict):
                            raise TypeError("a span must be an object")  # _explain says where
                        self.add_span(span, decode_read_attributes(span.get("attributes")), path, line, (r, s, k))
                    except InputError:
                        raise
                    except (AttributeError, KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
                        where = _span_path((r, s, k))
                        raise InputError(path, _explain(span, where) or f"{where}: not a valid OTLP JSON span "
                                         f"({type(exc).__name__})", line) from None

    def add_span(self, span: Mapping[str, Any], attrs: dict[str, Any], path: str, line: int,
                 index: tuple[int, int, int] = (0, 0, 0)) -> None:
        """One OTLP JSON span whose attributes are given already decoded (``agentguard serve``
        decodes protobuf attributes straight to values rather than through the JSON shape)."""
        span_id = span.get("spanId") or ""
        parent_id = span.get("parentSpanId") or ""
        trace_id = span.get("traceId") or ""
        if type(span_id) is not str or type(parent_id) is not str or type(trace_id) is not str:
            raise TypeError("span ids must be strings")  # _explain says which
        if not span_id or not trace_id:
            raise InputError(path, "span without traceId or spanId", line)
        if not self._is_new(attrs, trace_id, span_id, parent_id):
            return
        start_ns = int(span.get("startTimeUnixNano") or 0)
        end_ns = int(span.get("endTimeUnixNano") or 0)
        if not (0 <= start_ns <= _ranges.MAX_UNIX_NANO and 0 <= end_ns <= _ranges.MAX_UNIX_NANO):
            _check_times(span, path, line, index)
        status = span.get("status")
        if status:
            if type(status) is not dict:
                raise TypeError("status must be an object")  # _explain says where
            code = status.get("code")
            error = code in ERROR_CODES if code else False  # unset or 0 (the usual): no error
        else:
            error = False
        kind = None if attrs.get(A.NESTED_STEP) else step_kind(attrs)
        name = ""
        if kind is not None:
            if not counts_in_range(attrs):
                _check_counts(attrs, path, line, index)  # says which, in the documented order
            events = span.get("events")
            if events and needs_events(kind == TOOL, attrs):
                attrs = with_event_attributes(kind, attrs, events)
            name = span.get("name") or ""
            if type(name) is not str:
                name = str(name)
        session_id, run = session_facts(attrs, path, start_ns, end_ns, error)
        self._admit((kind, attrs, name, trace_id, span_id, parent_id, start_ns, end_ns, error, session_id, run),
                    path, line)

    def add_read_spans(self, spans: Iterable[ReadSpan], path: str, line: int) -> None:
        """Spans a reader has decoded and checked in full already (``_typed_otlp``): each is
        admitted as :meth:`add_span` would, and none can fail any more."""
        is_new = self._is_new
        for span in spans:
            kind, attrs, name, trace_id, span_id, parent_id, start_ns, end_ns, error, session_id, run = span
            if is_new(attrs, trace_id, span_id, parent_id):
                self._admit(span, path, line)

    def _is_new(self, attrs: dict[str, Any], trace_id: str, span_id: str, parent_id: str) -> bool:
        """Whether a span is to be read: not a verdict the guard wrote, nor one seen already."""
        if attrs.get(A.VERDICT):
            if parent_id:  # not an input to judge, but a link in its children's parent chain
                self._parents.setdefault(span_id, parent_id)
            return False
        seen = self._seen.get(span_id)
        if seen is None:
            self._seen[span_id] = trace_id
        elif seen == trace_id:
            return False  # the same span exported twice (a retry, or one file given twice) is one span
        elif (trace_id, span_id) in self._seen_elsewhere:
            return False
        else:
            self._seen_elsewhere.add((trace_id, span_id))
        return True

    def _admit(self, span: ReadSpan, path: str, line: int) -> None:
        """Record a span read in full: nothing here can fail."""
        kind, attrs, name, trace_id, span_id, parent_id, start_ns, end_ns, error, session_id, run = span
        if parent_id:
            self._parents[span_id] = parent_id
        if session_id:
            self._session_of[span_id] = session_id
            if run is not None:
                self._runs[span_id] = run
        if attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT:
            self._agents[span_id] = session_id
        agent = attrs.get(A.GEN_AI_AGENT_NAME)
        if type(agent) is str and agent:
            self._agent_names[span_id] = agent
        if kind is not None:
            candidate = _Candidate(
                kind, attrs, name, trace_id, span_id, parent_id, start_ns, end_ns, error, path, line, session_id,
            )
            self._steps_by_span[span_id] = candidate
            self._candidates.append(candidate)

    def _resolve(self, candidate: _Candidate) -> tuple[str, str | None]:
        """The step's session id and, when it ran inside one, the span id of its session span.

        Like the live processor: the span's own session attributes first, then its
        parent chain, else the trace; the run is the outermost session span of that
        session around it (an inner ``invoke_agent`` of the same session joins it).
        """
        session_id = candidate.session
        # A step's gen_ai.conversation.id alone may name a provider's thread, not the run
        # (Microsoft Agent Framework writes each response's id there): inside an agent's run,
        # the run's session wins.
        by_conversation = session_id is not None and _named_by_conversation_only(candidate.attrs)
        run = None
        span_id = candidate.parent_id
        for _ in range(_MAX_PARENT_HOPS):
            if not span_id:
                break
            if by_conversation and span_id in self._agents:
                session_id = self._agents[span_id] or candidate.trace_id
                by_conversation = False
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
        """Every session of the spans added, in order of their start. Call it once, after the
        last span: it hands the spans over, and the collector is empty afterwards (a replay of
        millions of spans frees each session's spans as its steps are built, and the steps take
        the memory the spans held, rather than fresh pages)."""
        joined = self._joined_runs()
        by_session: dict[str, list[tuple[str | None, _Candidate]]] = {}
        unnumbered: set[str] = set()  # sessions with a step span that has no sequence number
        steps_by_span = self._steps_by_span
        candidates, self._candidates = self._candidates, []
        candidate: _Candidate | None  # a derived step has none
        for candidate in candidates:
            parent = steps_by_span.get(candidate.parent_id)
            if parent is not None and nested_step(candidate.kind, candidate.attrs, parent.kind, parent.attrs):
                continue  # the same step seen twice (e.g. an MCP server's span under the client's call)
            session_id, run = self._resolve(candidate)
            if self._agent_names and A.GEN_AI_AGENT_NAME not in candidate.attrs:
                self._note_step_agent(candidate)
            members = by_session.get(session_id)
            if members is None:
                members = by_session[session_id] = []
            members.append((joined.get(run, run) if run else None, candidate))
            if not isinstance(candidate.attrs.get(A.SEQUENCE), int):
                unnumbered.add(session_id)
        del candidates, steps_by_span  # the members hold the spans now
        runs = self._runs
        self._forget_spans()
        result = [run for span_id, run in runs.items() if joined.get(span_id) == span_id]
        for session_id in list(by_session):
            members = by_session.pop(session_id)  # freed when its steps are built
            # Sequence numbers count per session id across its runs, as live.
            numbered = session_id not in unnumbered
            if numbered:
                members.sort(key=lambda m: m[1].attrs[A.SEQUENCE])
            else:
                members.sort(key=lambda m: (m[1].start_ns, m[1].end_ns))
            spanless: RecordedSession | None = None
            for run, candidate, step in self._with_derived(members, numbered, session_id):
                if run is not None:
                    session = runs[run]
                    slack = _CLOCK_SLACK_NS if session.start_ns % _MS_NS == 0 else 0
                    if candidate is not None and session.end_ns and candidate.end_ns > session.end_ns + slack:
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
        self._step_agents = {}
        return result

    def _with_derived(
        self, members: list[tuple[str | None, _Candidate]], numbered: bool, session_id: str
    ) -> list[tuple[str | None, _Candidate | None, Step]]:
        """The members' steps, with tool steps derived from their model spans in between."""
        # The derivation is typed for any StepSpan; these members are _Candidates, and so what it returns.
        try:
            return with_derived_steps(  # type: ignore[return-value]
                members, numbered=numbered, session_id=session_id, policy=self._policy,
                build=partial(self._step, session_id=session_id),
            )
        except InputError:
            raise
        except Exception as exc:  # a tool call the adapter cannot read: name the file, never a traceback
            first = members[0][1]
            raise InputError(
                first.path, f"unreadable tool call in session {session_id!r} ({type(exc).__name__}: {exc})", first.line
            ) from None

    def _note_step_agent(self, candidate: _Candidate) -> None:
        """The agent of the nearest span around a step that names one."""
        span_id, parents, names = candidate.parent_id, self._parents, self._agent_names
        for _ in range(_MAX_PARENT_HOPS):
            if not span_id:
                return
            agent = names.get(span_id)
            if agent is not None:
                self._step_agents[candidate.span_id] = agent
                return
            span_id = parents.get(span_id, "")

    def _step(self, candidate: _Candidate, sequence: int, session_id: str) -> Step:
        step = self._read_step(candidate, sequence, session_id)
        if step.agent is None and self._step_agents:
            step.agent = self._step_agents.get(candidate.span_id)
        return step

    def _read_step(self, candidate: _Candidate, sequence: int, session_id: str) -> Step:
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
                payloads=self._payloads,
            )
        except Exception as exc:  # a span the adapter cannot read: name it, never a traceback
            raise InputError(candidate.path, f"unreadable span {candidate.name!r} ({type(exc).__name__}: {exc})",
                             candidate.line) from None


def _run(
    session_id: str, attrs: Mapping[str, Any], path: str, start_ns: int, end_ns: int, error: bool
) -> RecordedSession:
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


def _named_by_conversation_only(attrs: Mapping[str, Any]) -> bool:
    return A.GEN_AI_CONVERSATION_ID in attrs and A.SESSION_ID not in attrs and A.SESSION_ID_SEMCONV not in attrs \
        and A.TRACELOOP_SESSION_ID not in attrs


def session_facts(
    attrs: Mapping[str, Any], path: str, start_ns: int, end_ns: int, error: bool
) -> tuple[str | None, RecordedSession | None]:
    """The session a span names, and the run it opens when it is a session span."""
    session_id = attrs.get(A.SESSION_ID)  # the usual spelling, else every other one in order
    if not session_id or type(session_id) is not str:
        session_id = explicit_session(attrs)
    if session_id and attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT:
        return session_id, _run(session_id, attrs, path, start_ns, end_ns, error)
    return session_id, None


def counts_in_range(attrs: Mapping[str, Any]) -> bool:
    """Whether every count the judge reads is an int in range (the usual case: none, or all)."""
    # (A plain loop: for the four or so counts of a step span, it is faster than map, min and max.)
    for key in COUNT_KEYS.intersection(attrs):
        value = attrs[key]
        if type(value) is not int or not 0 <= value <= _ranges.MAX_COUNT:
            return False
    return True


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- validation: what is wrong, in the file's terms -------------------------------------------


def _members(parent: Any, key: str, where: str, path: str, line: int) -> Any:
    """``parent[key]``, which must be a list (absent or null: empty)."""
    if not isinstance(parent, dict):
        raise InputError(path, f"{where or 'the document'} must be an object, got {_json_type(parent)}", line)
    value = parent.get(key)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InputError(path, f"{where + '.' if where else ''}{key} must be a list, got {_json_type(value)}", line)
    return value


def int64(value: Any) -> int:
    """An OTLP ``intValue``: an integer (or its decimal string) within int64."""
    kind = type(value)
    if kind is str:
        number = int(value)
    elif kind is int:
        number = value
    else:
        raise TypeError("intValue must be an integer or its decimal string")
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise ValueError("intValue out of range")
    return number


def _span_path(index: tuple[int, int, int]) -> str:
    """Where a span sits in its document, as the error messages name it (built only for errors)."""
    return "resourceSpans[{}].scopeSpans[{}].spans[{}]".format(*index)


def _check_times(span: Mapping[str, Any], path: str, line: int, index: tuple[int, int, int]) -> None:
    """Raise the error for a span time out of range (or not an integer at all)."""
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        value = span.get(key) or 0
        try:
            number = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else None
        except ValueError:
            number = None
        if number is None or not 0 <= number <= _ranges.MAX_UNIX_NANO:
            raise InputError(path, f"{_span_path(index)}.{key}: expected {_ranges.UNIX_NANO.expected}, "
                             f"got {_ranges.describe(value)}", line)


def _check_counts(attrs: Mapping[str, Any], path: str, line: int, index: tuple[int, int, int]) -> None:
    """The counts the judge reads, when they are numbers (or numeric strings), must be in range."""
    for key in _COUNT_ATTRIBUTES:
        value = attrs.get(key)
        if value is None or (type(value) is int and 0 <= value <= _ranges.MAX_COUNT) or isinstance(value, bool):
            continue  # the usual cases first: absent, or a count in range
        number = value
        if isinstance(value, str):
            try:
                number = int(value)
            except ValueError:
                continue  # not a number: the step reader ignores it
        if isinstance(number, (int, float)) and not 0 <= number <= _ranges.MAX_COUNT:
            raise InputError(path, f"{_span_path(index)}: attribute {key}: expected {_ranges.COUNT.expected}, "
                             f"got {_ranges.describe(value)}", line)


def _explain(span: Any, where: str) -> str | None:
    """What is wrong with a span that failed to read (the slow path: only after a failure)."""
    if not isinstance(span, dict):
        return f"{where} must be an object, got {_json_type(span)}"
    for key in ("traceId", "spanId", "parentSpanId", "name"):
        value = span.get(key)
        if value is not None and not isinstance(value, str):
            return f"{where}.{key} must be a string, got {_json_type(value)}"
    for key in ("startTimeUnixNano", "endTimeUnixNano"):
        value = span.get(key) or 0
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            return f"{where}.{key}: expected {_ranges.UNIX_NANO.expected}, got {_ranges.describe(value)}"
        try:
            int(value)
        except ValueError:
            return f"{where}.{key}: expected {_ranges.UNIX_NANO.expected}, got {_ranges.describe(value)}"
    status = span.get("status")
    if status is not None and not isinstance(status, dict):
        return f"{where}.status must be an object, got {_json_type(status)}"
    items = span.get("attributes")
    if items is None:
        return None
    if not isinstance(items, list):
        return f"{where}.attributes must be a list, got {_json_type(items)}"
    for index, item in enumerate(items):
        here = f"{where}.attributes[{index}]"
        if not isinstance(item, dict):
            return f"{here} must be an object with 'key' and 'value', got {_json_type(item)}"
        if not isinstance(item.get("key"), str):
            return f"{here}.key must be a string, got {_json_type(item.get('key'))}"
        problem = _explain_value(item.get("value"), f"{here} ({item['key']}).value")
        if problem:
            return problem
    return None


def _explain_value(value: Any, where: str, depth: int = 0) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        return f'{where} must be an object such as {{"stringValue": ...}}, got {_json_type(value)}'
    if depth > 64:
        return f"{where}: values nested more than 64 levels deep"
    for key, item in value.items():
        if key == "intValue":
            try:
                int64(item)
            except (TypeError, ValueError, OverflowError):
                return f"{where}.intValue: expected an integer from -2**63 to 2**63-1, got {_ranges.describe(item)}"
        elif key == "doubleValue":
            try:
                float(item)
            except (TypeError, ValueError, OverflowError):
                return f"{where}.doubleValue: expected a number, got {_ranges.describe(item)}"
        elif key == "bytesValue":
            try:
                base64.b64decode(item)
            except (TypeError, ValueError):
                return f"{where}.bytesValue: expected base64 text"
        elif key in ("arrayValue", "kvlistValue"):
            if item is None:
                continue
            if not isinstance(item, dict) or not isinstance(item.get("values", []), list):
                return f"{where}.{key} must be an object with a 'values' list"
            for index, member in enumerate(item.get("values") or ()):
                if key == "kvlistValue":
                    if not isinstance(member, dict):
                        return f"{where}.{key}.values[{index}] must be an object with 'key' and 'value'"
                    member = member.get("value")
                problem = _explain_value(member, f"{where}.{key}.values[{index}]", depth + 1)
                if problem:
                    return problem
    return None


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__
