"""How a model's answer repeats itself: the public API of the ``output_repetition`` check.

:func:`summarize` gives the summary of a whole answer; :class:`RepetitionMonitor` checks a streamed
one chunk by chunk, in bounded memory. They live in :mod:`otel_agentguard.judge.repetition`.
"""

from otel_agentguard.judge.repetition import RepetitionMonitor, RepetitionSummary, summarize

__all__ = ["RepetitionMonitor", "RepetitionSummary", "summarize"]
