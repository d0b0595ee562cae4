"""Exceptions the guard raises into an agent, in enforce mode only."""

from __future__ import annotations

from typing import Any

from otel_agentguard import attributes as A

# Interrupts that suspend the turn: the history is kept and the run can resume.
RESUMABLE = frozenset({A.STEERED, A.DRAINED})


class AgentStopped(Exception):
    """The guard ended the agent's turn at a safe cut point.

    Raised only where every tool call the model asked for has its result, so
    the conversation history is valid for the provider as it stands.

    Attributes:
        stop_reason: the probe that stopped it (``tool_loop``, ``budget_exceeded``, ...)
            or the interrupt that was asked for (``steered``, ``drained``, ``dispatched``, ``awaiting``).
        breakpoint: evidence for a person or a fallback: ``stop_reason``, ``steps``,
            ``tokens``, ``elapsed_s``, ``last_actions`` (the last five steps, by name
            and sequence number, never content), ``has_partial_result``, ``detail``.
    """

    def __init__(self, stop_reason: str, breakpoint: dict[str, Any]):
        self.stop_reason = stop_reason
        self.breakpoint = breakpoint
        detail = breakpoint.get("detail") or stop_reason
        super().__init__(f"agent stopped ({stop_reason}): {detail}")

    @property
    def resumable(self) -> bool:
        """True for steer and drain: keep the history and run the turn again later."""
        return self.stop_reason in RESUMABLE

    @property
    def session_id(self) -> str | None:
        return self.breakpoint.get("session_id")
