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
report to the process's guard (:class:`~otel_agentguard.guard_ref.GuardRef`
says which); the agentguard instrumentations report to the guard they were given.
"""

from __future__ import annotations

from typing import Any

from otel_agentguard import _readable
from otel_agentguard._enforce import Intervention
from otel_agentguard.errors import AgentStopped
from otel_agentguard.guard_ref import PROCESS_GUARD
from otel_agentguard.steps import Step

__all__ = [
    "AgentStopped", "Intervention", "after_model_call", "before_model_call", "before_tool_call",
    "cuts_repeating_output", "stop_repeating_output",
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


_MAX_MESSAGES = 10_000


def answered_tool_call_ids(messages: Any) -> frozenset[str] | None:
    """The tool call ids a request's history answers, in the OpenAI (chat and responses)
    and Anthropic formats or as LangChain ``ToolMessage`` objects; None when it cannot tell.

    Reads plain dicts and pydantic models (the SDKs' and LangChain's message types) through
    their stored fields only: the history is the application's, and the guard runs none of
    its code. A message of any other type makes the answer unknown (None), never a guess.
    """
    if type(messages) is not list:
        return None
    answered: set[str] = set()
    for message in messages[:_MAX_MESSAGES]:
        fields = _fields(message)
        if fields is None:
            return None
        kind = fields.get("type")
        if fields.get("role") == "tool" or kind == "tool":  # OpenAI chat, LangChain
            _add_id(answered, fields.get("tool_call_id"))
        elif kind == "function_call_output":  # OpenAI responses
            _add_id(answered, fields.get("call_id"))
        content = fields.get("content")
        if fields.get("role") == "user" and type(content) is list:  # Anthropic tool_result blocks
            for block in content[:_MAX_MESSAGES]:
                block_fields = _fields(block)
                if block_fields is not None and block_fields.get("type") == "tool_result":
                    _add_id(answered, block_fields.get("tool_use_id"))
    return frozenset(answered)


def _fields(value: Any) -> dict[str, Any] | None:
    if type(value) is dict:
        return value
    fields = _readable.pydantic_fields(value)
    return dict(fields) if fields is not None else None


def _add_id(answered: set[str], call_id: Any) -> None:
    if type(call_id) is str and call_id:
        answered.add(call_id)
