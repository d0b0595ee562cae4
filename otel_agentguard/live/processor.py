"""The span processor that judges agent sessions on the fly: a thin adapter.

On start, it decides whether a span is the guard's business (a step, a
session span, or any span inside a session), stamps it with
``agentguard.session.id`` and, for a step, the session's next
``agentguard.sequence``. On end, it turns step spans into steps and hands them
to :class:`~otel_agentguard.live.sessions.LiveSessions`, which judges them in
sequence order and writes alerts and verdicts
(:mod:`otel_agentguard.live.verdicts`). In enforce mode the wrappers' hooks go
to :class:`~otel_agentguard.live.enforcement.LiveEnforcement`. Which session a
span belongs to is decided in one place, :mod:`otel_agentguard.live.resolution`.

Most spans of a service are no agent step: a span with none of the attributes
that make a step or name a session costs one set test and the context's session
lookup, and is stamped only when it runs inside a session.

Threading contract (the SDK's): ``on_start`` and ``on_end`` run synchronously
on the thread that starts or ends the span, from any number of threads. They
never raise: the SDK's multi-processor has no try/except, so an exception here
would reach the user's ``span.end()`` and skip every processor after ours.
Every entry point therefore catches, reports once, and carries on.
"""

from __future__ import annotations

import logging
import math
import os
import time
import weakref
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.attributes import SESSION_ID  # a module global: read for every span
from otel_agentguard.environment_variables import (
    OTEL_AGENTGUARD_MAX_SESSIONS,
    OTEL_AGENTGUARD_MODE,
    OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S,
)
from otel_agentguard.judge.policy import Policy, coerce_policy
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.judge.span_events import EVENT_NAMES, event_attributes, needs_events
from otel_agentguard.judge.steps import (
    KIND_OF_OPERATION,
    STEP_KIND_ATTRIBUTES,
    TOOL,
    Step,
    step_from_attributes,
    step_kind,
)
from otel_agentguard.live import registry as _registry
from otel_agentguard.live.duplicates import DuplicateSpans, enclosing_step
from otel_agentguard.live.enforcement import LiveEnforcement
from otel_agentguard.live.enforcer import Intervention
from otel_agentguard.live.metrics import GuardMetrics
from otel_agentguard.live.resolution import (
    SESSION_ATTRIBUTE_SET,
    SESSION_ATTRIBUTES,
    current_context,
    named_session,
    session_and_parent,
    session_in_context,
    span_attributes,
)
from otel_agentguard.live.session import LiveSession
from otel_agentguard.live.sessions import LiveSessions
from otel_agentguard.live.store import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_MAX_SESSIONS, SessionStore
from otel_agentguard.live.verdicts import VERDICT_SPAN_NAME, VerdictWriter, alert_attributes

logger = logging.getLogger(__name__)

MODES = ("observe", "enforce")
_MAX_LATE_TRACES = 10_000
_MAX_AGENT_SPANS = 100_000
# Attributes that make a span more than "a span inside a session, perhaps".
_MARKERS = frozenset((*STEP_KIND_ATTRIBUTES, *SESSION_ATTRIBUTES, A.NESTED_STEP, A.VERDICT))

__all__ = ["MODES", "VERDICT_SPAN_NAME", "AgentGuardSpanProcessor", "alert_attributes", "span_attributes"]


