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

import itertools
import logging
import os
import threading
import time
from dataclasses import replace
from typing import Any

from opentelemetry import baggage, trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, StatusCode

from otel_agentguard import _internal_errors, _registry
from otel_agentguard import attributes as A
from otel_agentguard._context import current_session
from otel_agentguard._store import DEFAULT_IDLE_TIMEOUT_S, DEFAULT_MAX_SESSIONS, SessionStore
from otel_agentguard.environment_variables import (
    OTEL_AGENTGUARD_MAX_SESSIONS,
    OTEL_AGENTGUARD_MODE,
    OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S,
)
from otel_agentguard.judge import SequenceBuffer, SessionJudge, Verdict
from otel_agentguard.metrics import GuardMetrics
from otel_agentguard.policy import Policy, coerce_policy
from otel_agentguard.probes import Alert
from otel_agentguard.steps import MODEL, Step, explicit_session, step_from_attributes, step_kind
from otel_agentguard.version import __version__

logger = logging.getLogger(__name__)

MODES = ("observe", "enforce")
VERDICT_SPAN_NAME = "agentguard.verdict"


class _Session:
    """A live session: its judge, its sequence counter and its open session span."""

    __slots__ = (
        "session_id", "lock", "judge", "buffer", "sequence", "session_span", "last_context", "pending_alerts",
        "ended",
    )

    def __init__(self, session_id: str, judge: SessionJudge):
        self.session_id = session_id
        self.lock = threading.Lock()
        self.judge = judge
        self.buffer = SequenceBuffer()
        # next() on itertools.count is atomic under the GIL: parallel steps never share a number.
        self.sequence = itertools.count(1)
        self.session_span: Span | None = None
        self.last_context: SpanContext | None = None
        self.pending_alerts: list[Alert] = []  # for the verdict span when no session span is open
        self.ended = False


