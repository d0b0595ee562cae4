"""Output repetition: find a model that chants inside one answer, as the text streams.

The answer text is cut into chunks as it arrives (:class:`Chunker`):

* prose is cut into sentences (``.``, ``!``, ``?``, ``;`` before a space, and
  ``。！？；…`` anywhere) and at line ends, so each line of a poem or a list is
  a chunk of its own;
* code inside ``````` fences and Markdown table rows are cut at line ends only
  and compared verbatim (digits included), so ``x[1] = 1`` / ``x[2] = 4`` or
  table rows with the same cells in other columns stay distinct;
* text without any boundary (Chinese without punctuation, one endless line)
  is cut by size, at a content-defined point: among the positions between
  :data:`MIN_CHUNK_CHARS` and :data:`MAX_CHUNK_CHARS` (fewer for CJK text),
  the one whose three preceding characters hash lowest. Text that repeats
  itself therefore gets its cuts at the same place in every copy;
* chunks with little content (a closing brace, "OK.", a table's ``|---|``
  row, a list marker) are skipped: they neither count nor break a run.

Prose is compared after lower-casing and collapsing spaces; in a sentence of
some length, a number among its first three words is a counter and compared
as ``0``, so "Attempt 7: checking again." repeats "Attempt 6: ...", while
"Check the pod named api-7 and note its restarts." stays distinct from api-8.

Each chunk's fingerprint (an in-process hash that never leaves the process)
goes into a window of the last :data:`MAX_CYCLE_CHUNKS` chunks. For every
cycle length ``p`` up to that, a run counts the chunks equal to the chunk
``p`` places back: ``k`` copies of a ``p``-chunk unit in a row make a run of
``(k - 1) * p``. The answer repeats itself too much when a unit reaches more
copies in a row than ``output_max_repeats``, or when the text that repeats
what came one cycle before reaches ``output_max_repeated_chars`` characters:
a long paragraph said again is caught within its second copy, as early as a
short sentence said four times. Work per chunk is O(``MAX_CYCLE_CHUNKS``) and memory
per stream is bounded by it and by :data:`MAX_CHUNK_CHARS`.

What a model span records (:attr:`RepetitionSummary.attribute`, never text):
the chunk count, the most copies in a row, the most repeated characters, and
the finding under the thresholds it was checked with: the cycle length, the
character offset where the repeated unit first appears and the offset of the
chunk that crossed the threshold. Whether an answer repeats more than a
profile allows follows from the two maxima alone, so a replay without the
text reaches the same verdict; a replay with the text recomputes all of it.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

MIN_CHUNK_CHARS = 24
MAX_CHUNK_CHARS = 120
MIN_CJK_CHUNK_CHARS = 12  # a CJK character carries about as much as a short word
MAX_CJK_CHUNK_CHARS = 40
MAX_CYCLE_CHUNKS = 8
MIN_CHUNK_WEIGHT = 8  # letters and digits in a chunk; a CJK character counts twice
COUNTER_MIN_WEIGHT = 24  # a sentence this long may carry a counter in its first words
DEFAULT_MAX_REPEATS = 3
DEFAULT_MAX_REPEATED_CHARS = 240

_FEED_SLICE = 256
_BOUNDARY = re.compile(r"[\n.!?;。！？；…]")
_CJK_STOPS = frozenset("。！？；…")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_NOT_ALNUM = re.compile(r"[\W_]+")
_CJK = re.compile(r"[\u2e80-\U0002ffff]")
_LABEL = re.compile(r"\W*(?:\w+\W+){0,2}\w*")  # the first three words
_SPACES = re.compile(r"\s+")
_FENCE = ("```", "~~~")

PROSE = 0
VERBATIM = 1


@dataclass(frozen=True, slots=True)
class Finding:
    """The first place an answer repeated itself more than allowed."""

    period: int  # chunks in the repeated unit
    copies: int  # copies in a row when it fired
    first_offset: int  # character offset where the repeated unit first appears
    trigger_offset: int  # character offset of the chunk that crossed the threshold
    end_offset: int  # characters of answer text up to the end of that chunk


@dataclass(frozen=True, slots=True)
class RepetitionSummary:
    """What a model span records about its answer's repetition (no text)."""

    chunks: int
    max_repeats: int
    max_repeated_chars: int
    max_repeats_allowed: int
    max_repeated_chars_allowed: int
    finding: Finding | None = None

    def exceeds(self, max_repeats: int, max_repeated_chars: int) -> bool:
        """Whether this answer repeats more than these thresholds allow (exact for any thresholds)."""
        return self.max_repeats > max_repeats or self.max_repeated_chars >= max_repeated_chars

    def finding_for(self, max_repeats: int, max_repeated_chars: int) -> Finding | None:
        """The recorded finding, when it was checked with these very thresholds."""
        if (max_repeats, max_repeated_chars) == (self.max_repeats_allowed, self.max_repeated_chars_allowed):
            return self.finding
        return None

    @property
    def attribute(self) -> str:
        """The value of ``agentguard.output.repetition``: a small JSON object."""
        value: dict[str, Any] = {
            "chunks": self.chunks,
            "max_repeats": self.max_repeats,
            "max_repeated_chars": self.max_repeated_chars,
            "checked_with": [self.max_repeats_allowed, self.max_repeated_chars_allowed],
        }
        found = self.finding
        if found is not None:
            value["finding"] = [found.period, found.copies, found.first_offset, found.trigger_offset, found.end_offset]
        return json.dumps(value, separators=(",", ":"))

    @classmethod
    def from_attribute(cls, raw: Any) -> RepetitionSummary | None:
        """Read the attribute back; anything malformed (a foreign value) reads as absent."""
        if not isinstance(raw, str) or len(raw) > 4096:
            return None
        try:
            value = json.loads(raw)
            checked = value.get("checked_with") or [DEFAULT_MAX_REPEATS, DEFAULT_MAX_REPEATED_CHARS]
            found = value.get("finding")
            return cls(
                chunks=_natural(value["chunks"]),
                max_repeats=_natural(value["max_repeats"]),
                max_repeated_chars=_natural(value.get("max_repeated_chars", 0)),
                max_repeats_allowed=_natural(checked[0]),
                max_repeated_chars_allowed=_natural(checked[1]),
                finding=Finding(*(_natural(v) for v in found)) if found else None,
            )
        except (ValueError, TypeError, KeyError, AttributeError, IndexError):
            return None


