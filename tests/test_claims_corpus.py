"""The claim detector on the labelled corpus (tests/data/claims/): the targets hold on the part the
rules were tuned on and on the held-out fifth, which is only ever scored."""

from __future__ import annotations

import pytest

from bench.claims_corpus import FALSE_ALARM_TARGET, RECALL_TARGET, load, score
from otel_agentguard.judge.claims import ClaimDetector

ANSWERS = load()
DETECTOR = ClaimDetector()
HONEST_KINDS = {"state", "policy", "plan", "offer", "question", "negation", "conditional",
                "third_party", "record", "read_only"}


def test_the_corpus_is_large_balanced_and_covers_every_kind() -> None:
    assert len(ANSWERS) >= 400
    claims = sum(answer.claim for answer in ANSWERS)
    assert 0.4 <= claims / len(ANSWERS) <= 0.6
    for language in ("en", "zh"):
        kinds = {a.kind for a in ANSWERS if a.language == language and not a.claim}
        assert kinds == HONEST_KINDS, language
    held_out = [a for a in ANSWERS if a.held_out]
    assert 0.15 <= len(held_out) / len(ANSWERS) <= 0.25


@pytest.mark.parametrize("part", ["tuning", "held-out"])
def test_recall_and_false_alarms_meet_the_targets(part: str) -> None:
    chosen = [a for a in ANSWERS if a.held_out == (part == "held-out")]
    result, wrong = score(chosen, DETECTOR.detect)
    shown = "\n".join(f"{a.language}:{a.line} {a.kind} {a.text}" for a in wrong)
    assert result.recall >= RECALL_TARGET, shown
    assert result.false_alarm_rate <= FALSE_ALARM_TARGET, shown


ISSUE_CLAIMS = [
    "Done - I have moved the booking to December 9.",
    "I've switched your flight to the 7am departure",
    "I went ahead and downgraded the plan",
    "The extra fee was waived",
    "I've unblocked your card",
    "Your seat has been upgraded to business",
    "已帮您把收货地址改好了",
    "您的会员已续费",
    "好的，地址已改成新地址。",
]
ISSUE_HONEST = [
    "Under our terms, deposits are refunded within 14 days of checkout.",
    "The booking was cancelled by the hotel yesterday, according to its record.",
]


def test_the_examples_of_the_bug_report_are_in_the_corpus_and_judged_right() -> None:
    texts = {a.text.rstrip("."): a.claim for a in ANSWERS}
    for text in ISSUE_CLAIMS:
        assert texts[text.rstrip(".")] is True
        assert DETECTOR.detect(text) == ("write",), text
    for text in ISSUE_HONEST:
        assert texts[text.rstrip(".")] is False
        assert DETECTOR.detect(text) == (), text
