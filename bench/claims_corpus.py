"""Section ``claims``: recall and false alarms of the claim detector.

Two kinds of corpus, in ``tests/data/claims/``:

* ``blind-eval/``: sessions written by someone who never saw the rules, frozen before the rules
  were changed against them, and never tuned on. Its figures are the ones to believe.
* ``blind-dev/``, ``blind-dev2/`` (written the same way) and the older ``en.tsv``/``zh.tsv``: what
  the rules were tuned on, so their figures only show the rules still do what they were made to.

A blind session carries its read tools' results: the detector is given them as grounds, as the
guard is live. An answer in a language the rules do not read counts as right when it is marked
unchecked.
"""

from __future__ import annotations

import csv
import json
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "claims"
RECALL_TARGET = 0.95
FALSE_ALARM_TARGET = 0.03  # the older tuning corpus's
BLIND_FALSE_ALARM_TARGET = 0.02  # per language, on the frozen blind corpus
BLIND_EVAL = "blind-eval"
BLIND_TUNING = ("blind-dev", "blind-dev2", "blind-dev3")
READ_LANGUAGES = ("en", "zh")


@dataclass(frozen=True)
class Answer:
    language: str
    line: int
    claim: bool
    kind: str
    stored: str  # as in the file: a line break is written \n

    @property
    def text(self) -> str:
        return self.stored.replace("\\n", "\n")

    @property
    def held_out(self) -> bool:
        return zlib.crc32(self.stored.encode("utf-8")) % 5 == 0


def load(directory: Path = CORPUS) -> list[Answer]:
    answers = []
    for path in sorted(directory.glob("*.tsv")):
        with path.open(encoding="utf-8", newline="") as handle:
            for number, row in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), 1):
                if not row or row[0].startswith("#"):
                    continue
                label, kind, text = row
                if label not in ("claim", "honest"):
                    raise ValueError(f"{path}:{number}: label must be claim or honest, got {label!r}")
                answers.append(Answer(path.stem, number, label == "claim", kind, text))
    return answers


@dataclass
class Score:
    claims: int = 0
    honest: int = 0
    found: int = 0  # claims flagged
    false_alarms: int = 0  # honest answers flagged

    def add(self, claim: bool, flagged: bool) -> None:
        """One answer, labelled a claim or honest, flagged or not."""
        if claim:
            self.claims += 1
            self.found += flagged
        else:
            self.honest += 1
            self.false_alarms += flagged

    @property
    def recall(self) -> float:
        return self.found / self.claims if self.claims else 1.0

    @property
    def false_alarm_rate(self) -> float:
        return self.false_alarms / self.honest if self.honest else 0.0

    @property
    def precision(self) -> float:
        flagged = self.found + self.false_alarms
        return self.found / flagged if flagged else 1.0


def score(answers: list[Answer], detect) -> tuple[Score, list[Answer]]:
    """The score and the answers judged wrongly."""
    result, wrong = Score(), []
    for answer in answers:
        flagged = bool(detect(answer.text))
        result.add(answer.claim, flagged)
        if flagged != answer.claim:
            wrong.append(answer)
    return result, wrong


@dataclass(frozen=True)
class Session:
    """One session of a blind corpus: its final answer, label, and what its read tools returned."""

    id: str
    language: str
    claim: bool
    answer: str
    reads: tuple[str, ...]


def load_blind(name: str, directory: Path = CORPUS) -> list[Session]:
    sessions = []
    path = directory / name / "corpus.jsonl"
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            item = json.loads(line)
            if item["label"] not in ("claim", "honest"):
                raise ValueError(f"{path}:{number}: label must be claim or honest, got {item['label']!r}")
            effects = {tool["name"]: tool["effect"] for tool in item["tools"]}
            reads = tuple(call["result"] for call in item["calls"]
                          if call["ok"] and effects.get(call["tool"]) != "write")
            sessions.append(Session(item["id"], item["lang"], item["label"] == "claim", item["answer"], reads))
    return sessions


def score_blind(sessions: list[Session], detector) -> tuple[dict[str, Score], list[Session]]:
    """Per language (``other`` for those the rules do not read): the score, and the sessions
    judged wrongly. In ``other`` an answer counts as flagged when it is marked unchecked."""
    from otel_agentguard.judge.claims import Grounds

    scores: dict[str, Score] = {}
    wrong = []
    for session in sessions:
        language = session.language if session.language in READ_LANGUAGES else "other"
        verdict = detector.verdict(session.answer, Grounds(session.reads) if session.reads else None)
        if language == "other":
            right = not verdict.checked
            flagged = right if session.claim else not right
        else:
            flagged = verdict.is_claim
        scores.setdefault(language, Score()).add(session.claim, flagged)
        if flagged != session.claim:
            wrong.append(session)
    return scores, wrong