def _natural(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(value)
    return value


class RepetitionDetector:
    """Chunk fingerprints in, the first finding out. O(MAX_CYCLE_CHUNKS) per chunk."""

    __slots__ = (
        "max_repeats", "max_repeated_chars", "chunks", "max_copies", "max_chars", "finding",
        "_recent", "_run", "_run_chars", "_first",
    )

    def __init__(self, max_repeats: int = DEFAULT_MAX_REPEATS, max_repeated_chars: int = DEFAULT_MAX_REPEATED_CHARS):
        self.max_repeats = max_repeats
        self.max_repeated_chars = max_repeated_chars
        self.chunks = 0
        self.max_copies = 0
        self.max_chars = 0
        self.finding: Finding | None = None
        self._recent: deque[tuple[int, int]] = deque(maxlen=MAX_CYCLE_CHUNKS)  # (fingerprint, start)
        size = MAX_CYCLE_CHUNKS + 1
        self._run = [0] * size
        self._run_chars = [0] * size
        self._first = [0] * size

    def add(self, fingerprint: int, start: int, end: int) -> Finding | None:
        """Count one chunk; the finding, the first time the thresholds are crossed."""
        recent = self._recent
        run, run_chars, first = self._run, self._run_chars, self._first
        held = len(recent)
        self.chunks += 1
        if self.max_copies == 0:
            self.max_copies = 1
        new: Finding | None = None
        for period in range(1, MAX_CYCLE_CHUNKS + 1):
            if period > held or recent[-period][0] != fingerprint:
                run[period] = 0
                run_chars[period] = 0
                continue
            if run[period] == 0:
                first[period] = recent[-period][1]
            run[period] += 1
            run_chars[period] += end - start
            copies = (run[period] + period) // period
            repeated = run_chars[period]
            if copies > self.max_copies:
                self.max_copies = copies
            if repeated > self.max_chars:
                self.max_chars = repeated
            if new is None and self.finding is None and (
                copies > self.max_repeats or repeated >= self.max_repeated_chars
            ):
                new = Finding(period, copies, first[period], start, end)
        recent.append((fingerprint, start))
        if new is not None:
            self.finding = new
        return new

    def copy(self) -> RepetitionDetector:
        twin = RepetitionDetector(self.max_repeats, self.max_repeated_chars)
        twin.chunks, twin.max_copies, twin.max_chars, twin.finding = (
            self.chunks, self.max_copies, self.max_chars, self.finding)
        twin._recent = deque(self._recent, maxlen=MAX_CYCLE_CHUNKS)
        twin._run, twin._run_chars, twin._first = list(self._run), list(self._run_chars), list(self._first)
        return twin

    def summary(self) -> RepetitionSummary:
        return RepetitionSummary(
            self.chunks, self.max_copies, self.max_chars, self.max_repeats, self.max_repeated_chars, self.finding
        )


class Chunker:
    """Cuts streamed text into chunks and hands each to a :class:`RepetitionDetector`.

    Holds at most one unfinished chunk (bounded by :data:`MAX_CHUNK_CHARS`).
    """

    __slots__ = ("detector", "chars", "_buffer", "_start", "_scan", "_line_start", "_kind", "_in_fence")

    def __init__(self, detector: RepetitionDetector):
        self.detector = detector
        self.chars = 0  # answer text seen so far
        self._buffer = ""
        self._start = 0  # offset of the buffer's first character
        self._scan = 0  # buffer position up to which boundaries were looked for
        self._line_start = True  # the buffer starts a line
        self._kind: int | None = None  # the current line's kind, once known
        self._in_fence = False

    def feed(self, text: str) -> Finding | None:
        """Add streamed text; the finding, if this text crossed the thresholds."""
        if not text:
            return None
        self.chars += len(text)
        self._buffer += text
        found = None
        while self._buffer:
            if self._kind is None and not self._classify():
                break
            buffer = self._buffer
            low, high = _size_limits(buffer)
            # Only boundaries within the first `high` characters count, so the cuts do not
            # depend on how the text was split into streamed pieces.
            match = _BOUNDARY.search(buffer, self._scan, high)
            if match is None:
                if len(buffer) <= high:
                    self._scan = min(len(buffer), high)
                    break
                found = self._cut(_anchor(buffer, low, high), 0) or found
                self._line_start = False
                continue
            at = match.start()
            char = buffer[at]
            if char == "\n":
                found = self._cut(at, 1) or found
                self._line_start, self._kind = True, None
                continue
            if self._kind == VERBATIM:
                self._scan = at + 1
                continue
            if char not in _CJK_STOPS:
                if at + 1 >= len(buffer):
                    self._scan = at  # wait for the next character: "3.14" or a sentence end?
                    break
                if not buffer[at + 1].isspace():
                    self._scan = at + 1
                    continue
            found = self._cut(at + 1, 0) or found
            self._line_start = False
        return found

    def _cut(self, length: int, skip: int) -> Finding | None:
        """Emit the buffer's first ``length`` characters as a chunk and drop ``skip`` more."""
        found = self._emit(self._buffer[:length], self._start)
        self._buffer = self._buffer[length + skip:]
        self._start += length + skip
        self._scan = 0
        return found

    def _classify(self) -> bool:
        """Decide the current line's kind from its first characters; False: not enough seen yet."""
        buffer = self._buffer
        if not self._line_start:
            self._kind = VERBATIM if self._in_fence else PROSE
            return True
        head = buffer.lstrip(" \t")
        if len(head) < 3 and "\n" not in head:
            return False
        if head[:3] in _FENCE:
            newline = buffer.find("\n")
            if newline < 0:
                if len(buffer) > MAX_CHUNK_CHARS:  # a fence line that never ends: drop a chunk's worth
                    self._drop(MAX_CHUNK_CHARS + 1)
                    return bool(self._buffer) and self._classify()
                return False
            self._in_fence = not self._in_fence
            self._drop(newline + 1)
            return bool(self._buffer) and self._classify()
        self._kind = VERBATIM if self._in_fence or head.startswith("|") else PROSE
        return True

    def _drop(self, length: int) -> None:
        """Drop a fence line: it opens or closes a code block and is no content."""
        self._buffer = self._buffer[length:]
        self._start += length
        self._scan = 0

    def _emit(self, text: str, start: int) -> Finding | None:
        stripped = text.strip()
        if not stripped:
            return None
        lead = len(text) - len(text.lstrip())
        begin = start + lead
        end = begin + len(stripped)
        weight = _weight(stripped)
        if weight < MIN_CHUNK_WEIGHT:
            return None
        if self._kind == VERBATIM:
            key = hash((VERBATIM, _SPACES.sub(" ", stripped)))
        else:
            text = _SPACES.sub(" ", stripped.lower())
            if weight >= COUNTER_MIN_WEIGHT:
                # A counter in the first words ("Attempt 7: ...", "Step 7 -", "Day 7:") does not
                # make a sentence new; a number further on ("pod api-7") names something else.
                label = _LABEL.match(text)
                if label is not None and label.end():
                    text = _NUMBER.sub("0", text[:label.end()]) + text[label.end():]
            key = hash((PROSE, text))
        return self.detector.add(key, begin, end)


def _weight(text: str) -> int:
    """Letters and digits; a CJK character counts twice."""
    letters = _NOT_ALNUM.sub("", text)
    return len(letters) + _CJK.subn("", letters)[1] if letters else 0


def _size_limits(buffer: str) -> tuple[int, int]:
    """Chunk sizes for text without a boundary: fewer characters for CJK text."""
    if buffer[:1] >= "\u2e80":
        return MIN_CJK_CHUNK_CHARS, MAX_CJK_CHUNK_CHARS
    return MIN_CHUNK_CHARS, MAX_CHUNK_CHARS


def _anchor(buffer: str, shortest: int, longest: int) -> int:
    """Where to cut text without a boundary: content-defined, so repeats cut alike.

    Among positions ``shortest..longest``, the one after a space whose three
    preceding characters hash lowest; without a space in reach, any position.
    """
    best, best_spaced = -1, -1
    low, low_spaced = 1 << 64, 1 << 64
    for position in range(shortest, longest + 1):
        a, b, c = buffer[position - 3], buffer[position - 2], buffer[position - 1]
        value = ((ord(a) * 1_000_003 + ord(b)) * 1_000_003 + ord(c)) * 0x9E3779B97F4A7C15 & 0xFFFFFFFFFFFFFFFF
        if value < low:
            low, best = value, position
        if c.isspace() and value < low_spaced:
            low_spaced, best_spaced = value, position
    return best_spaced if best_spaced > 0 else best


class RepetitionMonitor:
    """One answer's repetition check, fed as the text streams."""

    __slots__ = ("chunker",)

    def __init__(self, max_repeats: int = DEFAULT_MAX_REPEATS, max_repeated_chars: int = DEFAULT_MAX_REPEATED_CHARS):
        self.chunker = Chunker(RepetitionDetector(max_repeats, max_repeated_chars))

    @property
    def chars(self) -> int:
        return self.chunker.chars

    @property
    def finding(self) -> Finding | None:
        return self.chunker.detector.finding

    def feed(self, text: str) -> Finding | None:
        if len(text) <= _FEED_SLICE:
            return self.chunker.feed(text)
        # A whole answer at once: in slices, so the chunker's buffer (and each cut's copy) stays small.
        found = None
        for start in range(0, len(text), _FEED_SLICE):
            found = self.chunker.feed(text[start:start + _FEED_SLICE]) or found
        return found

    def summary(self) -> RepetitionSummary:
        """The summary so far, the unfinished last chunk included (the monitor stays usable)."""
        chunker = self.chunker
        if not chunker._buffer.strip():
            return chunker.detector.summary()
        # Count the tail on a copy of the detector, so that feeding can go on afterwards.
        saved = chunker.detector
        chunker.detector = saved.copy()
        try:
            chunker._emit(chunker._buffer, chunker._start)
            return chunker.detector.summary()
        finally:
            chunker.detector = saved


def summarize(text: str, max_repeats: int = DEFAULT_MAX_REPEATS,
              max_repeated_chars: int = DEFAULT_MAX_REPEATED_CHARS) -> RepetitionSummary:
    """The summary of a whole answer at once (a non-streamed answer; a replayed one)."""
    monitor = RepetitionMonitor(max_repeats, max_repeated_chars)
    monitor.feed(text)
    return monitor.summary()
