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

from array import array

from otel_agentguard.attributes import CYCLE
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import CYCLE_FIRED, LONGEST_CYCLE, NO_CALL, Alert, SessionTotals
from otel_agentguard.judge.steps import TOOL, Step

DISPOSAL = "break the cycle: tell the model these calls repeat, and ask it to answer with what it has or change plan"
PERIODS = tuple(range(2, LONGEST_CYCLE + 1))


class Cycle:
    name = CYCLE
    kinds = frozenset({TOOL})  # the steps it reads
    __slots__ = ("_repeats",)

    def __init__(self, profile: Profile, policy: Policy):
        self._repeats = profile.cycle_repeats

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if step.kind != TOOL or totals.fired & CYCLE_FIRED:
            return None
        # The judge keeps the session's last calls, this one included: enough of them to
        # see a period repeat and for its evidence.
        calls = totals.call_digests
        if self._repeats > 1 and not _repeats_a_recent_call(calls):
            return None  # the usual case: no period has even begun to repeat
        for period in PERIODS:
            if _run(calls, period, period * (self._repeats - 1)) < period * (self._repeats - 1):
                continue
            if not _primitive(calls[-period:].tolist()):
                continue  # A A is tool_loop's case; A B A B is the period-2 cycle, reported as such
            totals.fired |= CYCLE_FIRED
            names = " -> ".join(totals.call_names[-period:])
            return [Alert(
                probe=CYCLE,
                sequence=step.sequence,
                evidence=tuple(totals.call_sequences[-period * self._repeats:]),
                detail=f"the calls {names} repeated {self._repeats} times back to back with the same results",
                disposal=DISPOSAL,
            )]
        return None


def _repeats_a_recent_call(calls: array[int]) -> bool:
    """Whether the last call equals the call one period before it, for some period (the periods
    are 2 to LONGEST_CYCLE: the calls that far back are one slice)."""
    return len(calls) > 2 and calls[-1] != NO_CALL and calls[-1] in calls[-LONGEST_CYCLE - 1:-2]


def _run(calls: array[int], period: int, enough: int) -> int:
    """How many of the last calls in a row equal the call ``period`` before them (up to
    ``enough``): the calls have been equal to themselves shifted by ``period`` that long."""
    run = 0
    at = len(calls) - 1
    while run < enough and at - period >= 0 and calls[at] != NO_CALL and calls[at] == calls[at - period]:
        run += 1
        at -= 1
    return run


def _primitive(block: list[int]) -> bool:
    """False when the block is a shorter block repeated (A A, A B A B); A B A C is primitive."""
    size = len(block)
    for shorter in range(1, size):
        if size % shorter == 0 and all(block[i] == block[i % shorter] for i in range(size)):
            return False
    return True
