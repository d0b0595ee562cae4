"""Stall probes: one small module per probe, each incremental and bounded.

A probe is built once per profile and policy and shared by every session
judged with them; it sees each session's steps in sequence order. What it
remembers of a session lives in that session's :class:`SessionTotals`, made
when first needed, so an idle session costs a few hundred bytes. ``observe``
updates that memory in O(1) amortised time and returns the alerts the step
raised (usually none). Each probe raises a given alert at most once per session.

Probes never see raw content: only names, fingerprints, flags and counts.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Protocol

from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.steps import Step


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


# Bits of SessionTotals.fired: each probe raises its alert once per session
# (budget_exceeded once per kind, from BUDGET_FIRED_SHIFT up).
FAKE_COMPLETION_FIRED = 1 << 0
OUTPUT_REPETITION_FIRED = 1 << 1
TOOL_LOOP_FIRED = 1 << 2
CYCLE_FIRED = 1 << 3
NO_PROGRESS_FIRED = 1 << 4
ERROR_STREAK_FIRED = 1 << 5
HANDOFF_LOOP_FIRED = 1 << 6
BUDGET_FIRED_SHIFT = 7

LONGEST_CYCLE = 4  # the longest block of calls ``cycle`` looks for


class SessionTotals:
    """Running totals of a session, kept by the judge and read by probes, and what the
    probes remember of it: rings of machine words and small containers made at first use."""

    __slots__ = (
        "start_ns", "steps", "tokens", "cost_usd", "model_calls", "wrote", "finished_explicitly", "final",
        "open_tool_calls", "partial_result", "fired", "call_digests", "call_sequences", "call_names",
        "states_seen", "no_progress_run", "error_run", "error_failures", "answers", "unchecked_answers",
        "agent", "agents_seen", "hops",
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
        self.answers = 0  # final answers
        self.unchecked_answers = 0  # ... that no claim rule could read (their language)
        self.fired = 0  # the *_FIRED bits of the probes that raised their alert
        # The last tool calls (the judge keeps them, see remember_call): call digests and
        # sequence numbers side by side, and the names of the last LONGEST_CYCLE calls.
        self.call_digests: array[int] = _NO_WORDS
        self.call_sequences: array[int] = _NO_WORDS
        self.call_names: list[str] = _NO_NAMES
        self.states_seen: bytearray | None = None  # no_progress: digests of the result fingerprints seen, packed
        self.no_progress_run: array[int] | None = None  # no_progress: sequences of the current run
        self.error_run: array[int] | None = None  # error_streak: sequences of the current streak
        self.error_failures = 0  # error_streak: how many in the streak failed (vs came back empty)
        # handoff_loop: the agent in control, the agents that had control since a write tool last
        # succeeded, and the hops between them (negative: a hop back to one of them).
        self.agent: str | None = None
        self.agents_seen: set[str] | None = None
        self.hops: list[int] | None = None

    def remember_call(self, step: Step, keep: int) -> None:
        """A tool step, in sequence order: the last ``keep`` calls stay (the probes' windows)."""
        digests = self.call_digests
        if digests is _NO_WORDS:
            digests = self.call_digests = array("q")
            self.call_sequences = array("q")
            self.call_names = []
        sequences, names = self.call_sequences, self.call_names
        digests.append(call_digest(step))
        sequences.append(step.sequence)
        names.append(step.name)
        if len(digests) > keep:
            del digests[0]
            del sequences[0]
        if len(names) > LONGEST_CYCLE:
            del names[0]


# Never written: they stand in until a session's first tool step.
_NO_WORDS: array[int] = array("q")
_NO_NAMES: list[str] = []


class Probe(Protocol):
    """A probe. It may also name the step kinds it reads (``kinds``, a frozenset of
    ``tool``/``model``); the judge then hands it no other steps."""

    name: str

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None: ...


class ProbeFactory(Protocol):
    name: str

    def __call__(self, profile: Profile, policy: Policy) -> Probe: ...


NO_CALL = -1  # the digest of a call whose arguments are unknown: it matches nothing


def call_digest(step: Step) -> int:
    """What makes two tool steps "the same call with the same outcome" (the arguments'
    fingerprint, the result's and whether the call failed), as one 64-bit integer, so a
    probe's window is a ring of machine words. A call whose arguments are unknown matches nothing.

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
    global _ALL_PROBES
    if _ALL_PROBES is None:  # imported on first use: the probe modules import this one
        from otel_agentguard.judge.probes.budget import BudgetExceeded
        from otel_agentguard.judge.probes.cycle import Cycle
        from otel_agentguard.judge.probes.error_streak import ErrorStreak
        from otel_agentguard.judge.probes.fake_completion import FakeCompletion
        from otel_agentguard.judge.probes.handoff_loop import HandoffLoop
        from otel_agentguard.judge.probes.no_progress import NoProgress
        from otel_agentguard.judge.probes.output_repetition import OutputRepetition
        from otel_agentguard.judge.probes.tool_loop import ToolLoop

        _ALL_PROBES = (FakeCompletion, OutputRepetition, ToolLoop, Cycle, NoProgress, ErrorStreak, HandoffLoop,
                       BudgetExceeded)
    return _ALL_PROBES


_ALL_PROBES: tuple[ProbeFactory, ...] | None = None