class AgentGuardSpanProcessor(SpanProcessor):
    """Judges agent sessions as their spans start and end.

    A session is one agent run: the ``invoke_agent`` span that names it (made
    by :func:`otel_agentguard.session` or by a framework), or, without one, the
    steps up to and including a final answer. Sequence numbers keep counting
    when a session id comes back for another run.

    Beside the SDK's four methods, the class is the surface that ``ag.session``,
    the wrappers' enforcement hooks and operators call; those are one-line
    delegations to :class:`LiveSessions` and :class:`LiveEnforcement`, which hold
    the logic.

    Args:
        policy: a :class:`~otel_agentguard.judge.policy.Policy`, a path to a TOML
            policy, or ``None`` for ``OTEL_AGENTGUARD_POLICY`` / the built-in defaults.
        mode: ``"observe"`` or ``"enforce"``; ``None`` reads ``OTEL_AGENTGUARD_MODE``.
        tracer_provider: where verdict spans are written. Pass the provider this
            processor is added to (``install()`` does); default the global provider.
        meter_provider: where metrics go; default the global provider.
        max_sessions: most sessions judged at once (LRU beyond it; running ones are kept).
        idle_timeout_s: a session without a span for this long is ended.
    """

    def __init__(
        self,
        policy: Policy | str | os.PathLike[str] | None = None,
        mode: str | None = None,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: Any = None,
        max_sessions: int | None = None,
        idle_timeout_s: float | None = None,
    ):
        self.policy = coerce_policy(policy)
        self._mode = _resolve_mode(mode)
        self.tracer_provider = tracer_provider
        self._store_options = _store_limits(max_sessions, idle_timeout_s)
        self._metrics = GuardMetrics(meter_provider)
        self._verdicts = VerdictWriter(self.mode, tracer_provider)
        self._sessions = LiveSessions(self.policy, self.mode == "enforce", self._verdicts, self._metrics,
                                      *self._store_options)
        # Only enforce mode asks where a model call runs, so only enforce mode keeps tool scopes.
        self._enforcement = LiveEnforcement(self._sessions, self.policy) if self.mode == "enforce" else None
        self._duplicates = DuplicateSpans()
        # Traces whose run a late-marked step put in a named session: it ends with the trace's root.
        self._late_traces: dict[int, str] = {}
        # Open spans whose agent is known (gen_ai.agent.name, theirs or an enclosing span's).
        self._agents: dict[int, str] = {}
        self._shut_down = False
        _registry.register(self)
        _start_afresh_in_forked_children(self)

    @property
    def mode(self) -> str:
        """``"observe"`` or ``"enforce"``, fixed when the processor is made."""
        return self._mode

    @property
    def shut_down(self) -> bool:
        return self._shut_down

    @property
    def _store(self) -> SessionStore[LiveSession]:
        return self._sessions.store

    def _after_fork(self) -> None:
        """In a forked child: no live sessions (they run in the parent), fresh locks."""
        self._sessions.after_fork()
        if self._enforcement is not None:
            self._enforcement.after_fork()
        self._duplicates = DuplicateSpans()

    # --- SpanProcessor -----------------------------------------------------------
    # on_start and on_end run for every span of the service, most of them no agent's.
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            try:
                attrs = span._attributes._dict  # type: ignore[union-attr]  # an SDK span's; checked below
            except AttributeError:
                attrs = None
            if type(attrs) is not dict:
                attrs = span_attributes(span)
            if not _MARKERS.isdisjoint(attrs):
                self._note_agent(span, attrs)
                self._start_marked(span, attrs, parent_context)
                return
            if self._agents:
                self._note_agent(span, attrs)
            # Neither a step nor naming a session: it joins the context's session, if any.
            if parent_context is None:
                parent_context = current_context()
            if parent_context:  # else an empty context: a trace's root span without baggage
                session_id = session_in_context(parent_context)
                if session_id is not None:
                    span.set_attribute(SESSION_ID, session_id)
            if self._enforcement is not None:
                self._enforcement.span_started(span, False, parent_context)
        except Exception as exc:  # deliberate: never raise into the user's span start
            _internal_errors.report("processor.on_start", exc)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            try:
                attrs = span._attributes._dict  # type: ignore[union-attr]  # an SDK span's; checked below
            except AttributeError:
                attrs = None
            if type(attrs) is not dict:
                attrs = span_attributes(span)
            session_id = attrs.get(SESSION_ID)
            if session_id is not None:
                if not attrs.get(A.VERDICT):  # else no span of a session
                    self._session_span_ended(span, attrs, session_id)
            elif not _MARKERS.isdisjoint(attrs):
                self._late_marked_span_ended(span, attrs)
            elif _local_root(span):
                self._trace_ended(span)
            if self._agents:
                context = span.get_span_context()
                if context is not None:
                    self._agents.pop(context.span_id, None)
        except Exception as exc:  # deliberate: never raise into the user's span.end()
            _internal_errors.report("processor.on_end", exc)

    def shutdown(self) -> None:
        if self._shut_down:
            return
        self._shut_down = True
        try:
            self._sessions.end_all()
        except Exception as exc:  # deliberate: shutdown must finish
            _internal_errors.report("processor.shutdown", exc)
        self._metrics.close()
        _registry.unregister(self)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        try:
            self._store.sweep()
        except Exception as exc:  # deliberate
            _internal_errors.report("processor.force_flush", exc)
        return True

    # --- start ---------------------------------------------------------------------------
    def _start_marked(self, span: Span, attrs: Any, parent_context: Context | None) -> None:
        if attrs.get(A.VERDICT):
            return
        if parent_context is None:
            parent_context = current_context()
        operation = attrs.get(A.GEN_AI_OPERATION_NAME)
        kind = KIND_OF_OPERATION.get(operation) if type(operation) is str else step_kind(attrs)
        named = None if SESSION_ATTRIBUTE_SET.isdisjoint(attrs) else named_session(attrs)
        carried, parent, parent_attrs = session_and_parent(parent_context)
        session_id = named or carried
        implicit = session_id is None
        if session_id is None:
            if kind is None:
                return
            session_id = trace.format_trace_id(span.get_span_context().trace_id)
        # (a foreign non-string value is replaced by the session's id)
        stamp_session = attrs.get(A.SESSION_ID) != session_id
        if self._enforcement is not None:
            self._enforcement.span_started(span, kind == TOOL, parent_context)
        is_session_span = named is not None and operation == A.OP_INVOKE_AGENT
        if (kind is None and not is_session_span) or attrs.get(A.NESTED_STEP):
            # Inside the session only; or an instrumentation already knows this span repeats its parent's step.
            if stamp_session:
                span.set_attribute(A.SESSION_ID, session_id)
            return
        # (A root span has no recording parent: its context holds no valid span.)
        if kind is not None and span.parent is not None and \
                (step := enclosing_step(kind, attrs, parent, parent_attrs)) is not None:
            if stamp_session:
                span.set_attribute(A.SESSION_ID, session_id)
            span.set_attribute(A.NESTED_STEP, True)
            self._duplicates.remember(span, step)
            return
        sequence: int | None = None
        if implicit and span.parent is None and self._enforcement is None:
            # A lone call: judged alone at its end, unless a step starts inside it (see LiveSessions).
            # (Enforce mode asks its session before and after the call: it opens one.)
            sequence = self._sessions.start_lone_call(session_id, attrs, span.start_time or time.time_ns())
        if sequence is None:
            session = self._sessions.open(session_id, attrs, parent_context, span.start_time or time.time_ns(),
                                          implicit)
            if is_session_span and session.session_span is None:
                session.attach_span(span)  # an inner invoke_agent of the same session joins the outer run
            if kind is not None:
                sequence = session.start_step()
        # (One attribute at a time: the SDK's set_attributes cleans a dict of them at greater cost.)
        if stamp_session:
            span.set_attribute(A.SESSION_ID, session_id)
        if sequence is not None:
            span.set_attribute(A.SEQUENCE, sequence)

    # --- end -------------------------------------------------------------------------------
    def _session_span_ended(self, span: ReadableSpan, attrs: Any, session_id: Any) -> None:
        """A span stamped with a session ended: its step judged, its run ended, or nothing."""
        if self._enforcement is not None and (context := span.get_span_context()) is not None:
            self._enforcement.span_ended(context.span_id)
        sessions = self._sessions
        session = sessions.store.peek(session_id)
        root = span.parent is None
        if root and session_id in sessions.lone:
            session = self._lone_call_ended(span, attrs, session_id, session)
        if session is None:
            session = self._late_step_session(span, attrs, session_id)
            if session is None:
                return  # ended (or never judged): a late span cannot change a verdict
        if session.session_span is not None and (context := span.get_span_context()) is not None \
                and context.span_id == session.session_span_id:
            # A session span we did not end ourselves (a framework's): its verdict goes
            # on a verdict span, since an ended span takes no more attributes.
            sessions.close(session, error=span.status.status_code is StatusCode.ERROR)
            return
        sequence = attrs.get(A.SEQUENCE)
        if type(sequence) is not int:  # only ours count; a foreign value of another type is no number
            sequence = None
        duplicate = attrs.get(A.NESTED_STEP)
        if duplicate:
            if self._duplicates:
                self._duplicates.ended(span, attrs)
            kind = None
        else:
            operation = attrs.get(A.GEN_AI_OPERATION_NAME)
            kind = KIND_OF_OPERATION.get(operation) if type(operation) is str else step_kind(attrs)
        if sequence is not None:
            if sequence < session.first_sequence:
                return  # a straggler of an earlier run of this session id
            if session.implicit:
                session.step_span_ended()
        elif kind is None:
            if session.ends_with_trace and _local_root(span) and (context := span.get_span_context()) is not None:
                # The span around a run whose steps said what they were only at their end.
                self._late_traces.pop(context.trace_id, None)
                session.last_context = context
                sessions.trace_over(session)
            return  # neither a step nor numbered: a span inside the session only
        if kind is None:
            sessions.skip(session, sequence)
        else:
            if sequence is None:  # became a step after it started: number it now
                sequence = session.sequence.next()
            self._step_ended(session, span, attrs, kind, session_id, sequence)
        if root and session.implicit:  # a step span that was its trace's root: the trace is over
            sessions.trace_over(session)

    def _late_marked_span_ended(self, span: ReadableSpan, attrs: Any) -> None:
        """A span that became a step or a session span after its start (its instrumentation set
        ``gen_ai.operation.name`` or ``openinference.span.kind`` once the span was open): judged
        as if it had said so at its start. Its session is the one its attributes name, else its
        trace's; it is numbered now, in the order such spans end. (Its attributes cannot be
        stamped any more: it is exported as its instrumentation wrote it.)"""
        if attrs.get(A.VERDICT) or attrs.get(A.NESTED_STEP):
            return
        kind = step_kind(attrs)
        is_agent_span = attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT
        if kind is None and not is_agent_span and not _local_root(span):
            return  # a span inside a run, no step of it
        context = span.get_span_context()
        if context is None:
            return
        sessions = self._sessions
        trace_session = trace.format_trace_id(context.trace_id)
        named = None if SESSION_ATTRIBUTE_SET.isdisjoint(attrs) else named_session(attrs)
        # The steps of this trace may already be judged under the trace's id (they were marked at
        # their start): the run they belong to is that one, whatever id the agent span names.
        if named is None or (sessions.store.peek(named) is None and sessions.store.peek(trace_session) is not None):
            session_id, implicit = trace_session, True
        else:
            session_id, implicit = named, False
        if kind is not None:
            session = self._open_late(span, attrs, session_id, implicit)
            self._step_ended(session, span, attrs, kind, session_id, session.sequence.next())
        if _local_root(span):  # the run's span in this process ended: the run is over
            self._late_traces.pop(context.trace_id, None)
            ending = sessions.store.peek(session_id)
            if ending is not None:
                ending.last_context = context  # the verdict hangs off the run's span
                sessions.close(ending, error=span.status.status_code is StatusCode.ERROR,
                               unfinished=not ending.judge.totals.final,
                               named=named if is_agent_span else None)

    def _late_step_session(self, span: ReadableSpan, attrs: Any, session_id: str) -> LiveSession | None:
        """A span stamped with a session at its start (it ran inside one) that only now says it
        is a step, in a session no step had opened yet: the session opens now."""
        if A.SEQUENCE in attrs or attrs.get(A.NESTED_STEP):
            return None  # numbered at its start: its session has ended since
        if step_kind(attrs) is None:
            return None
        return self._open_late(span, attrs, session_id, False)

    def _open_late(self, span: ReadableSpan, attrs: Any, session_id: str, implicit: bool) -> LiveSession:
        """The session of a step that said what it was only at its end. The span that names the
        run may still be open around it, so the run ends with that span or with its trace, not at
        a final answer (a framework may also mark a turn that calls tools with ``stop``)."""
        session = self._sessions.open(session_id, attrs, None, span.start_time or time.time_ns(), implicit)
        session.ends_with_trace = True
        context = span.get_span_context()
        if context is not None and not implicit:  # (an implicit one is found by its trace's id)
            late = self._late_traces
            late[context.trace_id] = session_id
            if len(late) > _MAX_LATE_TRACES:
                del late[next(iter(late))]
        return session

    def _trace_ended(self, span: ReadableSpan) -> None:
        """A trace's root span ended that was no step and named no session (the app's own span
        around an agent run): a session judged under this trace's id is over with it."""
        context = span.get_span_context()
        if context is None:
            return
        named = self._late_traces.pop(context.trace_id, None) if self._late_traces else None
        session = self._sessions.store.peek(named or trace.format_trace_id(context.trace_id))
        if session is not None and (session.implicit or session.ends_with_trace):
            session.last_context = context  # the verdict hangs off the run's root
            self._sessions.trace_over(session)

    def _lone_call_ended(self, span: ReadableSpan, attrs: Any, session_id: str,
                         stored: LiveSession | None) -> LiveSession | None:
        """A lone call's span ended: its step judged alone (None returned), or the session to judge
        it in: the one a step inside it claimed, or, where judging alone does not fit, the one it
        would have opened."""
        kind = None if attrs.get(A.NESTED_STEP) else step_kind(attrs)
        step = None
        if kind is not None and attrs.get(A.SEQUENCE) == 1 and self._sessions.asks_for_no_calls(kind, attrs):
            try:
                step = self._step(span, _with_events(span, attrs, kind), kind, session_id, 1)
            except Exception:  # deliberate: judged in a session below, which reports it once
                step = None
        if step is None:
            return self._sessions.lone_call_session(session_id, stored)
        return self._sessions.end_lone_call(session_id, stored, step, span)

    def _step_ended(self, session: LiveSession, span: ReadableSpan, attrs: Any, kind: str, session_id: str,
                    sequence: int) -> None:
        """Judge the step a span that ended describes (lost, not the ones after it, if unreadable)."""
        try:
            attrs = _with_events(span, attrs, kind)
            step = self._step(span, attrs, kind, session_id, sequence)
        except Exception as exc:  # deliberate: lose this step, not the ones after it
            _internal_errors.report("processor.step", exc)
            self._sessions.skip(session, sequence)
        else:
            self._sessions.step_ended(session, kind, step, attrs, span)

    def _step(self, span: ReadableSpan, attrs: Any, kind: str, session_id: str, sequence: int) -> Step:
        """The step a span describes; ``attrs`` with its events' already (:func:`_with_events`)."""
        step = step_from_attributes(attrs, kind, session_id, sequence, self.policy, span.name, span.start_time or 0,
                                    span.end_time or 0, span.status.status_code is StatusCode.ERROR,
                                    self._sessions.payloads)
        if step.agent is None and self._agents:  # the agent of the agent span around it
            context = span.get_span_context()
            step.agent = self._agents.get(context.span_id) if context is not None else None
        return step

    def _note_agent(self, span: Span, attrs: Any) -> None:
        """Remember the agent of a span that starts: its own ``gen_ai.agent.name``, else its
        parent's (only while agent spans are open: most applications have none)."""
        agent = attrs.get(A.GEN_AI_AGENT_NAME)
        if type(agent) is not str:
            parent = span.parent
            agent = self._agents.get(parent.span_id) if parent is not None and self._agents else None
        if agent is not None and (context := span.get_span_context()) is not None:
            agents = self._agents
            agents[context.span_id] = agent
            if len(agents) > _MAX_AGENT_SPANS:
                del agents[next(iter(agents))]

    # --- what sessions, wrappers and operators ask ------------------------------------------
    def end_session(self, span: Span, *, error: bool = False) -> Verdict | None:
        """Called by :func:`otel_agentguard.session` just before it ends its span:
        stamps the verdict on the span while it can still take attributes."""
        try:
            session_id = span_attributes(span).get(A.SESSION_ID)
            session = self._sessions.peek(session_id) if session_id else None  # (ending: no activity to count)
            if session is None or session.session_span is not span:
                return None
            return self._sessions.close(session, error=error)
        except Exception as exc:  # deliberate: the user's session must still end cleanly
            _internal_errors.report("processor.end_session", exc)
            return None

    def verdict_attributes(self, verdict: Verdict) -> dict[str, Any]:
        return self._verdicts.attributes(verdict)

    # The enforcement hooks (observe mode: nothing to do); see LiveEnforcement for what each does.
    def before_tool_call(self, args_fingerprint: str | None, session_id: str | None = None) -> Intervention | None:
        return self._enforcement.before_tool_call(args_fingerprint, session_id) if self._enforcement else None

    def before_model_call(self, session_id: str | None = None,
                          answered_ids: frozenset[str] | None = None) -> str | None:
        return self._enforcement.before_model_call(session_id, answered_ids) if self._enforcement else None

    def after_model_call(self, session_id: str | None = None, tool_calls: int | None = None,
                         call_ids: tuple[str, ...] = ()) -> None:
        if self._enforcement is not None:
            self._enforcement.after_model_call(session_id, tool_calls, call_ids)

    def stop_repeating_output(self, session_id: str | None, step: Step) -> None:
        if self._enforcement is not None:
            self._enforcement.stop_repeating_output(session_id, step)

    def review_answer(self, session_id: Any, sequence: Any, review: Any, held: Any = None) -> None:
        """See :meth:`LiveSessions.review_answer`."""
        if isinstance(session_id, str) and type(sequence) is int:
            self._sessions.review_answer(session_id, sequence, review, held)

    def request_interrupt(self, session_id: str, reason: str) -> bool:
        return self._enforcement is not None and self._enforcement.request_interrupt(session_id, reason)

    def live_session_ids(self) -> list[str]:
        """The live sessions' ids, a running lone call's included."""
        ids = self._store.keys()
        stored = set(ids)
        return ids + [session_id for session_id in list(self._sessions.lone) if session_id not in stored]

    def live_session_count(self) -> int:
        """Lock-free (a signal handler may ask); a running lone call counts as a live session."""
        return len(self._store) + sum(type(entry) is tuple for entry in list(self._sessions.lone.values()))


