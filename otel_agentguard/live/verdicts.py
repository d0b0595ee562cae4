"""Where a live session's alerts and verdict are written.

Alerts go as ``agentguard.stall`` events on the session span while it is open,
and the verdict (``agentguard.stop_reason`` and totals) onto it before it ends.
A session without an open session span gets a short ``agentguard.verdict``
span instead, parented on the session's last step and carrying the alerts that
had nowhere else to go; model calls alone, outside any session, get none.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext

from otel_agentguard import attributes as A
from otel_agentguard.judge.probes import Alert, SessionTotals
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.live.session import LiveSession
from otel_agentguard.version import __version__

logger = logging.getLogger(__name__)

VERDICT_SPAN_NAME = "agentguard.verdict"


def alert_attributes(alert: Alert) -> dict[str, Any]:
    """The attributes of an alert's ``agentguard.stall`` event."""
    attributes: dict[str, Any] = {
        A.PROBE: alert.probe,
        A.EVIDENCE: tuple(alert.evidence),
        A.DETAIL: alert.detail,
        A.DISPOSAL: alert.disposal,
        A.SEQUENCE: alert.sequence,
    }
    if alert.budget_kind:
        attributes[A.BUDGET_KIND] = alert.budget_kind
    if alert.offsets is not None:
        attributes[A.REPETITION_OFFSETS] = tuple(alert.offsets)
    return attributes


def write_alerts(session: LiveSession, alerts: list[Alert]) -> None:
    """Alerts as events on the open session span, else kept for the verdict span.
    Called under the session's lock, so the span cannot end between check and write."""
    span = session.session_span
    if span is not None and span.is_recording():
        for alert in alerts:
            span.add_event(A.STALL_EVENT, alert_attributes(alert))
    else:
        session.pending_alerts += tuple(alerts)


def wants_verdict_span(alerts: Sequence[Alert], totals: SessionTotals, *, implicit: bool, interrupted: bool = False,
                       unanswered: int = 0) -> bool:
    """Whether a session's verdict (its ``alerts``, its ``totals``) gets a span. Model calls
    alone, outside any session (no session id anywhere, no tool step, no alert), are no agent
    run worth a span of its own: their verdict goes to the metrics only. Tool calls a model
    asked for that no span answered (``unanswered``, judged as steps at the end) do not make
    one: nothing shows they ran."""
    # Steps count tool calls and the final answer.
    tool_steps = totals.steps - (1 if totals.final else 0) - unanswered
    return not implicit or bool(alerts) or interrupted or tool_steps > 0


class VerdictWriter:
    """Writes verdicts; verdict spans go to ``tracer_provider`` (default: the global one)."""

    def __init__(self, mode: str, tracer_provider: trace.TracerProvider | None):
        self._mode = mode
        self._tracer_provider = tracer_provider
        self._tracer: trace.Tracer | None = None

    def attributes(self, verdict: Verdict) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            A.STOP_REASON: verdict.stop_reason,
            A.PROFILE: verdict.profile,
            A.POLICY_VERSION: verdict.policy_version,
            A.MODE: self._mode,
            A.STEPS: verdict.steps,
            A.TOKENS: verdict.tokens,
            A.COST_USD: round(verdict.cost_usd, 6),
        }
        if verdict.unchecked_answers:
            attributes[A.CLAIMS_UNCHECKED] = verdict.unchecked_answers
        return attributes

    def on_session_span(self, span: Any, verdict: Verdict, alerts: list[Alert]) -> None:
        """The last alerts and the verdict on the still-open session span (under the session's lock)."""
        for alert in alerts:
            span.add_event(A.STALL_EVENT, alert_attributes(alert))
        span.set_attributes(self.attributes(verdict))

    def verdict_span(self, session_id: str, last_context: SpanContext | None, verdict: Verdict,
                     alerts: list[Alert]) -> None:
        """A short ``agentguard.verdict`` span for a session whose own span is gone or never was,
        parented on its last step (``last_context``)."""
        if self._tracer is None:
            provider = self._tracer_provider or trace.get_tracer_provider()
            if not callable(getattr(provider, "add_span_processor", None)):
                logger.warning(
                    "agentguard verdict spans go to a %s and are dropped: pass tracer_provider= to "
                    "AgentGuardSpanProcessor (install() does)", type(provider).__name__,
                )
            self._tracer = trace.get_tracer("otel_agentguard", __version__, provider)
        parent = None
        if last_context is not None:
            parent = trace.set_span_in_context(NonRecordingSpan(last_context))
        attributes = {A.VERDICT: True, A.SESSION_ID: session_id, **self.attributes(verdict)}
        span = self._tracer.start_span(VERDICT_SPAN_NAME, context=parent, attributes=attributes)
        for alert in alerts:
            span.add_event(A.STALL_EVENT, alert_attributes(alert))
        span.end()
