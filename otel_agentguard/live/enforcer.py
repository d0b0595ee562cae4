"""Enforcement: what the guard does about alerts and interrupts in ``enforce`` mode.

The guard acts only at **safe cut points**, where every tool call the model
asked for has its result: the start of the agent's next model call (the
request carries the results of every earlier call; providers reject it
otherwise), and the end of a model call that asked for no tool at all. It never
stops an agent between the third and the seventh result of a batch of ten.

Agents nest: a tool may run a sub-agent or a summariser that calls the model
itself. Such a model call is *inside* the outer batch, so it is no cut point for
the session: a stop that becomes due there waits for the outer agent's next
model call. A call is known to be nested when it runs under an open tool span
of the session, or, for a tool the guard cannot see, when its request answers
none of the tool calls the outer agent has open (a sub-agent's conversation is
its own). So a stop never waits on a tool the guard cannot see, and never cuts
a batch a level further out.

Each probe has an escalation ladder (policy ``[escalation]``):

* ``intervene``: the next call that would repeat the stall is not run; its
  result is a message that tells the model why and what to do instead, so
  every tool call still has its result and the model can recover;
* ``stop``: :class:`~otel_agentguard.AgentStopped` is raised before the next
  model call (or, for a fake completion, instead of returning the answer);
* ``observe``: nothing.

A probe whose ladder starts with ``intervene`` moves to its next rung when the
model repeats the offending call after the intervention. Interrupts asked for
from outside (:func:`otel_agentguard.request_stop`) are honoured at the same
cut points, in the order steer, drain, dispatch, await.

The decisions here are cheap and lock-light: the processor updates them as
steps are judged, the wrappers read them right before a call.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import Profile
from otel_agentguard.judge.probes import Alert, SessionTotals
from otel_agentguard.judge.steps import TOOL, Step

INTERVENE = "intervene"
STOP = "stop"
OBSERVE = "observe"
INTERRUPT_PRIORITY = (A.STEERED, A.DRAINED, A.DISPATCHED, A.AWAITING)
_RECENT_STEPS = 32


_NO_CALLS: list[str | None] = []  # never written: stands in until the first tool step


@dataclass(frozen=True)
class Intervention:
    """A tool call the guard did not run, and the result the model gets instead."""

    probe: str
    message: str


@dataclass
class _Armed:
    """An intervention waiting for the call that would repeat a stall."""

    probe: str
    message: str
    args: frozenset[str]  # argument fingerprints that repeat the stall; empty: any tool call
    rung: int = 0  # how far up the ladder the next offence goes


class Enforcer:
    """One session's enforcement state. The processor calls it under the session's lock."""

    __slots__ = (
        "_ladder", "_armed", "_recent_sequences", "_recent_calls", "_outer_open", "_outer_ran", "pending_stop",
        "_interrupts", "stopped",
    )

    def __init__(self, ladder: Mapping[str, tuple[str, ...]]):
        self._ladder = ladder
        self._armed: dict[str, _Armed] | None = None  # made at the first intervention
        # The last _RECENT_STEPS tool steps, made at the first: their sequence numbers, and
        # side by side (flat) the tool name and argument fingerprint of each.
        self._recent_sequences: array[int] | None = None
        self._recent_calls: list[str | None] = _NO_CALLS
        self.pending_stop: tuple[str, str] | None = None  # (stop_reason, detail), honoured at the next cut point
        self._interrupts: set[str] | None = None
        self.stopped: str | None = None  # the reason the guard ended the turn, once it did
        # Call ids the agent's last own model call asked for, while their results are
        # outstanding; None when there are none or their ids are unknown.
        self._outer_open: frozenset[str] | None = None
        self._outer_ran = 0  # tool steps that ended since the agent's last own model call

    @property
    def interrupts(self) -> set[str]:
        """Interrupts asked for from outside, honoured at the next cut point (made at the first)."""
        if self._interrupts is None:
            self._interrupts = set()
        return self._interrupts

    # --- model calls: which ones are the agent's own turns (cut points) ------------------------
    def begin_model_call(self, in_tool: bool, answered_ids: frozenset[str] | None, draining: bool = False) -> bool:
        """True when a model call about to start is the agent's own next turn (a cut
        point); False for one made inside a tool (a sub-agent).

        ``draining``: a request that carries no tool result at all, made outside every tool
        once each call the last turn asked for has run, is the agent re-prompting itself
        without the history (a stateless agent), not a sub-agent: a drain may cut there."""
        if in_tool:
            return False
        open_calls = self._outer_open
        if open_calls and answered_ids is not None and open_calls.isdisjoint(answered_ids):
            if not (draining and not answered_ids and self._outer_ran >= len(open_calls)):
                return False  # answers none of the open calls: an agent inside a tool we cannot see
        self._outer_open = None  # the request carries every result
        return True

    def end_model_call(self, in_tool: bool, tool_calls: int, call_ids: tuple[str, ...]) -> bool:
        """Record what an ended model call asked for; True when it was the agent's own turn."""
        if in_tool or self._outer_open:
            return False
        self._outer_open = frozenset(call_ids) if tool_calls and len(call_ids) >= tool_calls else None
        self._outer_ran = 0
        return True

    # --- fed by the processor, as steps are judged -----------------------------------------
    def on_step(self, step: Step) -> None:
        if step.kind != TOOL:
            return
        self._outer_ran += 1
        sequences, calls = self._recent_sequences, self._recent_calls
        if sequences is None:
            sequences = self._recent_sequences = array("q")
            calls = self._recent_calls = []
        at = self._recent_index(step.sequence)
        if at is not None:  # the same step again: it keeps its place
            calls[2 * at:2 * at + 2] = (step.name, step.args_fingerprint)
            return
        sequences.append(step.sequence)
        calls += (step.name, step.args_fingerprint)
        if len(sequences) > _RECENT_STEPS:
            del sequences[0]
            del calls[:2]

    def _recent_index(self, sequence: int) -> int | None:
        sequences = self._recent_sequences
        if not sequences or sequence > sequences[-1]:
            return None  # the usual case: a step after every one kept
        try:
            return sequences.index(sequence)
        except ValueError:
            return None

    def _recent(self, sequence: int) -> tuple[str, str | None] | None:
        """The tool name and argument fingerprint of a recent tool step."""
        at = self._recent_index(sequence)
        if at is None:
            return None
        return self._recent_calls[2 * at] or "", self._recent_calls[2 * at + 1]

    def on_alert(self, alert: Alert) -> None:
        ladder = self._ladder.get(alert.probe, (STOP,))
        if not ladder or ladder[0] == OBSERVE:
            return
        if ladder[0] == INTERVENE:
            if self._armed is None:
                self._armed = {}
            self._armed[alert.probe] = _Armed(alert.probe, _message(alert, self._recent), self._repeating(alert))
        elif self.pending_stop is None:
            self.pending_stop = (alert.probe, alert.detail)

    def _repeating(self, alert: Alert) -> frozenset[str]:
        if alert.probe == A.ERROR_STREAK:
            return frozenset()  # a streak across varied arguments: any next call repeats it
        return frozenset(
            args for sequence in alert.evidence
            if (recent := self._recent(sequence)) is not None and (args := recent[1]) is not None
        )

    # --- asked by the wrappers, right before a call ---------------------------------------------
    def before_tool(self, args_fingerprint: str | None) -> Intervention | None:
        if self._armed is None:
            return None
        for armed in self._armed.values():
            if armed.args and args_fingerprint not in armed.args:
                continue
            ladder = self._ladder.get(armed.probe, (STOP,))
            action = ladder[min(armed.rung, len(ladder) - 1)]
            armed.rung += 1
            if action == OBSERVE:
                return None
            if action == STOP and self.pending_stop is None:
                self.pending_stop = (armed.probe, f"repeated after an intervention: {armed.message}")
            # Intervene or stop: the repeating call does not run either way; a stop waits for the cut point.
            return Intervention(armed.probe, armed.message)
        return None

    def stop_due(self, totals: SessionTotals, profile: Profile) -> tuple[str, str] | None:
        """The stop to raise at a cut point, if one is due."""
        if self._interrupts:
            for reason in INTERRUPT_PRIORITY:
                if reason in self._interrupts:
                    return reason, f"{reason} on request"
        if self.pending_stop is not None:
            return self.pending_stop
        return _budget_before_model_call(totals, profile)


