"""The span processor that judges agent sessions on the fly.

On start, it stamps every span of a session with ``agentguard.session.id``
and every step span with the session's next ``agentguard.sequence``. On end,
it turns step spans into steps, puts them back in sequence order, feeds them
to the session's judge, and writes each alert as an ``agentguard.stall`` event
on the still-open session span. When a session ends, its verdict
(``agentguard.stop_reason`` and totals) goes on the session span, or, when no
session span is open, on a short ``agentguard.verdict`` span.

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
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, StatusCode
from opentelemetry.util.types import AttributeValue

from otel_agentguard import _internal_errors, _registry, interrupts
from otel_agentguard import attributes as A
from otel_agentguard._context import current_session
from otel_agentguard._enforce import Enforcer, Intervention, breakpoint_of
from otel_agentguard._store import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_MAX_SESSIONS, SessionStore
from otel_agentguard.derived import DerivedTools
from otel_agentguard.environment_variables import (
    OTEL_AGENTGUARD_MAX_SESSIONS,
    OTEL_AGENTGUARD_MODE,
    OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S,
)
from otel_agentguard.errors import AgentStopped
from otel_agentguard.judge import SequenceBuffer, SessionJudge, Verdict, choose_stop_reason
from otel_agentguard.metrics import GuardMetrics
from otel_agentguard.policy import Policy, coerce_policy
from otel_agentguard.probes import Alert
from otel_agentguard.probes.budget import DISPOSAL as BUDGET_DISPOSAL
from otel_agentguard.steps import TOOL, Step, explicit_session, nested_step, step_from_attributes, step_kind
from otel_agentguard.version import __version__

logger = logging.getLogger(__name__)

MODES = ("observe", "enforce")
VERDICT_SPAN_NAME = "agentguard.verdict"
_MAX_REMEMBERED_COUNTERS = 10_000
_MAX_NESTED_STEPS = 10_000
_CARRIED_TO_STEP = (
    A.RESPONSE_TOOL_CALLS, A.FINAL_CLAIMS, A.GEN_AI_RESPONSE_FINISH_REASONS,
    A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS,
)
_MAX_TOOL_SCOPES = 100_000


class _Sequence:
    """A session's sequence counter; it outlives the session so a reused id keeps counting."""

    __slots__ = ("_lock", "last")

    def __init__(self, last: int = 0):
        self._lock = threading.Lock()
        self.last = last

    def next(self) -> int:
        with self._lock:
            self.last += 1
            return self.last


class _Session:
    """A live session: its judge, its sequence counter and its open session span."""

    __slots__ = (
        "session_id", "lock", "judge", "buffer", "sequence", "first_sequence", "session_span", "last_context",
        "pending_alerts", "ended", "enforcer", "interrupt", "derived", "implicit",
    )

    def __init__(self, session_id: str, judge: SessionJudge, sequence: _Sequence, enforcer: Enforcer | None,
                 implicit: bool = False):
        self.session_id = session_id
        self.implicit = implicit  # no session id anywhere: the trace stands in for the session
        self.lock = threading.Lock()
        self.judge = judge
        self.sequence = sequence
        self.first_sequence = sequence.last + 1
        self.buffer = SequenceBuffer(first=self.first_sequence)
        self.session_span: Span | None = None
        self.last_context: SpanContext | None = None
        self.pending_alerts: list[Alert] = []  # for the verdict span when no session span is open
        self.ended = False
        self.enforcer = enforcer  # None in observe mode
        self.interrupt: str | None = None  # steered, drained, dispatched or awaiting, once honoured
        self.derived = DerivedTools(session_id, judge.policy)  # tool calls only a model span recorded

    def span_open(self) -> bool:
        return self.session_span is not None and self.session_span.is_recording()

    def is_session_span(self, span: ReadableSpan) -> bool:
        own = self.session_span
        context = span.get_span_context()
        return own is not None and context is not None and own.get_span_context().span_id == context.span_id


