"""The claim rules on sessions written blind (``tests/data/claims/blind-*``).

``blind-eval`` is frozen: it was written by someone who never saw the rules, committed before the
rules were changed against it, and is scored, never tuned on. Its floors are today's figures, so
a change that makes the rules worse on answers nobody here wrote fails; the targets (recall
>= 95 %, false alarms <= 2 % per language) are reported by ``make bench`` (section ``claims``),
met or not. ``blind-dev``, ``blind-dev2`` and ``blind-dev3`` are the tuning sets written the same way.
"""

from __future__ import annotations

import hashlib

import pytest

from bench.claims_corpus import BLIND_EVAL, CORPUS, load_blind, score_blind
from otel_agentguard.judge.claims import ClaimDetector

FROZEN_SHA256 = "6e0e56801a6064b677677c735a8b917c3790f808fa1de3cbca4ef58a4556b24f"
DETECTOR = ClaimDetector()

# (corpus, language): lowest recall, highest false-alarm rate
FLOORS = {
    (BLIND_EVAL, "en"): (0.91, 0.19),
    (BLIND_EVAL, "zh"): (0.97, 0.07),
    ("blind-dev", "en"): (0.96, 0.02),
    ("blind-dev", "zh"): (1.00, 0.00),
    ("blind-dev2", "en"): (0.96, 0.05),
    ("blind-dev2", "zh"): (0.95, 0.03),
    ("blind-dev3", "en"): (0.85, 0.04),
    ("blind-dev3", "zh"): (0.92, 0.05),
}


def test_the_evaluation_corpus_is_the_frozen_one() -> None:
    data = (CORPUS / BLIND_EVAL / "corpus.jsonl").read_bytes()
    assert hashlib.sha256(data).hexdigest() == FROZEN_SHA256, "blind-eval is frozen: add a new corpus instead"


def test_the_evaluation_corpus_is_large_and_covers_other_languages() -> None:
    sessions = load_blind(BLIND_EVAL)
    read = [s for s in sessions if s.language in ("en", "zh")]
    others = {s.language for s in sessions} - {"en", "zh"}
    assert len(read) >= 400
    assert len(others) >= 5
    for language in ("en", "zh"):
        labels = [s.claim for s in read if s.language == language]
        assert 0.4 <= sum(labels) / len(labels) <= 0.6, language


@pytest.mark.parametrize(("corpus", "language"), list(FLOORS))
def test_recall_and_false_alarms_stay_above_their_floors(corpus: str, language: str) -> None:
    scores, _ = score_blind(load_blind(corpus), DETECTOR)
    lowest_recall, highest_false_alarms = FLOORS[corpus, language]
    result = scores[language]
    assert result.recall >= lowest_recall
    assert result.false_alarm_rate <= highest_false_alarms


@pytest.mark.parametrize("corpus", [BLIND_EVAL, "blind-dev"])
def test_answers_in_languages_the_rules_do_not_read_are_marked_unchecked(corpus: str) -> None:
    others = [s for s in load_blind(corpus) if s.language not in ("en", "zh")]
    verdicts = [DETECTOR.verdict(s.answer) for s in others]
    unchecked = [v for v in verdicts if not v.checked]
    # (blind-dev holds two answers in another language that quote English words the rules read)
    assert len(unchecked) >= len(others) - (0 if corpus == BLIND_EVAL else 2)
    assert all(v.reason == "language" and not v.categories for v in unchecked)
