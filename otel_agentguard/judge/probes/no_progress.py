"""``no_progress``: steps that bring no state the session has not seen before.

What it does:
    Keeps the set of state fingerprints (tool result fingerprints) seen in the
    session. A tool step whose result is already in the set, or that failed,
    extends a run; a new state ends it. Fires when the run reaches
    ``no_progress_steps``, whatever the arguments were. Steps whose result is
    unknown and model steps neither extend nor end the run.
Why it matters:
    An agent can vary its arguments forever (new dates, new phrasings) and
    still learn nothing: the results say so.
Example:
    four calls in a row that all return "logistics: stalled".
Options:
    ``no_progress_steps``.
"""

from __future__ import annotations

import struct
from array import array

from otel_agentguard.attributes import NO_PROGRESS
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import NO_PROGRESS_FIRED, Alert, SessionTotals
from otel_agentguard.judge.steps import TOOL, Step

DISPOSAL = "end the session and reclaim its context; escalate to a human or a stronger model"
_MAX_STATES = 4096  # bounded memory: the oldest states are forgotten first
_DIGEST = struct.Struct("q")


class NoProgress:
    name = NO_PROGRESS
    kinds = frozenset({TOOL})  # the steps it reads
    __slots__ = ("_threshold",)

    def __init__(self, profile: Profile, policy: Policy):
        self._threshold = profile.no_progress_steps

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if step.kind != TOOL or totals.fired & NO_PROGRESS_FIRED:
            return None
        state = step.result_fingerprint
        if state is None and not step.failed:
            return None  # the result is unknown: no verdict either way
        run = totals.no_progress_run
        if not step.failed and state is not None:
            # States seen, as 64-bit digests of their fingerprints (128-bit keyed hashes
            # already), packed in bytes oldest first: a search is one C scan of the buffer
            # (an array's ``in`` would box every element: slow once a session has seen many).
            seen = totals.states_seen
            digest = _DIGEST.pack(hash(state))
            if seen is None or not _holds(seen, digest):
                if seen is None:
                    seen = totals.states_seen = bytearray()
                seen += digest
                if len(seen) > _MAX_STATES * _DIGEST.size:
                    del seen[:_DIGEST.size]
                if run:
                    del run[:]
                return None
        if run is None:
            run = totals.no_progress_run = array("q")
        run.append(step.sequence)
        if len(run) < self._threshold:
            return None
        totals.fired |= NO_PROGRESS_FIRED
        return [Alert(
            probe=NO_PROGRESS,
            sequence=step.sequence,
            evidence=tuple(run),
            detail=f"{self._threshold} tool steps in a row produced no state the session had not seen before",
            disposal=DISPOSAL,
        )]


def _holds(seen: bytearray, digest: bytes) -> bool:
    """Whether ``seen`` holds ``digest`` at a digest boundary (a match may straddle two)."""
    size = len(digest)
    at = seen.find(digest)
    while at != -1 and at % size:
        at = seen.find(digest, at + 1)
    return at != -1
