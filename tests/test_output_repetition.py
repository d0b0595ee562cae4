"""output_repetition: the chunker, the detector, the labelled set, the probe and its policy keys."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import PolicyError, Profile, parse_policy
from otel_agentguard.judge.repetition import (
    MAX_CHUNK_CHARS,
    RepetitionMonitor,
    RepetitionSummary,
    summarize,
)
from otel_agentguard.judge.session_judge import SessionJudge
from otel_agentguard.judge.steps import MODEL, Step, step_from_attributes

ANSWERS = Path(__file__).parent / "data" / "output_repetition" / "answers.jsonl"
LATEST_CATCH = 1.3  # every chanting answer is caught before it is 30% longer than where it began to repeat


def labelled() -> list[dict]:
    return [json.loads(line) for line in ANSWERS.read_text(encoding="utf-8").splitlines()]


# --- the labelled set ---------------------------------------------------------------------------


def test_the_labelled_set_is_large_and_balanced():
    rows = labelled()
    assert len(rows) >= 100
    chanting = [r for r in rows if r["label"] == "chanting"]
    assert len(chanting) * 2 == len(rows)
    assert {r["kind"] for r in chanting} == {"sentence", "paragraph", "counter", "chinese", "code"}
    assert {"table", "checklist", "poem", "steps"} <= {r["kind"] for r in rows if r["label"] == "honest"}
    assert all(len(r["text"]) >= (400 if r["kind"] == "chinese" else 1000) for r in rows)


def test_every_chanting_answer_is_caught_early_and_no_honest_answer_is_flagged():
    profile = Profile()
    late, missed, flagged = [], [], []
    for row in labelled():
        summary = summarize(row["text"], profile.output_max_repeats, profile.output_max_repeated_chars)
        found = summary.finding
        if row["label"] == "honest":
            if found is not None:
                flagged.append((row["id"], found))
            assert not summary.exceeds(profile.output_max_repeats, profile.output_max_repeated_chars)
        elif found is None:
            missed.append(row["id"])
        elif found.end_offset > LATEST_CATCH * row["onset"]:
            late.append((row["id"], row["onset"], found))
        else:
            # The trigger lies inside the repetition, never in the honest part before it.
            assert found.first_offset < found.trigger_offset and row["onset"] <= found.trigger_offset, row["id"]
    assert not flagged, f"honest answers flagged: {flagged}"
    assert not missed, f"chanting answers missed: {missed}"
    assert not late, f"caught too late: {late}"


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streaming_in_any_pieces_gives_the_same_summary_as_the_whole_text(seed):
    rng = random.Random(seed)
    for row in labelled()[seed::7]:
        text = row["text"]
        monitor = RepetitionMonitor()
        position = 0
        while position < len(text):
            size = rng.choice((1, 2, 3, 5, 12, 40))
            monitor.feed(text[position:position + size])
            position += size
        assert monitor.summary() == summarize(text), row["id"]


# --- the chunker ----------------------------------------------------------------------------------


def test_a_sentence_said_four_times_fires_at_the_fourth():
    intro = "Connection pools should be small. " * 1 + "Measure before you tune anything at all. "
    unit = "I will check the configuration once more to be sure. "
    summary = summarize(intro + unit * 6)
    found = summary.finding
    assert found is not None and found.period == 1 and found.copies == 4
    assert found.first_offset == len(intro)
    assert found.trigger_offset == len(intro) + 3 * len(unit)
    assert summary.max_repeats == 6


def test_a_paragraph_said_again_fires_within_its_second_copy():
    paragraph = ("The client gives up after five seconds. The server needs ten seconds under load. "
                 "Raise the client timeout to fifteen seconds. Then run the load test again and compare. "
                 "Keep the old value in the change log so the rollback is a one-line change. "
                 "Tell the team in the release channel before you start.\n\n")
    found = summarize("Here is what I found.\n\n" + paragraph * 3).finding
    assert found is not None and found.period == 6 and found.copies == 2
    assert found.end_offset < len("Here is what I found.\n\n") + 2 * len(paragraph)


def test_a_counter_that_changes_still_repeats():
    text = "".join(f"Attempt {n}: checking whether the deployment finished. " for n in range(1, 20))
    found = summarize(text).finding
    assert found is not None and found.period == 1


def test_chinese_without_any_punctuation_is_cut_by_size_and_caught():
    text = "以下是具体建议，请仔细阅读。" + "我们需要再检查一下这个问题的原因" * 40
    found = summarize(text).finding
    assert found is not None
    assert found.end_offset < 14 + 16 * 16


def test_code_repeating_a_line_forever_is_caught_but_similar_lines_are_not():
    looping = "```python\nresults = []\n" + "results.append(compute(data))\n" * 30 + "```\n"
    assert summarize(looping).finding is not None
    counting = "```python\n" + "".join(f"table[{n}] = {n * n}  # square of {n}\n" for n in range(30)) + "```\n"
    assert summarize(counting).finding is None  # code is compared verbatim: the numbers differ


def test_table_rows_with_repeated_cells_do_not_count():
    rows = "".join(f"| Feature {name} | Yes | Yes | No |\n" for name in "ABCDEFGHIJ")
    text = "| Feature | One | Two | Three |\n|---|---|---|---|\n" + rows
    assert summarize(text).finding is None
    template = "| Step | Owner | Done |\n|---|---|---|\n" + "| | | [ ] |\n" * 10  # rows left to fill in
    assert summarize(template).chunks == 1 and summarize(template).finding is None


def test_decimal_points_and_abbreviations_do_not_end_a_sentence():
    text = "Version 3.14.2 fixes it, e.g.the parser. " * 1
    assert summarize(text).chunks == 1


def test_memory_is_bounded_whatever_the_stream():
    monitor = RepetitionMonitor()
    for n in range(20_000):
        monitor.feed("没有标点的文字一直写下去" if n % 2 else "endless words without any stop ")
        assert len(monitor.chunker._buffer) <= 2 * MAX_CHUNK_CHARS
    assert monitor.chars > 400_000
    assert len(monitor.chunker.detector._recent) <= 8


# --- the span attribute ---------------------------------------------------------------------------


def test_the_attribute_round_trips_and_holds_no_text():
    text = "Intro sentence that sets the scene for us. " + "Let me verify the result one more time. " * 8
    summary = summarize(text)
    raw = summary.attribute
    assert "verify" not in raw and "Intro" not in raw
    assert RepetitionSummary.from_attribute(raw) == summary


@pytest.mark.parametrize("raw", [None, 3, "", "not json", "[]", '{"chunks": -1, "max_repeats": 2}',
                                 '{"chunks": 1}', '{"chunks": 1, "max_repeats": true}', "x" * 5000,
                                 '{"chunks": 1, "max_repeats": 2, "finding": [1, 2]}'])
def test_a_malformed_attribute_reads_as_absent(raw):
    assert RepetitionSummary.from_attribute(raw) is None


# --- the probe --------------------------------------------------------------------------------------


def model_step(sequence: int, summary: RepetitionSummary | None) -> Step:
    return Step("s", sequence, MODEL, "gpt-4o", output_repetition=summary, finish_reasons=("length",))


def test_the_probe_fires_once_with_the_step_and_the_offsets():
    policy = parse_policy("")
    judge = SessionJudge("s", policy)
    chanting = summarize("Opening words of a fine answer here. " + "This is the final answer. " * 10)
    assert judge.observe(model_step(1, summarize("A calm answer that says one thing once."))) == []
    alerts = judge.observe(model_step(2, chanting))
    assert [a.probe for a in alerts] == [A.OUTPUT_REPETITION_PROBE]
    alert = alerts[0]
    assert alert.evidence == (2,) and alert.sequence == 2
    assert alert.offsets == (chanting.finding.first_offset, chanting.finding.trigger_offset)
    assert "This is the final answer" not in alert.detail
    assert judge.observe(model_step(3, chanting)) == []
    assert judge.finish().stop_reason == A.OUTPUT_REPETITION_PROBE


def test_the_profile_decides_and_a_summary_checked_with_other_thresholds_still_counts():
    text = "Opening words of a fine answer here. " + "This is the final answer. " * 5  # five copies
    strict = summarize(text)  # checked with the defaults: 3 copies allowed
    lenient = parse_policy("[profiles.default]\noutput_max_repeats = 6\n")
    assert SessionJudge("s", lenient).observe(model_step(1, strict)) == []
    stricter = parse_policy("[profiles.default]\noutput_max_repeats = 2\n")
    alerts = SessionJudge("s", stricter).observe(model_step(1, strict))
    assert [a.probe for a in alerts] == [A.OUTPUT_REPETITION_PROBE] and alerts[0].offsets is None


def test_the_probe_can_be_disabled():
    policy = parse_policy('[profiles.default]\ndisabled_probes = ["output_repetition"]\n')
    chanting = summarize("This is the final answer. " * 10)
    assert SessionJudge("s", policy).observe(model_step(1, chanting)) == []


def test_a_step_reads_the_attribute_or_recomputes_from_captured_text():
    policy = parse_policy("")
    text = "Opening words of a fine answer here. " + "This is the final answer. " * 10
    base = {A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_RESPONSE_FINISH_REASONS: ["length"]}
    recorded = step_from_attributes({**base, A.OUTPUT_REPETITION: summarize(text).attribute},
                                    kind=MODEL, session_id="s", sequence=1, policy=policy)
    captured = step_from_attributes(
        {**base, A.GEN_AI_OUTPUT_MESSAGES: json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": text}]}])},
        kind=MODEL, session_id="s", sequence=1, policy=policy)
    assert recorded.output_repetition == captured.output_repetition == summarize(text)
    assert step_from_attributes(base, kind=MODEL, session_id="s", sequence=1, policy=policy).output_repetition is None


# --- policy keys ------------------------------------------------------------------------------------


def test_policy_keys_have_defaults_and_are_validated():
    profile = parse_policy("[profiles.default]\noutput_max_repeats = 5\noutput_max_repeated_chars = 400\n"
                           "[profiles.poetry]\noutput_max_repeats = 8\n").profiles
    assert (profile["default"].output_max_repeats, profile["default"].output_max_repeated_chars) == (5, 400)
    assert (profile["poetry"].output_max_repeats, profile["poetry"].output_max_repeated_chars) == (8, 400)
    assert (Profile().output_max_repeats, Profile().output_max_repeated_chars) == (3, 240)
    with pytest.raises(PolicyError, match=r"<policy>:2: profiles.default.output_max_repeats: expected an integer from 2 to"):
        parse_policy("[profiles.default]\noutput_max_repeats = 1\n")
    with pytest.raises(PolicyError, match="output_max_repeated_chars: expected a positive integer"):
        parse_policy("[profiles.default]\noutput_max_repeated_chars = 0\n")
    assert parse_policy('[escalation]\noutput_repetition = ["observe"]\n').escalation["output_repetition"] == ("observe",)
