"""Stall probes: one small module per probe, each incremental and bounded.

A probe is built once per session from the session's profile and policy, then
sees every step of that session in sequence order. ``observe`` updates its
state in O(1) amortised time and returns the alerts the step raised (usually
none). Each probe raises a given alert at most once per session.

Probes never see raw content: only names, fingerprints, flags and counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from otel_agentguard.policy import Policy, Profile
from otel_agentguard.steps import Step


@dataclass(frozen=True, slots=True)
class Alert:
    """A stall a probe found: which steps prove it, in a sentence, and what to do."""

    probe: str
    sequence: int  # the step that raised it
    evidence: tuple[int, ...]
    detail: str
    disposal: str
    budget_kind: str | None = None
    offsets: tuple[int, int] | None = None  # output_repetition: first and triggering repetition, in characters


class SessionTotals:
    """Running totals of a session, kept by the judge and read by probes."""

    __slots__ = (
        "start_ns", "steps", "tokens", "cost_usd", "model_calls", "wrote", "finished_explicitly", "final",
        "open_tool_calls", "partial_result",
    )

    def __init__(self, start_ns: int = 0):
        self.start_ns = start_ns
        # The tool-call balance: calls the model asked for that have no result yet.
        self.open_tool_calls = 0
        self.partial_result = False  # some tool returned something useful
        self.steps = 0  # tool steps plus the final answer
        self.tokens = 0
        self.cost_usd = 0.0
        self.model_calls = 0
        self.wrote = False  # a tool whose contract says "write" succeeded
        self.finished_explicitly = False
        self.final = False


class Probe(Protocol):
    name: str

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None: ...


class ProbeFactory(Protocol):
    name: str

    def __call__(self, profile: Profile, policy: Policy) -> Probe: ...


def call_key(step: Step) -> tuple[str, str | None, bool] | None:
    """What makes two tool steps "the same call with the same outcome".

    A call whose arguments are unknown matches nothing.
    """
    if step.args_fingerprint is None:
        return None
    return (step.args_fingerprint, step.result_fingerprint, step.failed)


NO_CALL = -1  # the digest of a call whose arguments are unknown: it matches nothing


def call_digest(step: Step) -> int:
    """:func:`call_key` as one 64-bit integer, so a probe's window is a ring of machine words.

    The fingerprints inside are 128-bit keyed hashes already; two different calls share a
    digest with odds of about 2**-64. ``hash`` of a tuple is never -1, so :data:`NO_CALL`
    stands apart from every real call.
    """
    if step.args_fingerprint is None:
        return NO_CALL
    return hash((step.args_fingerprint, step.result_fingerprint, step.failed))


def short(fingerprint: str | None) -> str:
    """The first 8 hex digits, after any "tool:" prefix a foreign log put in front."""
    return (fingerprint or "?").rsplit(":", 1)[-1][:8]


def all_probes() -> tuple[ProbeFactory, ...]:
    """Every probe, in the order their alerts rank when raised by the same step."""
    from otel_agentguard.probes.budget import BudgetExceeded
    from otel_agentguard.probes.cycle import Cycle
    from otel_agentguard.probes.error_streak import ErrorStreak
    from otel_agentguard.probes.fake_completion import FakeCompletion
    from otel_agentguard.probes.no_progress import NoProgress
    from otel_agentguard.probes.output_repetition import OutputRepetition
    from otel_agentguard.probes.tool_loop import ToolLoop

    return (FakeCompletion, OutputRepetition, ToolLoop, Cycle, NoProgress, ErrorStreak, BudgetExceeded)
