"""``fake_completion``: the final answer claims an action no write tool performed.

What it does:
    On the final answer, looks at its claim categories (found in process by
    the claim patterns, see :mod:`otel_agentguard.judge.claims`). If the answer
    claims a write ("refund submitted", "已为您提交") while no tool whose
    contract says ``effect = "write"`` succeeded in the session, it fires.
Why it matters:
    The answer is the thing under judgement: the side effects must come from
    the tool contracts, never from the answer's own words. This alert outranks
    every other when the session's stop_reason is chosen.
Example:
    "I have submitted your refund" after only get_order and check_policy.
Options:
    ``[tools.<name>] effect = "write"`` and ``claims = [...]`` (words for what the tool
    does); ``[claims] classifier``; ``[claims.<lang>]`` patterns.

The detail names the rule that made the answer a claim and the position of the deciding
clause, never the answer's text.
"""

from __future__ import annotations

from otel_agentguard.attributes import FAKE_COMPLETION
from otel_agentguard.judge.claims import WRITE
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import FAKE_COMPLETION_FIRED, Alert, SessionTotals
from otel_agentguard.judge.steps import MODEL, Step

DISPOSAL = "do not deliver the answer: roll back, re-run the write or escalate, and alert (highest priority)"


class FakeCompletion:
    name = FAKE_COMPLETION
    kinds = frozenset({MODEL})  # the steps it reads
    __slots__ = ()

    def __init__(self, profile: Profile, policy: Policy):
        pass

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if not step.final or totals.fired & FAKE_COMPLETION_FIRED or WRITE not in step.claims or totals.wrote:
            return None
        totals.fired |= FAKE_COMPLETION_FIRED
        return [Alert(
            probe=FAKE_COMPLETION,
            sequence=step.sequence,
            evidence=(step.sequence,),
            detail=_detail(step),
            disposal=DISPOSAL,
        )]


def _detail(step: Step) -> str:
    why = f"rule {step.claim_rule}" if step.claim_rule else "claim category write"
    if step.claim_clause is not None:
        why += f", clause {step.claim_clause}"
    return f"the final answer claims a completed write action ({why}), but no write tool succeeded in the session"