class AgentGuardSpanProcessor(SpanProcessor):
    """Judges agent sessions as their spans start and end.

    Args:
        policy: a :class:`~otel_agentguard.policy.Policy`, a path to a TOML
            policy, or ``None`` for ``OTEL_AGENTGUARD_POLICY`` / the built-in defaults.
        mode: ``"observe"`` or ``"enforce"``; ``None`` reads ``OTEL_AGENTGUARD_MODE``.
        tracer_provider: where verdict spans are written; default the global provider.
        meter_provider: where metrics go; default the global provider.
        max_sessions: most sessions judged at once (LRU beyond it).
        idle_timeout_s: a session without a step for this long ends as ``abandoned``.
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
        self._store: SessionStore[_Session] = SessionStore(
            self._evicted,
            max_sessions=max_sessions or _env_number(OTEL_AGENTGUARD_MAX_SESSIONS, DEFAULT_MAX_SESSIONS, int),
            idle_timeout_s=idle_timeout_s or _env_number(OTEL_AGENTGUARD_SESSION_IDLE_TIMEOUT_S,
                                                         DEFAULT_IDLE_TIMEOUT_S, float),
        )
        self._shut_down = False
        _registry.register(self)

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
                self._end(session, abandoned=True)
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
        attrs = span.attributes or {}
        if attrs.get(A.VERDICT):
            return
        kind = step_kind(attrs)
        is_session_span = attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT and A.SESSION_ID in attrs
        context_session = current_session(parent_context)
        session_id = (
            explicit_session(attrs)
            or (context_session.session_id if context_session else None)
            or _baggage_session(parent_context)
            or _parent_session(parent_context)
        )
        if session_id is None:
            if kind is None:
                return
            session_id = trace.format_trace_id(span.get_span_context().trace_id)
        if A.SESSION_ID not in attrs:
            span.set_attribute(A.SESSION_ID, session_id)
        if kind is None and not is_session_span:
            return
        if kind == MODEL and _inside_model_span(parent_context):
            # The same call seen by two instrumentations: the enclosing span is the step.
            span.set_attribute(A.NESTED_MODEL_CALL, True)
            return
        start_ns = span.start_time or time.time_ns()
        session = self._store.get_or_create(
            session_id, lambda: self._new_session(session_id, attrs, context_session, start_ns)
        )
        if is_session_span:
            session.session_span = span
        if kind is not None:
            span.set_attribute(A.SEQUENCE, next(session.sequence))

    def _new_session(self, session_id: str, attrs: Any, context_session: Any, start_ns: int) -> _Session:
        profile = attrs.get(A.PROFILE) or (context_session.profile if context_session else None)
        task_type = attrs.get(A.TASK_TYPE) or (context_session.task_type if context_session else None)
        chosen = self.policy.resolve_profile(profile, task_type)
        return _Session(session_id, SessionJudge(session_id, self.policy, chosen, start_ns=start_ns))

    # --- end -------------------------------------------------------------------------------
    def _on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        session_id = attrs.get(A.SESSION_ID)
        if session_id is None or attrs.get(A.VERDICT):
            return
        sequence = attrs.get(A.SEQUENCE)
        kind = None if attrs.get(A.NESTED_MODEL_CALL) else step_kind(attrs)
        if kind is None and sequence is None:
            return
        session = self._store.get(session_id)
        if session is None:
            return  # already ended (or evicted): a late span cannot change the verdict
        if kind is None:
            with session.lock:
                released = session.buffer.skip(sequence)
        else:
            if sequence is None:  # became a step after it started: number it now
                sequence = next(session.sequence)
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
            with session.lock:
                session.last_context = span.get_span_context()
                released = session.buffer.push(step)
        self._judge(session, released)

    def _judge(self, session: _Session, steps: list[Step]) -> None:
        if not steps:
            return
        final = False
        with session.lock:
            if session.ended:
                return
            raised = []
            for step in steps:
                raised.extend(session.judge.observe(step))
                final = final or step.final
            if session.session_span is None:
                session.pending_alerts.extend(raised)
        for alert in raised:
            self._metrics.stall(alert, session.judge.profile.name)
            if session.session_span is not None:
                session.session_span.add_event(A.STALL_EVENT, alert_attributes(alert))
        if final and session.session_span is None:
            # Without a session span, the final answer is where the session ends.
            if self._store.pop(session.session_id) is session:
                self._end(session)

    # --- ending a session -------------------------------------------------------------------
    def end_session(self, span: Span, *, error: bool = False) -> Verdict | None:
        """Called by :func:`otel_agentguard.session` just before it ends its span:
        stamps the verdict on the span while it can still take attributes."""
        try:
            session_id = (span.attributes or {}).get(A.SESSION_ID)
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
            self._end(session, abandoned=True)
        except Exception as exc:  # deliberate
            _internal_errors.report("processor.evict", exc)

    def _end(self, session: _Session, *, error: bool = False, abandoned: bool = False) -> Verdict | None:
        with session.lock:
            if session.ended:
                return None
            session.ended = True
            late = session.buffer.drain()
            raised = []
            for step in late:
                raised.extend(session.judge.observe(step))
            verdict = session.judge.finish(error=error, end_ns=time.time_ns())
            if abandoned:  # evicted or shut down before it ended: counted, never dropped
                verdict = replace(verdict, stop_reason=A.ABANDONED)
        for alert in raised:
            self._metrics.stall(alert, verdict.profile)
        span = session.session_span
        if span is not None and span.is_recording():
            for alert in raised:
                span.add_event(A.STALL_EVENT, alert_attributes(alert))
            span.set_attributes(self.verdict_attributes(verdict))
        else:
            self._write_verdict_span(session, verdict, session.pending_alerts + raised)
        self._metrics.session_ended(verdict)
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
            self._tracer = trace.get_tracer("otel_agentguard", __version__, self._tracer_provider)
        parent = None
        if session.last_context is not None:
            parent = trace.set_span_in_context(NonRecordingSpan(session.last_context))
        attributes = {A.VERDICT: True, A.SESSION_ID: session.session_id, **self.verdict_attributes(verdict)}
        span = self._tracer.start_span(VERDICT_SPAN_NAME, context=parent, attributes=attributes)
        for alert in alerts:
            span.add_event(A.STALL_EVENT, alert_attributes(alert))
        span.end()


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
    return attributes


def _baggage_session(parent_context: Context | None) -> str | None:
    """A session id the caller put in OpenTelemetry baggage (it crosses process boundaries)."""
    for key in (A.SESSION_ID_SEMCONV, A.GEN_AI_CONVERSATION_ID):
        value = baggage.get_baggage(key, parent_context)
        if value:
            return str(value)
    return None


def _inside_model_span(parent_context: Context | None) -> bool:
    parent = trace.get_current_span(parent_context)
    attrs = getattr(parent, "attributes", None)
    return bool(attrs) and parent.is_recording() and attrs.get(A.GEN_AI_OPERATION_NAME) in A.INFERENCE_OPERATIONS


def _parent_session(parent_context: Context | None) -> str | None:
    """The session of the parent span, when it is one of ours (stamped at its start)."""
    parent = trace.get_current_span(parent_context)
    attrs = getattr(parent, "attributes", None)
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
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = kind(raw)
        if value <= 0:
            raise ValueError
        return value
    except ValueError:
        logger.warning("%s=%r is not a positive number: using %s", name, raw, default)
        return default