def _start_afresh_in_forked_children(processor: AgentGuardSpanProcessor) -> None:
    """A forked child (gunicorn, multiprocessing) inherits the parent's sessions and possibly a
    lock held mid-update: it starts afresh. A weak reference, so the hook keeps no dropped
    processor alive."""
    if not hasattr(os, "register_at_fork"):
        return
    reference = weakref.ref(processor)

    def after_fork_in_child() -> None:
        alive = reference()
        if alive is not None:
            alive._after_fork()

    os.register_at_fork(after_in_child=after_fork_in_child)


def _local_root(span: ReadableSpan) -> bool:
    """The first span of its trace in this process: none above it, or only a remote one."""
    parent = span.parent
    return parent is None or parent.is_remote


def _with_events(span: ReadableSpan, attrs: Any, kind: str) -> Any:
    """The step span's attributes, with what its GenAI events hold that they lack (see
    :mod:`otel_agentguard.judge.span_events`); most spans have no event at all."""
    try:
        events = span._events  # an SDK span's, read without a copy
    except AttributeError:
        events = span.events
    if not events or not needs_events(kind == TOOL, attrs):
        return attrs
    found = [(event.name, event.attributes or {}) for event in events if event.name in EVENT_NAMES]
    added = event_attributes(kind == TOOL, attrs, found) if found else None
    return {**attrs, **added} if added else attrs


def _resolve_mode(mode: str | None) -> str:
    chosen = (mode or os.environ.get(OTEL_AGENTGUARD_MODE) or "observe").strip().lower()
    if chosen not in MODES:
        source = "mode" if mode else OTEL_AGENTGUARD_MODE
        raise ValueError(f"{source}: expected 'observe' or 'enforce', got {chosen!r}")
    return chosen


def _store_limits(max_sessions: int | None, idle_timeout_s: float | None) -> tuple[int, float]:
    """The given limits, else the environment's, else the defaults."""
    return (
        max_sessions if max_sessions is not None
        else _env_number(OTEL_AGENTGUARD_MAX_SESSIONS, DEFAULT_MAX_SESSIONS, int),
        idle_timeout_s if idle_timeout_s is not None
        else _env_number(OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S, DEFAULT_IDLE_TIMEOUT_S, float),
    )


def _env_number(name: str, default: Any, kind: type) -> Any:
    """A positive, finite number from the environment; anything else is refused with one warning."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = kind(raw.strip())
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        logger.warning("%s=%r is not a positive finite number: using the default %s", name, raw, default)
        return default
    return value
