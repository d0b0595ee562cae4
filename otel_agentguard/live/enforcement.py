"""Enforce mode, live: the hooks the wrappers call right before and after each call.

Each session's :class:`~otel_agentguard.live.enforcer.Enforcer` decides what is due;
this module finds the session of a call, asks whether the call is a safe cut
point, and acts: a tool result instead of a repeated call, or
:class:`~otel_agentguard.AgentStopped` raised into the agent, with the stop
stamped on the session span (or kept for its verdict span).

It also keeps the span ids of open tool steps and of every span under one: a
model call made there is a sub-agent's, inside the outer batch, so it is no cut
point for the session.
"""

from __future__ import annotations

import time

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Span

from otel_agentguard import attributes as A
from otel_agentguard import interrupts
from otel_agentguard.errors import AgentStopped
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.probes import Alert
from otel_agentguard.judge.probes.budget import DISPOSAL as BUDGET_DISPOSAL
from otel_agentguard.judge.session_judge import choose_stop_reason
from otel_agentguard.judge.steps import Step
from otel_agentguard.live.enforcer import Intervention, breakpoint_of
from otel_agentguard.live.resolution import session_of_current_call
from otel_agentguard.live.session import LiveSession
from otel_agentguard.live.sessions import LiveSessions
from otel_agentguard.live.verdicts import alert_attributes, write_alerts

_MAX_TOOL_SCOPES = 100_000
_PAST_DEADLINE = ("drain deadline passed before a safe cut point: tool calls the last turn asked for may "
                  "have no result in the history (otel_agentguard.repair_history answers them)")


class LiveEnforcement:
    """The enforce-mode side of one guard processor."""

    def __init__(self, sessions: LiveSessions, policy: Policy):
        self._sessions = sessions
        self._policy = policy
        # Open tool spans and the spans under them, by span id (bounded: spans that never end).
        self._tool_scopes: dict[int, None] = {}

    def after_fork(self) -> None:
        self._tool_scopes = {}

    # --- tool scopes, kept by the processor as spans start and end -----------------------------
    def span_started(self, span: Span, is_tool: bool, parent_context: Context | None) -> None:
        scopes = self._tool_scopes
        if is_tool or (scopes and trace.get_current_span(parent_context).get_span_context().span_id in scopes):
            scopes[span.get_span_context().span_id] = None
            if len(scopes) > _MAX_TOOL_SCOPES:
                scopes.pop(next(iter(scopes)), None)  # the oldest: a span that never ended

    def span_ended(self, span_id: int) -> None:
        if self._tool_scopes:
            self._tool_scopes.pop(span_id, None)

    def _in_tool_scope(self) -> bool:
        return bool(self._tool_scopes) and trace.get_current_span().get_span_context().span_id in self._tool_scopes

    # --- hooks ---------------------------------------------------------------------------------
    def _session(self, session_id: str | None) -> LiveSession | None:
        """The named session, else the current context's, resolved as a span's would be."""
        if session_id is None:
            session_id = session_of_current_call()
        return self._sessions.get(session_id) if session_id is not None else None

    def before_tool_call(self, args_fingerprint: str | None, session_id: str | None = None) -> Intervention | None:
        """The result to give instead of running a call that repeats a stall, or None."""
        session = self._session(session_id)
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
        session = self._session(session_id)
        if session is None or session.enforcer is None:
            return None
        in_tool = self._in_tool_scope()
        with session.lock:
            totals = session.judge.totals
            enforcer = session.enforcer
            draining = interrupts.sigterm_received()
            if draining:
                enforcer.interrupts.add(A.DRAINED)
            cut_point = enforcer.begin_model_call(in_tool, answered_ids, draining)
            due = enforcer.stop_due(totals, session.judge.profile) if cut_point else None
            if due is None and draining and interrupts.drain_deadline_passed():
                due = A.DRAINED, _PAST_DEADLINE
        if due is not None:
            self._stop(session, *due)
        if not self._policy.budget_note:
            return None
        left = session.judge.profile.max_steps - totals.steps
        return (f"[otel_agentguard] Step {totals.steps + 1} of {session.judge.profile.max_steps}: {left} left. "
                f"If you cannot make progress, call {self._policy.finish_tool} with what you have.")

    def after_model_call(self, session_id: str | None = None, tool_calls: int | None = None,
                         call_ids: tuple[str, ...] = ()) -> None:
        """Raise :class:`AgentStopped` when the answer just judged must not be delivered
        (a fake completion). Only the agent's own answer that asks for no tool is a cut
        point here; a sub-agent's answer inside a tool is not.

        ``tool_calls``: how many tool calls the response asked for (None: as judged);
        ``call_ids``: their ids, as far as known.
        """
        session = self._session(session_id)
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
        """A streamed answer that repeats itself inside a model span another instrumentation
        owns (the Agents SDK's): judge the repetition now, before that span ends, and raise
        :class:`AgentStopped` when the ladder says stop."""
        session = self._session(session_id)
        if session is None or session.enforcer is None:
            return
        with session.lock:
            if session.ended:
                return
            raised = session.judge.observe_early(A.OUTPUT_REPETITION_PROBE, step)
            for alert in raised:
                session.enforcer.on_alert(alert)
            write_alerts(session, raised)
        self._sessions.count(raised, session.judge.profile.name)
        self.after_model_call(session.session_id)

    def request_interrupt(self, session_id: str, reason: str) -> bool:
        session = self._sessions.get(session_id)
        if session is None or session.enforcer is None:
            return False
        with session.lock:
            session.enforcer.interrupts.add(reason)
        return True

    def _stop(self, session: LiveSession, reason: str, detail: str) -> None:
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
            span = session.session_span
            if span is not None and span.is_recording():
                if injected is not None:
                    span.add_event(A.STALL_EVENT, alert_attributes(injected))
                span.set_attributes({A.ENFORCED: True,
                                     A.STOP_REASON: choose_stop_reason(judge.alerts, interrupt=session.interrupt)})
            elif injected is not None:
                session.pending_alerts += (injected,)
            totals = judge.totals
            breakpoint = breakpoint_of(
                session.session_id, reason, detail, totals,
                elapsed_s=max(time.time_ns() - totals.start_ns, 0) / 1e9 if totals.start_ns else 0.0,
                last_actions=[{"sequence": step.sequence, "kind": step.kind, "name": step.name, "failed": step.failed}
                              for step in judge.last_steps],
                has_partial_result=totals.partial_result,
            )
        if injected is not None:
            self._sessions.count([injected], judge.profile.name)
        raise AgentStopped(reason, breakpoint)


def _budget_kind(detail: str) -> str | None:
    kind = detail.split(" ", 1)[0]
    return kind if kind in A.BUDGET_KINDS else None
