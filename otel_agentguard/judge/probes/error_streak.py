"""``error_streak``: consecutive tool results that failed or came back empty.

What it does:
    Counts tool steps in a row whose span failed (status ERROR or
    ``error.type``) or whose result was empty (null, "", [], {}, or a mapping
    of only empty values), across any arguments. A useful result ends the
    streak; a result that is not known neither extends nor ends it.
Why it matters:
    Retrying a broken or empty source with ever new arguments is a stall the
    repeat counters cannot see.
Example:
    search(q="a") -> [], search(q="b") -> [], lookup(id=1) -> 500, ...
Options:
    ``error_streak``.
"""

from __future__ import annotations

from array import array

from otel_agentguard.attributes import ERROR_STREAK
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import ERROR_STREAK_FIRED, Alert, SessionTotals
from otel_agentguard.judge.steps import TOOL, Step

DISPOSAL = "stop retrying: switch to a fallback tool or source, or tell the user what failed"


class ErrorStreak:
    name = ERROR_STREAK
    kinds = frozenset({TOOL})  # the steps it reads
    __slots__ = ("_threshold",)

    def __init__(self, profile: Profile, policy: Policy):
        self._threshold = profile.error_streak

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if step.kind != TOOL or totals.fired & ERROR_STREAK_FIRED:
            return None
        if not step.failed and step.empty is None:
            return None
        streak = totals.error_run
        if not step.failed and not step.empty:
            if streak:
                del streak[:]
            totals.error_failures = 0
            return None
        if streak is None:
            streak = totals.error_run = array("q")
        streak.append(step.sequence)
        totals.error_failures += 1 if step.failed else 0
        if len(streak) < self._threshold:
            return None
        totals.fired |= ERROR_STREAK_FIRED
        failed = min(totals.error_failures, self._threshold)
        return [Alert(
            probe=ERROR_STREAK,
            sequence=step.sequence,
            evidence=tuple(streak),
            detail=(
                f"{self._threshold} tool results in a row failed or came back empty "
                f"({failed} failed, {self._threshold - failed} empty)"
            ),
            disposal=DISPOSAL,
        )]