def _budget_before_model_call(totals: SessionTotals, profile: Profile) -> tuple[str, str] | None:
    """Budgets are checked before the call that would cross them, not after."""
    checks = (
        ("steps", totals.steps, profile.max_steps),
        ("model_calls", totals.model_calls, profile.max_model_calls),
        ("tokens", totals.tokens, profile.max_tokens),
        ("cost", totals.cost_usd, profile.max_cost_usd),
    )
    for kind, used, limit in checks:
        if limit is not None and used >= limit:
            return A.BUDGET_EXCEEDED, f"{kind} budget spent ({used:g} of {limit:g}): stopped before the next model call"
    return None


def _message(alert: Alert, recent: Callable[[int], tuple[str, str | None] | None]) -> str:
    names = [found[0] for sequence in alert.evidence if (found := recent(sequence)) is not None]
    if alert.probe == A.TOOL_LOOP:
        tool = names[-1] if names else "this tool"
        return (
            f"[otel_agentguard] You called {tool} with the same arguments {len(alert.evidence)} times and got "
            f"the same result. Do not call it again with these arguments. Answer with what you have, "
            f"or say what is missing."
        )
    if alert.probe == A.CYCLE:
        unique = list(dict.fromkeys(names))
        return (
            f"[otel_agentguard] The calls {', '.join(unique) or 'you made'} keep repeating in the same order with "
            f"the same results. Stop repeating them: answer with what you have, or change your plan."
        )
    return (
        f"[otel_agentguard] The last {len(alert.evidence)} tool results failed or came back empty. Stop retrying: "
        f"answer with what you have, or tell the user what failed."
    )


def breakpoint_of(session_id: str, reason: str, detail: str, totals: SessionTotals, elapsed_s: float,
                  last_actions: list[dict[str, Any]], has_partial_result: bool) -> dict[str, Any]:
    """The evidence carried by :class:`~otel_agentguard.AgentStopped` (a stop comes with its proof)."""
    return {
        "session_id": session_id,
        "stop_reason": reason,
        "detail": detail,
        "steps": totals.steps,
        "tokens": totals.tokens,
        "elapsed_s": round(elapsed_s, 3),
        "last_actions": last_actions,
        "has_partial_result": has_partial_result,
    }
