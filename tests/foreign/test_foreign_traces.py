"""Traces of other instrumentations are judged: recorded with the real packages, replayed, and live.

Per instrumentation, three agent runs: a loop, a clean run and a fake completion.
Recorded with only that instrumentation active and replayed from OTLP JSON, each
gets its verdict; run again with the guard's processor on the same provider, each
gets the same verdict, with the same alerts at the same sequence numbers.
"""

from __future__ import annotations

import pytest
from foreign_agents import SCENARIOS, record_and_judge_live, replay

pytest.importorskip("opentelemetry.instrumentation.openai_v2")
pytest.importorskip("opentelemetry.instrumentation.openai")
pytest.importorskip("openinference.instrumentation.openai")
pytest.importorskip("pydantic_ai")


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("instrumentation", ["openai-v2", "openllmetry", "openinference", "pydantic-ai"])
def test_foreign_trace_is_judged_on_replay_and_live_alike(instrumentation, scenario, tmp_path):
    wanted = SCENARIOS[scenario]
    trace, live = record_and_judge_live(instrumentation, wanted, tmp_path)

    (replayed,) = replay(trace)

    assert replayed.stop_reason == wanted.stop_reason
    # every tool call is one step (derived, or Pydantic AI's own tool span), plus the answer
    assert replayed.steps == wanted.tool_steps + 1
    assert replayed.tokens > 0
    if wanted.stop_reason == "tool_loop":
        probe, sequence, evidence = replayed.alerts[0]
        assert probe == "tool_loop" and len(evidence) == 3 and sequence == evidence[-1]
    assert live == [replayed]  # same verdict, alerts at the same sequence numbers


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
    assert live == [replayed]