class AgentGuardSpanProcessor(SpanProcessor):
    """Judges agent sessions as their spans start and end.

    A session is one agent run: the ``invoke_agent`` span that names it (made
    by :func:`otel_agentguard.session` or by a framework), or, without one, the
    steps up to and including a final answer. Sequence numbers keep counting
    when a session id comes back for another run.

    Args:
        policy: a :class:`~otel_agentguard.policy.Policy`, a path to a TOML
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
        self.mode = _resolve_mode(mode)
        self._tracer_provider = tracer_provider
        self._tracer: trace.Tracer | None = None
        self._metrics = GuardMetrics(meter_provider)
        self._store_options = (
            max_sessions if max_sessions is not None
            else _env_number(OTEL_AGENTGUARD_MAX_SESSIONS, DEFAULT_MAX_SESSIONS, int),
            idle_timeout_s if idle_timeout_s is not None
            else _env_number(OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S, DEFAULT_IDLE_TIMEOUT_S, float),
        )
        self._store = self._new_store()
        # Counters of ended sessions, so a session id that comes back keeps counting (bounded).
        self._counters: OrderedDict[str, _Sequence] = OrderedDict()
        self._counters_lock = threading.Lock()
        # Span ids of open tool steps and of every span under one: a model call made there is
        # a sub-agent's, inside the outer batch, so it is no cut point. Bounded (leaked spans).
        # Only enforce mode asks, so only enforce mode keeps them.
        self._tool_scopes: dict[int, None] = {}
        self._track_scopes = self.mode == "enforce"
        # Nested duplicate span id -> the step span of the same call (bounded: spans that never end).
        self._nested_steps: dict[int, Any] = {}
        self._shut_down = False
        _registry.register(self)
        if hasattr(os, "register_at_fork"):
            # A forked child (gunicorn, multiprocessing) inherits the parent's sessions and
            # possibly a lock held mid-update: start it afresh, through a weak reference so
            # the hook does not keep a dropped processor alive.
            reference = weakref.ref(self)

            def after_fork_in_child() -> None:
                processor = reference()
                if processor is not None:
                    processor._after_fork()

            os.register_at_fork(after_in_child=after_fork_in_child)

    def _new_store(self) -> SessionStore[_Session]:
        max_sessions, idle_timeout_s = self._store_options
        return SessionStore(self._evicted, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                            pinned=_Session.span_open)

    def _after_fork(self) -> None:
        """In a forked child: no live sessions (they run in the parent), fresh locks."""
        self._store = self._new_store()
        self._counters = OrderedDict()
        self._counters_lock = threading.Lock()
        self._tool_scopes = {}
        self._nested_steps = {}

    # --- SpanProcessor -----------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            self._on_start(span, parent_context)
        except Exception as exc:  # deliberate: never raise into the user's span start
            _internal_errors.report("processor.on_start", exc)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            self._on_end(span)
        except Exception as exc:  # deliberate: never raise into the user's span.end()
            _internal_errors.report("processor.on_end", exc)

    def shutdown(self) -> None:
        if self._shut_down:
            return
        self._shut_down = True
        try:
            for session in self._store.drain():
                self._end(session, unfinished=True)
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
    def _on_start(self, span: Span, parent_context: Context | None) -> None:
        attrs = span_attributes(span)
        if attrs.get(A.VERDICT):
            return
        kind = step_kind(attrs)
        named = explicit_session(attrs)
        is_session_span = named is not None and attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT
        context_session = current_session(parent_context)
        session_id = (
            named
            or (context_session.session_id if context_session else None)
            or _baggage_session(parent_context)
            or _parent_session(parent_context)
        )
        implicit = session_id is None
        if session_id is None:
            if kind is None:
                return
            session_id = trace.format_trace_id(span.get_span_context().trace_id)
        resolved: str = session_id  # the closure below sees the narrowed type
        stamp_session = attrs.get(A.SESSION_ID) != session_id  # absent, or a foreign non-string value
        if self._track_scopes and (
                kind == TOOL or (self._tool_scopes and _parent_span_id(parent_context) in self._tool_scopes)):
            self._enter_tool_scope(span)
        if kind is None and not is_session_span:
            if stamp_session:
                span.set_attribute(A.SESSION_ID, session_id)
            return
        if attrs.get(A.NESTED_STEP):
            # An instrumentation already knows this span repeats its parent's step.
            if stamp_session:
                span.set_attribute(A.SESSION_ID, session_id)
            return
        if kind is not None and _same_step_as_parent(kind, attrs, parent_context):
            # The same call seen twice (two instrumentations of one request; an MCP server's span
            # under the client's): the enclosing span is the step.
            stamp: dict[str, AttributeValue] = (
                {A.SESSION_ID: session_id, A.NESTED_STEP: True} if stamp_session else {A.NESTED_STEP: True})
            span.set_attributes(stamp)
            self._remember_step_of(span, trace.get_current_span(parent_context))
            return
        start_ns = span.start_time or time.time_ns()
        session = self._store.get_or_create(
            resolved, lambda: self._new_session(resolved, attrs, context_session, start_ns, implicit)
        )
        if is_session_span and session.session_span is None:
            session.session_span = span  # an inner invoke_agent of the same session joins the outer run
        if kind is not None:
            # One write for both stamps: each SDK set_attribute takes a lock and validates.
            if stamp_session:
                span.set_attributes({A.SESSION_ID: session_id, A.SEQUENCE: session.sequence.next()})
            else:
                span.set_attribute(A.SEQUENCE, session.sequence.next())
        elif stamp_session:
            span.set_attribute(A.SESSION_ID, session_id)

    def _enter_tool_scope(self, span: Span) -> None:
        scopes = self._tool_scopes
        scopes[span.get_span_context().span_id] = None
        if len(scopes) > _MAX_TOOL_SCOPES:
            scopes.pop(next(iter(scopes)), None)  # the oldest: a span that never ended

    def _in_tool_scope(self) -> bool:
        return bool(self._tool_scopes) and trace.get_current_span().get_span_context().span_id in self._tool_scopes

    def _remember_step_of(self, nested: Span, step: Any) -> None:
        nested_steps = self._nested_steps
        nested_steps[nested.get_span_context().span_id] = step
        if len(nested_steps) > _MAX_NESTED_STEPS:
            nested_steps.pop(next(iter(nested_steps)), None)  # the oldest: a span that never ended

    def _carry_to_step(self, span: ReadableSpan, attrs: Mapping[str, Any]) -> None:
        """What the judge reads, written on a nested duplicate of a call (three instrumentations
        of one request: ours enriches the span right around the SDK), goes on the step span."""
        context = span.get_span_context()
        step = self._nested_steps.pop(context.span_id, None) if context is not None else None
        if step is None or not step.is_recording():
            return
        present = span_attributes(step)
        carried = {key: attrs[key] for key in _CARRIED_TO_STEP if key in attrs and key not in present}
        if carried:
            step.set_attributes(carried)

    def _new_session(self, session_id: str, attrs: Any, context_session: Any, start_ns: int,
                     implicit: bool = False) -> _Session:
        profile = attrs.get(A.PROFILE) or (context_session.profile if context_session else None)
        task_type = attrs.get(A.TASK_TYPE) or (context_session.task_type if context_session else None)
        chosen = self.policy.resolve_profile(profile, task_type)
        with self._counters_lock:
            sequence = self._counters.pop(session_id, None) or _Sequence()
        enforcer = Enforcer(self.policy.escalation) if self.mode == "enforce" else None
        judge = SessionJudge(session_id, self.policy, chosen, start_ns=start_ns)
        return _Session(session_id, judge, sequence, enforcer, implicit)

    # --- end -------------------------------------------------------------------------------
    def _on_end(self, span: ReadableSpan) -> None:
        attrs = span_attributes(span)
        session_id = attrs.get(A.SESSION_ID)
        if session_id is None or attrs.get(A.VERDICT):
            return
        if self._tool_scopes and (context := span.get_span_context()) is not None:
            self._tool_scopes.pop(context.span_id, None)
        session = self._store.get(session_id)
        if session is None:
            return  # ended (or never judged): a late span cannot change a verdict
        if session.is_session_span(span):
            # A session span we did not end ourselves (a framework's): its verdict goes
            # on a verdict span, since an ended span takes no more attributes.
            if self._store.pop(session_id) is session:
                self._end(session, error=span.status.status_code is StatusCode.ERROR)
            return
        sequence = attrs.get(A.SEQUENCE)
        if type(sequence) is not int:  # only ours count; a foreign value of another type is no number
            sequence = None
        if attrs.get(A.NESTED_STEP) and self._nested_steps:
            self._carry_to_step(span, attrs)
        kind = None if attrs.get(A.NESTED_STEP) else step_kind(attrs)
        if kind is None and sequence is None:
            return
        if sequence is not None and sequence < session.first_sequence:
            return  # a straggler of an earlier run of this session id
        if kind is None:
            assert sequence is not None  # neither a step nor numbered returned above
            with session.lock:
                released = session.buffer.skip(sequence)
        else:
            if sequence is None:  # became a step after it started: number it now
                sequence = session.sequence.next()
            try:
                step = step_from_attributes(
                    attrs,
                    kind=kind,
                    session_id=session_id,
                    sequence=sequence,
                    policy=self.policy,
                    span_name=span.name,
                    start_ns=span.start_time or 0,
                    end_ns=span.end_time or 0,
                    status_error=span.status.status_code is StatusCode.ERROR,
                )
            except Exception as exc:  # deliberate: lose this step, not the ones after it
                _internal_errors.report("processor.step", exc)
                with session.lock:
                    released = session.buffer.skip(sequence)
            else:
                with session.lock:
                    session.last_context = span.get_span_context()
                    released = self._derive(session, kind, attrs, span)
                    released.extend(session.buffer.push(step))
        self._judge(session, released)

    def _derive(self, session: _Session, kind: str, attrs: Mapping[str, Any], span: ReadableSpan) -> list[Step]:
        """Tool steps only a model span recorded, released in order (under the session lock)."""
        released: list[Step] = []
        try:
            derived, unused = session.derived.on_step(
                kind, attrs, span_name=span.name, start_ns=span.start_time or 0, end_ns=span.end_time or 0,
                next_sequence=session.sequence.next,
            )
        except Exception as exc:  # deliberate: lose the derived steps, not the span's own step
            _internal_errors.report("processor.derived", exc)
            return released
        for sequence in unused:
            released.extend(session.buffer.skip(sequence))
        for step in derived:
            released.extend(session.buffer.push(step))
        return released

    def _judge(self, session: _Session, steps: list[Step]) -> None:
        if not steps:
            return
        final = False
        with session.lock:
            if session.ended:
                return
            raised = []
            for step in steps:
                found = session.judge.observe(step)
                if session.enforcer is not None:
                    session.enforcer.on_step(step)
                    for alert in found:
                        session.enforcer.on_alert(alert)
                raised.extend(found)
                final = final or step.final
            self._record_alerts(session, raised)
        for alert in raised:
            self._metrics.stall(alert, session.judge.profile.name)
        if final and session.session_span is None and not self._stop_pending(session):
            # Without a session span, the final answer is where the session ends (unless
            # the guard is about to refuse that answer: the stop ends it then).
            if self._store.pop(session.session_id) is session:
                self._end(session)

    @staticmethod
    def _record_alerts(session: _Session, raised: list[Alert]) -> None:
        """Alerts as events on the open session span, else kept for the verdict span.
        Called under the session's lock: _end cannot end the span between check and write."""
        if session.span_open():
            for alert in raised:
                # span_open() said the span is set; mypy cannot see through the call.
                session.session_span.add_event(A.STALL_EVENT, alert_attributes(alert))  # type: ignore[union-attr]
        else:
            session.pending_alerts.extend(raised)

    # --- enforcement: asked by the wrappers right before (and after) a call ---------------------
    def before_tool_call(self, args_fingerprint: str | None, session_id: str | None = None) -> Intervention | None:
        """In enforce mode, the result to give instead of running a call that repeats a stall."""
        session = self._session_in_context(session_id)
        if session is None or session.enforcer is None:
            return None
        with session.lock:
            return session.enforcer.before_tool(args_fingerprint)

    def before_model_call(self, session_id: str | None = None,
                          answered_ids: frozenset[str] | None = None) -> str | None:
        """Raise :class:`AgentStopped` if a stop is due and this call is a cut point;
        else the remaining-budget note for the model when the policy asks for one.

        ``answered_ids``: the tool call ids whose results the request carries (None
        when the caller cannot tell); they tell a sub-agent's call inside a tool the
        guard cannot see from the agent's own next turn.
        """
        session = self._session_in_context(session_id)
        if session is None or session.enforcer is None:
            return None
        in_tool = self._in_tool_scope()
        with session.lock:
            totals = session.judge.totals
            enforcer = session.enforcer
            if interrupts.sigterm_received():
                enforcer.interrupts.add(A.DRAINED)
            cut_point = enforcer.begin_model_call(in_tool, answered_ids)
            due = enforcer.stop_due(totals, session.judge.profile) if cut_point else None
        if due is not None:
            self._stop(session, *due)
        if not self.policy.budget_note:
            return None
        left = session.judge.profile.max_steps - totals.steps
        return (f"[otel_agentguard] Step {totals.steps + 1} of {session.judge.profile.max_steps}: {left} left. "
                f"If you cannot make progress, call {self.policy.finish_tool} with what you have.")

    def after_model_call(self, session_id: str | None = None, tool_calls: int | None = None,
                         call_ids: tuple[str, ...] = ()) -> None:
        """Raise :class:`AgentStopped` when the answer just judged must not be delivered
        (a fake completion). Only the agent's own answer that asks for no tool is a cut
        point here; a sub-agent's answer inside a tool is not.

        ``tool_calls``: how many tool calls the response asked for (None: as judged);
        ``call_ids``: their ids, as far as known.
        """
        session = self._session_in_context(session_id)
        if session is None or session.enforcer is None:
            return
        in_tool = self._in_tool_scope()
        with session.lock:
            if tool_calls is None:
                tool_calls = session.judge.totals.open_tool_calls
            own_turn = session.enforcer.end_model_call(in_tool, tool_calls, call_ids)
            due = session.enforcer.pending_stop if own_turn and tool_calls == 0 else None
        if due is not None:
            self._stop(session, *due)

    def stop_repeating_output(self, session_id: str | None, step: Step) -> None:
        """Enforce mode, a streamed answer that repeats itself inside a model span another
        instrumentation owns (the Agents SDK's): judge the repetition now, before that span
        ends, and raise :class:`AgentStopped` when the ladder says stop."""
        session = self._session_in_context(session_id)
        if session is None or session.enforcer is None:
            return
        with session.lock:
            if session.ended:
                return
            raised = session.judge.observe_early(A.OUTPUT_REPETITION_PROBE, step)
            for alert in raised:
                session.enforcer.on_alert(alert)
            self._record_alerts(session, raised)
        for alert in raised:
            self._metrics.stall(alert, session.judge.profile.name)
        self.after_model_call(session.session_id)

    def request_interrupt(self, session_id: str, reason: str) -> bool:
        session = self._store.get(session_id)
        if session is None or session.enforcer is None:
            return False
        with session.lock:
            session.enforcer.interrupts.add(reason)
        return True

    def live_session_ids(self) -> list[str]:
        return self._store.keys()

    def live_session_count(self) -> int:
        """Lock-free (a signal handler may ask)."""
        return len(self._store)

    def _stop_pending(self, session: _Session) -> bool:
        return session.enforcer is not None and session.enforcer.pending_stop is not None

    def _session_in_context(self, session_id: str | None = None) -> _Session | None:
        """The named session, else the current context's, resolved as ``on_start`` resolves a span's."""
        if session_id is not None:
            return self._store.get(session_id)
        ctx = context_api.get_current()
        in_context = current_session(ctx)
        session_id = (
            (in_context.session_id if in_context else None) or _baggage_session(ctx) or _parent_session(ctx)
        )
        if session_id is None:
            span_context = trace.get_current_span(ctx).get_span_context()
            if not span_context.is_valid:
                return None
            session_id = trace.format_trace_id(span_context.trace_id)
        return self._store.get(session_id)

    def _stop(self, session: _Session, reason: str, detail: str) -> None:
        """Stamp the session and raise :class:`AgentStopped` into the agent."""
        with session.lock:
            judge = session.judge
            session.enforcer.stopped = reason  # type: ignore[union-attr]  # only enforce mode stops: it has one
            injected = None
            if reason in A.INTERRUPTS:
                session.interrupt = reason
            elif not any(alert.probe == reason for alert in judge.alerts):
                # A budget stopped before the call that would cross it: no step raised it.
                last = judge.last_sequence
                injected = Alert(reason, last, (last,) if last else (), detail, BUDGET_DISPOSAL, _budget_kind(detail))
                judge.alerts.append(injected)
            if session.span_open():  # so the span is set (union-attr below)
                span = session.session_span
                if injected is not None:
                    span.add_event(A.STALL_EVENT, alert_attributes(injected))  # type: ignore[union-attr]
                span.set_attributes({A.ENFORCED: True, A.STOP_REASON: choose_stop_reason(  # type: ignore[union-attr]
                    judge.alerts, interrupt=session.interrupt)})
            else:
                session.pending_alerts.extend([injected] if injected else [])
            totals = judge.totals
            breakpoint = breakpoint_of(
                session.session_id, reason, detail, totals,
                elapsed_s=max(time.time_ns() - totals.start_ns, 0) / 1e9 if totals.start_ns else 0.0,
                last_actions=[{"sequence": step.sequence, "kind": step.kind, "name": step.name, "failed": step.failed}
                              for step in judge.last_steps],
                has_partial_result=totals.partial_result,
            )
        if injected is not None:
            self._metrics.stall(injected, judge.profile.name)
        raise AgentStopped(reason, breakpoint)

    # --- ending a session -------------------------------------------------------------------
    def end_session(self, span: Span, *, error: bool = False) -> Verdict | None:
        """Called by :func:`otel_agentguard.session` just before it ends its span:
        stamps the verdict on the span while it can still take attributes."""
        try:
            session_id = span_attributes(span).get(A.SESSION_ID)
            session = self._store.get(session_id) if session_id else None
            if session is None or session.session_span is not span:
                return None
            self._store.pop(session.session_id)
            return self._end(session, error=error)
        except Exception as exc:  # deliberate: the user's session must still end cleanly
            _internal_errors.report("processor.end_session", exc)
            return None

    def _evicted(self, session: _Session) -> None:
        try:
            self._end(session, unfinished=True)
        except Exception as exc:  # deliberate
            _internal_errors.report("processor.evict", exc)

    def _end(self, session: _Session, *, error: bool = False, unfinished: bool = False) -> Verdict | None:
        """End a session (already out of the store): judge what is buffered, write the verdict.

        ``unfinished`` (evicted or shut down): a probe's finding or the finish tool
        still names the stop reason; otherwise the session is ``abandoned``.
        """
        with session.lock:
            if session.ended:
                return None
            session.ended = True
            raised = []
            waiting = [s for step in session.derived.flush() for s in session.buffer.push(step)]
            for step in waiting + session.buffer.drain():
                raised.extend(session.judge.observe(step))
            verdict = session.judge.finish(error=error, interrupt=session.interrupt, end_ns=time.time_ns(),
                                           unfinished=unfinished)
            span = session.session_span
            on_span = span is not None and span.is_recording()
            if on_span:  # so the span is set (union-attr below)
                for alert in raised:
                    span.add_event(A.STALL_EVENT, alert_attributes(alert))  # type: ignore[union-attr]
                span.set_attributes(self.verdict_attributes(verdict))  # type: ignore[union-attr]
        for alert in raised:
            self._metrics.stall(alert, verdict.profile)
        if not on_span and _wants_verdict_span(session, verdict):
            self._write_verdict_span(session, verdict, session.pending_alerts + raised)
        self._metrics.session_ended(verdict)
        with self._counters_lock:
            self._counters[session.session_id] = session.sequence
            if len(self._counters) > _MAX_REMEMBERED_COUNTERS:
                self._counters.popitem(last=False)
        return verdict

    def verdict_attributes(self, verdict: Verdict) -> dict[str, Any]:
        return {
            A.STOP_REASON: verdict.stop_reason,
            A.PROFILE: verdict.profile,
            A.POLICY_VERSION: verdict.policy_version,
            A.MODE: self.mode,
            A.STEPS: verdict.steps,
            A.TOKENS: verdict.tokens,
            A.COST_USD: round(verdict.cost_usd, 6),
        }

    def _write_verdict_span(self, session: _Session, verdict: Verdict, alerts: list[Alert]) -> None:
        if self._tracer is None:
            provider = self._tracer_provider or trace.get_tracer_provider()
            if not callable(getattr(provider, "add_span_processor", None)):
                logger.warning(
                    "agentguard verdict spans go to a %s and are dropped: pass tracer_provider= to "
                    "AgentGuardSpanProcessor (install() does)", type(provider).__name__,
                )
            self._tracer = trace.get_tracer("otel_agentguard", __version__, provider)
        parent = None
        if session.last_context is not None:
            parent = trace.set_span_in_context(NonRecordingSpan(session.last_context))
        attributes = {A.VERDICT: True, A.SESSION_ID: session.session_id, **self.verdict_attributes(verdict)}
        span = self._tracer.start_span(VERDICT_SPAN_NAME, context=parent, attributes=attributes)
        for alert in alerts:
            span.add_event(A.STALL_EVENT, alert_attributes(alert))
        span.end()


