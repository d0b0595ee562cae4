"""``output_repetition``: the model repeats itself inside one answer ("chanting").

What it does:
    Reads each model step's repetition summary (``agentguard.output.repetition``,
    written live while the answer streamed, or computed from captured answer
    text on replay; see :mod:`otel_agentguard.judge.repetition`). It fires when one
    chunk of the answer (a sentence, a line, a code line) or a short cycle of
    chunks came more than ``output_max_repeats`` times in a row, or when the
    repeated text reached ``output_max_repeated_chars`` characters.
Why it matters:
    A model that loops inside its answer burns output tokens until
    ``max_tokens`` and streams garbage to the user; no tool is called, so the
    tool-call probes never see it. In enforce mode the stream is closed at the
    alert.
Example:
    "I will check the configuration again." four times in a row; the same
    paragraph twice; ``print("retry")`` on every line of a code block.
Options:
    ``output_max_repeats`` (default 3), ``output_max_repeated_chars`` (default 240).
"""

from __future__ import annotations

from otel_agentguard.attributes import OUTPUT_REPETITION_PROBE
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import OUTPUT_REPETITION_FIRED, Alert, SessionTotals
from otel_agentguard.judge.steps import MODEL, Step

DISPOSAL = "close the stream: discard the repeated tail, and retry with a lower max_tokens or another prompt"


class OutputRepetition:
    name = OUTPUT_REPETITION_PROBE
    kinds = frozenset({MODEL})  # the steps it reads
    __slots__ = ("_max_repeats", "_max_chars")

    def __init__(self, profile: Profile, policy: Policy):
        self._max_repeats = profile.output_max_repeats
        self._max_chars = profile.output_max_repeated_chars

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        summary = step.output_repetition
        if totals.fired & OUTPUT_REPETITION_FIRED or step.kind != MODEL or summary is None:
            return None
        if not summary.exceeds(self._max_repeats, self._max_chars):
            return None
        totals.fired |= OUTPUT_REPETITION_FIRED
        found = summary.finding_for(self._max_repeats, self._max_chars)
        if found is not None:
            detail = (
                f"the answer repeats a {found.period}-chunk unit {found.copies} times in a row: first at character "
                f"{found.first_offset}, over the limit at character {found.trigger_offset} "
                f"({summary.chunks} chunks, at most {summary.max_repeats} copies in a row)"
            )
            offsets = (found.first_offset, found.trigger_offset)
        else:  # recorded under other thresholds: the maxima still decide, the offsets are not known
            detail = (
                f"the answer repeats itself: at most {summary.max_repeats} copies in a row, "
                f"{summary.max_repeated_chars} repeated characters ({summary.chunks} chunks)"
            )
            offsets = None
        return [Alert(
            probe=OUTPUT_REPETITION_PROBE,
            sequence=step.sequence,
            evidence=(step.sequence,),
            detail=detail,
            disposal=DISPOSAL,
            offsets=offsets,
        )]
