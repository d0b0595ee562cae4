"""``handoff_loop``: control bounces between the same two agents and nothing gets done.

What it does:
    Follows the agent of each step (``gen_ai.agent.name`` on the step, or on the agent span
    around it). A step of another agent than the last one is a hop; a hop back to the agent
    that had control just before is a bounce. Counts the bounces between the same two agents
    since a write tool last succeeded; a hop to a third agent starts the count again.
Why it matters:
    In a multi-agent system a triage agent hands to billing, billing hands back, and again:
    each hop is a model call and a handoff, so no tool repeats and no other probe sees it.
Example:
    triage -> billing -> triage -> billing -> triage (three bounces), no refund issued.
Options:
    ``handoff_bounces``.
"""

from __future__ import annotations

from otel_agentguard.attributes import HANDOFF_LOOP
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import HANDOFF_LOOP_FIRED, Alert, SessionTotals
from otel_agentguard.judge.steps import TOOL, Step

DISPOSAL = "stop routing: let one agent own the task (or the user decide), or hand over to a human"
WRITE = "write"


class HandoffLoop:
    name = HANDOFF_LOOP
    __slots__ = ("_bounces",)

    def __init__(self, profile: Profile, policy: Policy):
        self._bounces = profile.handoff_bounces

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if totals.fired & HANDOFF_LOOP_FIRED:
            return None
        if step.kind == TOOL and step.effect == WRITE and not step.failed:
            totals.hops = None  # something got done: the bouncing so far was work
            return None
        agent = step.agent
        current, previous = totals.agents
        if agent is None or agent == current:
            return None
        totals.agents = (agent, current)
        if current is None:
            return None  # the first agent seen: no hop yet
        hops = totals.hops
        if agent == previous and hops:  # back to the agent that had control before: a bounce
            hops.append(step.sequence)
        else:  # a hop between a new pair of agents: counting starts again
            totals.hops = [step.sequence]
            return None
        if len(hops) - 1 < self._bounces:
            return None
        totals.fired |= HANDOFF_LOOP_FIRED
        first, second = sorted((agent, current))
        return [Alert(
            probe=HANDOFF_LOOP,
            sequence=step.sequence,
            evidence=tuple(hops),
            detail=(f"control passed between {first} and {second} {len(hops)} times "
                    f"({len(hops) - 1} times back) with no write tool succeeding"),
            disposal=DISPOSAL,
        )]
