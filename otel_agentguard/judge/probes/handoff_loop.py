"""``handoff_loop``: control bounces between the same two agents and nothing gets done.

What it does:
    Follows the agent of each step (``gen_ai.agent.name`` on the step, or on the agent span
    around it). A step of another agent than the last one is a hop; a hop to an agent that
    already had control since a write tool last succeeded is a bounce: control came back.
    Two agents handing to each other, or a supervisor routing to the same workers in turn,
    bounce; a pipeline through new agents does not.
Why it matters:
    In a multi-agent system a triage agent hands to billing, billing hands back, and again:
    each hop is a model call and a handoff, so no tool repeats and no other probe sees it.
Example:
    triage -> billing -> triage -> billing -> triage (three bounces), no refund issued;
    supervisor -> billing -> supervisor -> shipping -> supervisor -> billing (three).
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
            # Something got done: the routing so far was work. Who has control now still counts.
            totals.hops = None
            totals.agents_seen = {totals.agent} if totals.agent is not None else None
            return None
        agent, current = step.agent, totals.agent
        if agent is None or agent == current:
            return None
        totals.agent = agent
        seen = totals.agents_seen
        if seen is None:
            seen = totals.agents_seen = set()
        came_back = agent in seen
        seen.add(agent)
        if current is None:
            return None  # the first agent seen: no hop yet
        hops = totals.hops
        if hops is None:
            hops = totals.hops = []
        hops.append(-step.sequence if came_back else step.sequence)
        bounces = sum(1 for hop in hops if hop < 0)
        if bounces < self._bounces:
            return None
        totals.fired |= HANDOFF_LOOP_FIRED
        agents = sorted(seen)
        return [Alert(
            probe=HANDOFF_LOOP,
            sequence=step.sequence,
            evidence=tuple(abs(hop) for hop in hops),
            detail=(f"control passed between {', '.join(agents[:-1])} and {agents[-1]} {len(hops)} times, "
                    f"{bounces} of them back to an agent that had it before, with no write tool succeeding"),
            disposal=DISPOSAL,
        )]
