"""``handoff_loop``: control bouncing between the same two agents, with nothing done in between.

The real OpenAI Agents SDK's triage/billing ping-pong is judged in
tests/instrumentation/test_openai_agents_instrumentation.py, live and on replay; here the
probe's edges, through trajectory files (the same judge).
"""

from __future__ import annotations

import json

import pytest

from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.replay.runner import replay_files

POLICY = parse_policy('[tools.refund]\neffect = "write"\n[profiles.default]\nmax_steps = 50\n')


def judge(tmp_path, agents: list[str], *, write_after: int | None = None, policy=POLICY):
    steps = []
    for index, agent in enumerate(agents):
        steps.append({"model": "gpt-4o", "tool_calls": 1, "agent": agent})
        if write_after == index:
            steps.append({"tool": "refund", "args": {"order": "A1"}, "result": "ok", "agent": agent})
    steps.append({"answer": "Please contact support.", "agent": agents[-1]})
    path = tmp_path / "session.json"
    path.write_text(json.dumps({"sessions": [{"id": "s", "steps": steps}]}))
    ((_, verdict),) = replay_files([path], policy)
    return verdict


def test_four_handoffs_between_two_agents_are_a_loop(tmp_path):
    verdict = judge(tmp_path, ["triage", "billing", "triage", "billing", "triage"])
    assert verdict.stop_reason == "handoff_loop"
    (alert,) = verdict.alerts
    assert alert.evidence == (2, 3, 4, 5) and "between billing and triage 4 times" in alert.detail


def test_three_handoffs_are_not_yet(tmp_path):
    assert judge(tmp_path, ["triage", "billing", "triage", "billing"]).stop_reason == "completed"


def test_a_write_that_succeeds_in_between_starts_the_count_again(tmp_path):
    verdict = judge(tmp_path, ["triage", "billing", "triage", "billing", "triage"], write_after=2)
    assert verdict.stop_reason == "completed"


def test_a_supervisor_routing_to_the_same_workers_in_turn_is_a_loop(tmp_path):
    verdict = judge(tmp_path, ["supervisor", "billing", "supervisor", "shipping", "supervisor", "billing"])
    assert verdict.stop_reason == "handoff_loop" and verdict.alerts[0].evidence == (2, 3, 4, 5, 6)


def test_a_pipeline_through_many_agents_is_no_loop(tmp_path):
    assert judge(tmp_path, ["triage", "billing", "refunds", "billing", "shipping", "triage"]).stop_reason \
        == "completed"


@pytest.mark.parametrize(("bounces", "expected"), [(2, "handoff_loop"), (5, "completed")])
def test_the_policy_sets_how_many_bounces(tmp_path, bounces, expected):
    policy = parse_policy(f'[profiles.default]\nhandoff_bounces = {bounces}\nmax_steps = 50\n')
    assert judge(tmp_path, ["a", "b", "a", "b", "a"], policy=policy).stop_reason == expected


def test_a_bad_agent_name_is_named_in_the_file(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"sessions": [{"id": "s", "steps": [{"model": "m", "agent": 7}]}]}))
    from otel_agentguard.replay.errors import InputError

    with pytest.raises(InputError, match="agent: expected the agent's name"):
        replay_files([path], POLICY)
