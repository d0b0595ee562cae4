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
from otel_agentguard.policy import Policy, Profile
from otel_agentguard.probes import NO_CALL, Alert, SessionTotals, call_digest
from otel_agentguard.steps import TOOL, Step

DISPOSAL = "break the cycle: tell the model these calls repeat, and ask it to answer with what it has or change plan"
PERIODS = (2, 3, 4)
_LONGEST = max(PERIODS)


class Cycle:
    name = CYCLE
    __slots__ = ("_repeats", "_calls", "_sequences", "_names", "_runs", "_fired")

    def __init__(self, profile: Profile, policy: Policy):
        self._repeats = profile.cycle_repeats
        # Enough history for the evidence of the longest period: call digests and sequences
        # as rings of machine words, the names of the last block only (the detail names one
        # block). Made at the first tool step.
        self._calls: array[int] | None = None
        self._sequences: array[int] = _EMPTY
        self._names: list[str] = _NO_NAMES
        self._runs: list[int] = _NO_RUNS  # per period: how long the calls have equalled themselves shifted by it
        self._fired = False

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if step.kind != TOOL or self._fired:
            return None
        key = call_digest(step)
        calls = self._calls
        if calls is None:
            calls = self._calls = array("q")
            self._sequences = array("q")
            self._names = []
            self._runs = [0] * len(PERIODS)
        runs = self._runs
        for index, period in enumerate(PERIODS):
            same = key != NO_CALL and len(calls) >= period and calls[-period] == key
            runs[index] = runs[index] + 1 if same else 0
        sequences, names = self._sequences, self._names
        calls.append(key)
        sequences.append(step.sequence)
        names.append(step.name)
        if len(calls) > _LONGEST * self._repeats:
            del calls[0]
            del sequences[0]
        if len(names) > _LONGEST:
            del names[0]
        for index, period in enumerate(PERIODS):
            if runs[index] < period * (self._repeats - 1):
                continue
            if not _primitive(calls[-period:].tolist()):
                continue  # A A is tool_loop's case; A B A B is the period-2 cycle, reported as such
            self._fired = True
            return [Alert(
                probe=CYCLE,
                sequence=step.sequence,
                evidence=tuple(sequences[-period * self._repeats:]),
                detail=(f"the calls {' -> '.join(names[-period:])} repeated {self._repeats} times back to back "
                        "with the same results"),
                disposal=DISPOSAL,
            )]
        return None


# Never written: they stand in until the first tool step.
_EMPTY: array[int] = array("q")
_NO_NAMES: list[str] = []
_NO_RUNS: list[int] = []


def _primitive(block: list[int]) -> bool:
    """False when the block is a shorter block repeated (A A, A B A B); A B A C is primitive."""
    size = len(block)
    for shorter in range(1, size):
        if size % shorter == 0 and all(block[i] == block[i % shorter] for i in range(size)):
            return False
    return True