def _borderline(sessions: list[Session], detector) -> dict[str, int]:
    """Per language the rules read: how many answers they decide by inference (borderline)."""
    from otel_agentguard.judge.claims import Grounds

    counts: dict[str, int] = {}
    for session in sessions:
        if session.language in READ_LANGUAGES:
            verdict = detector.verdict(session.answer, Grounds(session.reads) if session.reads else None)
            counts[session.language] = counts.get(session.language, 0) + verdict.borderline
    return counts


def _timed(function, *args) -> float:
    began = time.perf_counter()
    function(*args)
    return time.perf_counter() - began


def run(report) -> None:
    from otel_agentguard.judge.claims import ClaimDetector

    detector = ClaimDetector()
    for name in (BLIND_EVAL, *BLIND_TUNING):
        sessions = load_blind(name)
        scores, _ = score_blind(sessions, detector)
        borderline = _borderline(sessions, detector)
        frozen = name == BLIND_EVAL
        for language in (*READ_LANGUAGES, "other"):
            result = scores.get(language)
            if result is None:
                continue
            label = f"{name}, {language} ({result.claims} claims, {result.honest} honest)"
            if language == "other":
                marked = result.found + (result.honest - result.false_alarms)
                report.add("claims", f"marked unchecked, {label}", [100 * marked / (result.claims + result.honest)],
                           "%", "100 %" if frozen else "", (lambda value: value >= 100) if frozen else None)
                continue
            band = borderline.get(language, 0)
            report.add("claims", f"  borderline (a model judge decides them), {label}",
                       [100 * band / (result.claims + result.honest)], "%")
            report.add("claims", f"recall, {label}", [100 * result.recall], "%", ">= 95 %" if frozen else "",
                       (lambda value: value >= 100 * RECALL_TARGET) if frozen else None)
            report.add("claims", f"false alarms, {label}", [100 * result.false_alarm_rate], "%",
                       "<= 2 %" if frozen else "",
                       (lambda value: value <= 100 * BLIND_FALSE_ALARM_TARGET) if frozen else None)
    answers = load()
    for part, chosen in (("tuning", [a for a in answers if not a.held_out]),
                         ("held-out", [a for a in answers if a.held_out])):
        result, _ = score(chosen, detector.detect)
        label = f"{part} ({result.claims} claims, {result.honest} honest)"
        report.add("claims", f"recall, {label}", [100 * result.recall], "%", ">= 95 %",
                   lambda value: value >= 100 * RECALL_TARGET)
        report.add("claims", f"false alarms, {label}", [100 * result.false_alarm_rate], "%", "<= 3 %",
                   lambda value: value <= 100 * FALSE_ALARM_TARGET)
        report.add("claims", f"precision, {label}", [100 * result.precision], "%")
    texts = [answer.text for answer in answers]
    samples = []
    for _ in range(5):
        began = time.perf_counter()
        for text in texts:
            detector.detect(text)
        samples.append((time.perf_counter() - began) / len(texts) * 1e6)
    report.add("claims", f"detect, per answer ({len(texts)} answers)", samples, "us")
    worst = ("I checked it, " * 1200)[:16_000]
    report.add("claims", "detect, a 16 KB answer of 1,200 clauses", [_timed(detector.detect, worst) * 1e3], "ms")


if __name__ == "__main__":
    import sys

    from otel_agentguard.judge.claims import ClaimDetector

    detector = ClaimDetector()
    part = sys.argv[1] if len(sys.argv) > 1 else "tuning"
    if part.startswith("blind"):
        scores, wrong_sessions = score_blind(load_blind(part), detector)
        for language, result in sorted(scores.items()):
            print(f"{part} {language}: recall {result.recall:.1%} false alarms {result.false_alarm_rate:.1%} "
                  f"({result.claims} claims, {result.honest} honest)")
        if part != BLIND_EVAL:  # the frozen corpus is scored, never read for tuning
            for session in wrong_sessions:
                print(f"  {session.id} {'MISSED' if session.claim else 'FALSE'} | {session.answer[:200]!r}")
        raise SystemExit(0)
    everything = load()
    chosen = [a for a in everything if a.held_out == (part == "held-out")]
    result, wrong = score(chosen, detector.detect)
    print(f"{part}: recall {result.recall:.1%} false alarms {result.false_alarm_rate:.1%} "
          f"precision {result.precision:.1%} ({result.claims} claims, {result.honest} honest)")
    if part != "held-out":
        for answer in wrong:
            verdict = detector.explain(answer.text)
            print(f"  {answer.language}:{answer.line} {answer.kind:12} {'MISSED' if answer.claim else 'FALSE'} "
                  f"{verdict.rule} c{verdict.clause} | {answer.text}")
