"""``cycle``: a short sequence of calls repeated back to back (A B C A B C A B C).

What it does:
    For each period of 2, 3 and 4 tool steps, tracks how long the trajectory
    has been equal to itself shifted by that period. It fires when a period
    has repeated ``cycle_repeats`` times in a row.
Why it matters:
    A cycle of three calls repeated three times has each call only three times
    in nine steps: the window count of ``tool_loop`` misses it.
Example:
    search -> open -> summarize -> search -> open -> summarize -> ...
Options:
    ``cycle_repeats`` (default 3).
"""

from __future__ import annotations

from collections import deque

from otel_agentguard.attributes import CYCLE
from otel_agentguard.policy import Policy, Profile
from otel_agentguard.probes import Alert, SessionTotals, call_key
from otel_agentguard.steps import TOOL, Step

DISPOSAL = "break the cycle: tell the model these calls repeat, and ask it to answer with what it has or change plan"
PERIODS = (2, 3, 4)


class Cycle:
    name = CYCLE
    __slots__ = ("_repeats", "_history", "_runs", "_fired")

    def __init__(self, profile: Profile, policy: Policy):
        self._repeats = profile.cycle_repeats
        # Enough history for the evidence of the longest period.
        self._history: deque[tuple[object, int, str]] = deque(maxlen=max(PERIODS) * self._repeats)
        self._runs = dict.fromkeys(PERIODS, 0)
        self._fired = False

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if step.kind != TOOL or self._fired:
            return None
        key = call_key(step)
        history = self._history
        for period in PERIODS:
            same = key is not None and len(history) >= period and history[-period][0] == key
            self._runs[period] = self._runs[period] + 1 if same else 0
        history.append((key, step.sequence, step.name))
        for period in PERIODS:
            if self._runs[period] < period * (self._repeats - 1):
                continue
            block = list(history)[-period:]
            if not _primitive([key for key, _, _ in block]):
                continue  # A A is tool_loop's case; A B A B is the period-2 cycle, reported as such
            self._fired = True
            span = list(history)[-period * self._repeats:]
            names = " -> ".join(name for _, _, name in block)
            return [Alert(
                probe=CYCLE,
                sequence=step.sequence,
                evidence=tuple(seq for _, seq, _ in span),
                detail=f"the calls {names} repeated {self._repeats} times back to back with the same results",
                disposal=DISPOSAL,
            )]
        return None


def _primitive(block: list[object]) -> bool:
    """False when the block is a shorter block repeated (A A, A B A B); A B A C is primitive."""
    size = len(block)
    for shorter in range(1, size):
        if size % shorter == 0 and all(block[i] == block[i % shorter] for i in range(size)):
            return False
    return True
