"""Traces of other instrumentations are judged: recorded with the real packages, replayed, and live.

Per instrumentation, three agent runs: a loop, a clean run and a fake completion.
Recorded with only that instrumentation active and replayed from OTLP JSON, each
gets its verdict; run again with the guard's processor on the same provider, each
gets the same verdict, with the same alerts at the same sequence numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from foreign_agents import FOREIGN_PYTHON, MISSING, POLICY, SCENARIOS, Judged, record_and_judge_live, replay, tool_steps

from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.replay.runner import replay_files

needs_foreign = pytest.mark.skipif(FOREIGN_PYTHON is None, reason=MISSING)


@needs_foreign
@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("instrumentation", ["openai-v2", "openllmetry", "openinference", "pydantic-ai", "openai-v2+tool-spans"])
def test_foreign_trace_is_judged_on_replay_and_live_alike(instrumentation, scenario, tmp_path):
    check_foreign_trace(instrumentation, scenario, tmp_path)


@needs_foreign
@pytest.mark.parametrize("instrumentation", ["openai-v2", "openllmetry", "openinference"])
def test_streamed_responses_are_judged_alike(instrumentation, tmp_path):
    check_foreign_trace(f"{instrumentation}+stream", "loop", tmp_path)


def check_foreign_trace(instrumentation, scenario, tmp_path):
    wanted = SCENARIOS[scenario]
    trace, live = record_and_judge_live(instrumentation, wanted, tmp_path)

    (replayed,) = replay(trace)

    assert replayed.stop_reason == wanted.stop_reason
    # every tool call is one step (derived, or a real tool span: Pydantic AI's, @ag.tool's), plus the answer
    assert replayed.steps == wanted.tool_steps + 1
    assert replayed.tokens > 0
    if wanted.stop_reason == "tool_loop":
        probe, sequence, evidence = replayed.alerts[0]
        assert probe == "tool_loop" and len(evidence) == 3 and sequence == evidence[-1]
    assert live == [replayed]  # same verdict, alerts at the same sequence numbers
    assert replay(tmp_path / "live.jsonl") == live  # and the guard's own numbering replays the same
    # each tool step knows its call (name, arguments) and what it returned (from the next call's input)
    steps = tool_steps(trace)
    assert [name for name, *_ in steps] == [c.name for t in wanted.turns for c in t.tool_calls]
    assert all(args is not None and result is not None and empty is False for _, args, result, empty in steps)
    if scenario == "loop":
        assert len(set(steps)) == 1


@needs_foreign
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_openai_v2_stable_conventions_show_model_calls_only(scenario, tmp_path):
    """On the v1.30 conventions openai-v2 writes prompts, answers and tool calls as log
    events, not span attributes: the spans carry model calls, tokens and finish reasons,
    so a run is judged for its budgets and ends ``completed`` whatever it did."""
    wanted = SCENARIOS[scenario]
    trace, live = record_and_judge_live("openai-v2-stable", wanted, tmp_path)

    (replayed,) = replay(trace)

    assert replayed.stop_reason == "completed"
    assert replayed.alerts == []
    assert replayed.steps == 1  # the final answer; no tool call is visible
    assert replayed.tokens == len(wanted.turns) * (120 + 30)
    # Live, model calls alone with no session id get no verdict span (only the metrics count them).
    assert live == []


@needs_foreign
@pytest.mark.parametrize("instrumentation", ["openai-v2", "openllmetry", "openinference", "pydantic-ai"])
def test_with_content_capture_off_only_counts_and_budgets_are_seen(instrumentation, tmp_path):
    """Without content no arguments or results are on the spans: the loop cannot be told from
    progress, but model calls, tokens, the final answer and the budgets still are."""
    loop = SCENARIOS["loop"]
    trace, live = record_and_judge_live(f"{instrumentation}-no-content", loop, tmp_path)

    (replayed,) = replay(trace)
    (budgeted,) = replay(trace, parse_policy("[profiles.default]\nmax_model_calls = 5\n", "<budget>"))

    assert replayed.stop_reason == "completed" and replayed.alerts == []
    # Live, model calls alone with no session id get no verdict span (only the metrics count them);
    # OpenInference's session.id (using_session) and Pydantic AI's tool spans make it a judged run.
    assert live == ([replayed] if instrumentation in ("pydantic-ai", "openinference") else [])
    assert budgeted.stop_reason == "budget_exceeded"
    if instrumentation == "pydantic-ai":
        # its own tool spans still name every call (no arguments): steps are counted
        assert replayed.steps == loop.tool_steps + 1
        assert all(args is None and result is None for _, args, result, _ in tool_steps(trace))
    else:
        assert replayed.steps == 1  # the final answer: no tool call can be read back
        assert replayed.tokens == len(loop.turns) * (120 + 30)


LEGACY = Path(__file__).resolve().parents[1] / "data" / "foreign"


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_older_openllmetry_flattened_attributes_are_read(scenario):
    """Recorded with OpenLLMetry 0.52.6 (``gen_ai.completion.N.tool_calls.M.*``, tool-role
    ``gen_ai.prompt.N.*``; see the data folder's README): replay agrees with the live run."""
    trace = LEGACY / f"openllmetry-0.52.6-{scenario}.jsonl"
    live = json.loads((LEGACY / "openllmetry-0.52.6-live.json").read_text())[scenario]

    (replayed,) = replay(trace)

    assert replayed.stop_reason == SCENARIOS[scenario].stop_reason
    assert [replayed] == [Judged(j["stop_reason"], [(a[0], a[1], tuple(a[2])) for a in j["alerts"]], j["steps"],
                                 j["tokens"]) for j in live]
    steps = tool_steps(trace)
    assert len(steps) == SCENARIOS[scenario].tool_steps
    assert all(args is not None and result is not None for _, args, result, _ in steps)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_traceloop_sdk_association_property_names_the_session(scenario):
    """Recorded under the Traceloop SDK 0.52.6 with ``set_association_properties({"session_id": ...})``
    (see the data folder's README): the property is the session, and replay agrees with the live run."""
    trace = LEGACY / f"traceloop-{scenario}.jsonl"
    (live,) = json.loads((LEGACY / f"traceloop-{scenario}-live.json").read_text())

    ((session, verdict),) = replay_files([trace], POLICY)

    assert session.session_id == live["session_id"] == f"order-A1-{scenario}"
    assert verdict.stop_reason == live["stop_reason"] == SCENARIOS[scenario].stop_reason
    assert [[a.probe, a.sequence, list(a.evidence)] for a in verdict.alerts] == live["alerts"]
    assert (verdict.steps, verdict.tokens) == (live["steps"], live["tokens"])
