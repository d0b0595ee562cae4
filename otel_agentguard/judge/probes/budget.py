"""``budget_exceeded``: the session crossed one of its budgets while still running.

What it does:
    Checks the session's running totals after every step against the profile:
    ``steps`` (tool steps plus the final answer), ``tokens``, ``cost``
    (estimated from the price table), ``wall_time`` (span timestamps, so a
    replay agrees with the live run) and ``model_calls``. Raised on the step
    that crosses the line, once per kind, with ``agentguard.budget.kind``.
Why it matters:
    A budget that is only checked when the session ends stops nothing.
Example:
    the 13th step of a session whose profile allows 12.
Options:
    ``max_steps``, ``max_tokens``, ``max_cost_usd``, ``max_wall_time_s``, ``max_model_calls``.
"""

from __future__ import annotations

from otel_agentguard.attributes import BUDGET_EXCEEDED
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import BUDGET_FIRED_SHIFT, Alert, SessionTotals
from otel_agentguard.judge.steps import Step

DISPOSAL = "force a terminal state: return what is done as incomplete; do not extend the budget"


class BudgetExceeded:
    name = BUDGET_EXCEEDED
    __slots__ = ("_limits", "_max_steps", "_max_tokens", "_max_cost", "_max_calls", "_max_wall_s")

    def __init__(self, profile: Profile, policy: Policy):
        self._limits = tuple(
            (kind, _TOTAL_OF.get(kind), limit, 1 << (BUDGET_FIRED_SHIFT + index))
            for index, (kind, limit) in enumerate((
                ("steps", profile.max_steps),
                ("tokens", profile.max_tokens),
                ("cost", profile.max_cost_usd),
                ("wall_time", profile.max_wall_time_s),
                ("model_calls", profile.max_model_calls),
            ))
            if limit is not None
        )
        # The limits again, an absent one as infinity: one comparison each settles the usual step.
        self._max_steps = _or_inf(profile.max_steps)
        self._max_tokens = _or_inf(profile.max_tokens)
        self._max_cost = _or_inf(profile.max_cost_usd)
        self._max_calls = _or_inf(profile.max_model_calls)
        self._max_wall_s = _or_inf(profile.max_wall_time_s)

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if (totals.steps <= self._max_steps and totals.tokens <= self._max_tokens
                and totals.cost_usd <= self._max_cost and totals.model_calls <= self._max_calls
                and (not totals.start_ns or (step.end_ns - totals.start_ns) / 1e9 <= self._max_wall_s)):
            return None  # every total within its limit: the usual step
        alerts = None
        for kind, total, limit, fired in self._limits:
            if totals.fired & fired:
                continue
            used = getattr(totals, total) if total is not None else _wall_time_used(step, totals)
            if used > limit:
                totals.fired |= fired
                alerts = alerts or []
                alerts.append(Alert(
                    probe=BUDGET_EXCEEDED,
                    sequence=step.sequence,
                    evidence=(step.sequence,),
                    detail=f"{kind} budget exceeded: {_amount(kind, used)} used of {_amount(kind, limit)}",
                    disposal=DISPOSAL,
                    budget_kind=kind,
                ))
        return alerts


def _or_inf(limit: float | None) -> float:
    return float("inf") if limit is None else limit


# The budgets that are a running total of the session, by the total's name; wall time is not.
_TOTAL_OF = {"steps": "steps", "tokens": "tokens", "cost": "cost_usd", "model_calls": "model_calls"}


def _wall_time_used(step: Step, totals: SessionTotals) -> float:
    return max(step.end_ns - totals.start_ns, 0) / 1e9 if totals.start_ns else 0.0


def _amount(kind: str, value: float) -> str:
    if kind == "cost":
        return f"${value:.4f}"
    if kind == "wall_time":
        return f"{value:.1f}s"
    return str(int(value))
