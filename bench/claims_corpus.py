"""Section ``claims``: precision, recall and false alarms of the claim detector on the labelled
corpus (``tests/data/claims/``), for the part the rules were tuned on and the held-out fifth."""

from __future__ import annotations

import csv
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "claims"
RECALL_TARGET = 0.95
FALSE_ALARM_TARGET = 0.03


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
        if answer.claim:
            result.claims += 1
            result.found += flagged
        else:
            result.honest += 1
            result.false_alarms += flagged
        if flagged != answer.claim:
            wrong.append(answer)
    return result, wrong


def _timed(function, *args) -> float:
    began = time.perf_counter()
    function(*args)
    return time.perf_counter() - began


def run(report) -> None:
    from otel_agentguard.judge.claims import ClaimDetector

    detector = ClaimDetector()
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
    everything = load()
    part = sys.argv[1] if len(sys.argv) > 1 else "tuning"
    chosen = [a for a in everything if a.held_out == (part == "held-out")]
    result, wrong = score(chosen, detector.detect)
    print(f"{part}: recall {result.recall:.1%} false alarms {result.false_alarm_rate:.1%} "
          f"precision {result.precision:.1%} ({result.claims} claims, {result.honest} honest)")
    if part != "held-out":
        for answer in wrong:
            verdict = detector.explain(answer.text)
            print(f"  {answer.language}:{answer.line} {answer.kind:12} {'MISSED' if answer.claim else 'FALSE'} "
                  f"{verdict.rule} c{verdict.clause} | {answer.text}")
