"""The enforcement hooks instrumentations call around each tool and model call.

In observe mode (the default) every hook returns at once and changes nothing.
In enforce mode:

* :func:`before_tool_call` returns an :class:`Intervention` instead of letting a
  call that repeats a stall run: give the model ``intervention.message`` as that
  call's result (so every tool call keeps its result);
* :func:`before_model_call` raises :class:`~otel_agentguard.AgentStopped` when a
  stop is due and this is a safe cut point, and may return a remaining-budget
  note to add to the model's context (policy ``budget_note = true``);
* :func:`after_model_call` raises :class:`~otel_agentguard.AgentStopped` instead
  of delivering an answer the guard refuses (a fake completion).

Each hook finds the session from the current context, or from ``session_id`` when
the instrumentation knows it better (a framework's own thread id). A failure inside
a hook is contained like any other: only ``AgentStopped`` leaves. The hooks here
report to the process's guard (:class:`~otel_agentguard.live.guard_ref.GuardRef`
says which); the agentguard instrumentations report to the guard they were given.
"""

from __future__ import annotations

from otel_agentguard.errors import AgentStopped
from otel_agentguard.history import answered_tool_call_ids
from otel_agentguard.judge.steps import Step
from otel_agentguard.live.enforcer import Intervention
from otel_agentguard.live.guard_ref import PROCESS_GUARD

__all__ = [
    "AgentStopped", "Intervention", "after_model_call", "answered_tool_call_ids", "before_model_call",
    "before_tool_call", "cuts_repeating_output", "stop_repeating_output",
]


# These report to the process's guard (see GuardRef for the choice); the agentguard
# instrumentations hold their own GuardRef, bound when they are instrumented.
def before_tool_call(args_fingerprint: str | None, session_id: str | None = None) -> Intervention | None:
    return PROCESS_GUARD.before_tool_call(args_fingerprint, session_id)


def before_model_call(session_id: str | None = None, answered_ids: frozenset[str] | None = None) -> str | None:
    """``answered_ids``: ids of the tool calls whose results the request carries, when known
    (see :func:`answered_tool_call_ids`)."""
    return PROCESS_GUARD.before_model_call(session_id, answered_ids)


def after_model_call(session_id: str | None = None, tool_calls: int | None = None,
                     call_ids: tuple[str, ...] = ()) -> None:
    """``tool_calls`` and ``call_ids``: what the response asked for, when known."""
    PROCESS_GUARD.after_model_call(session_id, tool_calls, call_ids)


def cuts_repeating_output() -> bool:
    """Whether a stream that repeats itself is closed at the alert: an enforce-mode guard
    whose ``output_repetition`` ladder starts with ``stop``."""
    return PROCESS_GUARD.cuts_repeating_output()


def stop_repeating_output(session_id: str | None, step: Step) -> None:
    """For a stream inside a model span we do not own: judge its repetition now and raise
    :class:`AgentStopped` when an enforce-mode guard's ladder says stop."""
    PROCESS_GUARD.stop_repeating_output(session_id, step)