def _wants_verdict_span(session: _Session, verdict: Verdict) -> bool:
    """Model calls alone, outside any session (no session id anywhere, no tool step, no
    alert), are no agent run worth a span of its own: their verdict goes to the metrics only."""
    totals = session.judge.totals
    tool_steps = totals.steps - (1 if totals.final else 0)  # steps count tool calls and the final answer
    return not session.implicit or bool(verdict.alerts) or session.interrupt is not None or tool_steps > 0


def alert_attributes(alert: Alert) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        A.PROBE: alert.probe,
        A.EVIDENCE: list(alert.evidence),
        A.DETAIL: alert.detail,
        A.DISPOSAL: alert.disposal,
        A.SEQUENCE: alert.sequence,
    }
    if alert.budget_kind:
        attributes[A.BUDGET_KIND] = alert.budget_kind
    if alert.offsets is not None:
        attributes[A.REPETITION_OFFSETS] = list(alert.offsets)
    return attributes


def _budget_kind(detail: str) -> str | None:
    kind = detail.split(" ", 1)[0]
    return kind if kind in A.BUDGET_KINDS else None


def _baggage_session(parent_context: Context | None) -> str | None:
    """A session id the caller put in OpenTelemetry baggage (it crosses process boundaries)."""
    for key in (A.SESSION_ID_SEMCONV, A.GEN_AI_CONVERSATION_ID):
        value = baggage.get_baggage(key, parent_context)
        if value:
            return str(value)
    return None


def span_attributes(span: Any) -> Mapping[str, Any]:
    """A span's attributes, read cheaply.

    ``span.attributes`` of an SDK span is a ``MappingProxyType`` over a
    ``BoundedAttributes``, whose every ``get`` runs three Python frames; the
    processor reads a dozen attributes per span. The SDK keeps them in a plain
    dict (``_attributes._dict``) that is read here directly when present (reading
    a dict is atomic under the GIL); any other span falls back to the public API.
    """
    inner = getattr(getattr(span, "_attributes", None), "_dict", None)
    if type(inner) is dict:
        return inner
    return getattr(span, "attributes", None) or {}


def _same_step_as_parent(kind: str, attrs: Any, parent_context: Context | None) -> bool:
    """A model span right inside a model span is one call; a tool span right inside a tool
    span of the same tool is one call too (a tool that calls other tools has other names)."""
    parent = trace.get_current_span(parent_context)
    parent_attrs = span_attributes(parent)
    if not parent_attrs or not parent.is_recording():
        return False
    return nested_step(kind, attrs, step_kind(parent_attrs), parent_attrs)


def _parent_span_id(parent_context: Context | None) -> int:
    return trace.get_current_span(parent_context).get_span_context().span_id


def _parent_session(parent_context: Context | None) -> str | None:
    """The session of the parent span, when it is one of ours (stamped at its start)."""
    parent = trace.get_current_span(parent_context)
    attrs = span_attributes(parent)
    if attrs:
        value = attrs.get(A.SESSION_ID)
        return str(value) if value else None
    return None


def _resolve_mode(mode: str | None) -> str:
    chosen = (mode or os.environ.get(OTEL_AGENTGUARD_MODE) or "observe").strip().lower()
    if chosen not in MODES:
        source = "mode" if mode else OTEL_AGENTGUARD_MODE
        raise ValueError(f"{source}: expected 'observe' or 'enforce', got {chosen!r}")
    return chosen


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
