"""The bundled example sessions as a regression suite (four support sessions and more stall shapes)."""

from __future__ import annotations

import pytest

from otel_agentguard.replay import replay_files
from otel_agentguard.replay.cli import EXAMPLES


def _verdicts(example_policy, name: str, profile: str | None = None):
    return {session.session_id: verdict for session, verdict in replay_files([EXAMPLES / name], example_policy, profile)}


def _alerts(verdict) -> list[tuple[str, int, tuple[int, ...]]]:
    return [(a.probe, a.sequence, a.evidence) for a in verdict.alerts]


@pytest.fixture
def support_sessions(example_policy):
    return _verdicts(example_policy, "support_sessions.yaml")


@pytest.fixture
def more_shapes(example_policy):
    return _verdicts(example_policy, "more_shapes.yaml")


def test_support_sessions_has_four_sessions(support_sessions):
    assert sorted(support_sessions) == ["A", "B", "C", "D"]


def test_support_sessions_session_a_loop_no_progress_and_fake_completion(support_sessions):
    verdict = support_sessions["A"]
    assert _alerts(verdict) == [
        ("tool_loop", 5, (3, 4, 5)),
        ("no_progress", 7, (4, 5, 6, 7)),
        ("fake_completion", 8, (8,)),
    ]
    assert verdict.stop_reason == "fake_completion"
    loop = verdict.alerts[0]
    assert [verdict.label(seq) for seq in loop.evidence] == ["s03", "s04", "s05"]
    assert all(a.detail and a.disposal for a in verdict.alerts)
    assert verdict.steps == 8
    assert verdict.tokens == 1310


def test_support_sessions_session_b_fake_completion_only(support_sessions):
    verdict = support_sessions["B"]
    assert _alerts(verdict) == [("fake_completion", 4, (4,))]
    assert verdict.stop_reason == "fake_completion"
    assert verdict.label(4) == "b04"


def test_support_sessions_session_c_completes_without_alerts(support_sessions):
    verdict = support_sessions["C"]
    assert verdict.alerts == ()
    assert verdict.stop_reason == "completed"


def test_support_sessions_session_d_passes_under_its_long_chain_profile(support_sessions):
    verdict = support_sessions["D"]
    assert verdict.profile == "long_chain"
    assert verdict.alerts == ()
    assert verdict.stop_reason == "completed"
    assert verdict.steps == 15


def test_support_sessions_session_d_exceeds_budget_under_default_profile(example_policy):
    verdict = _verdicts(example_policy, "support_sessions.yaml", profile="default")["D"]
    assert verdict.profile == "default"
    assert [(a.probe, a.budget_kind, a.sequence, a.evidence) for a in verdict.alerts] == [
        ("budget_exceeded", "steps", 13, (13,)),
        ("budget_exceeded", "tokens", 14, (14,)),
    ]
    assert verdict.stop_reason == "budget_exceeded"


def test_support_sessions_other_sessions_unchanged_under_default_profile(example_policy, support_sessions):
    forced = _verdicts(example_policy, "support_sessions.yaml", profile="default")
    for sid in ("A", "B", "C"):
        assert _alerts(forced[sid]) == _alerts(support_sessions[sid])
        assert forced[sid].stop_reason == support_sessions[sid].stop_reason


def test_more_shapes_e_cycle_and_no_progress(more_shapes):
    verdict = more_shapes["E"]
    assert sorted(_alerts(verdict)) == [
        ("cycle", 9, tuple(range(1, 10))),
        ("no_progress", 7, (4, 5, 6, 7)),
    ]
    assert verdict.stop_reason == "no_progress"  # the first alert; no fake completion


def test_more_shapes_f_error_streak(more_shapes):
    verdict = more_shapes["F"]
    assert _alerts(verdict) == [("error_streak", 4, (1, 2, 3, 4))]
    assert verdict.stop_reason == "error_streak"


def test_more_shapes_g_poll_then_explicit_finish(more_shapes):
    verdict = more_shapes["G"]
    assert verdict.alerts == ()
    assert verdict.stop_reason == "explicit_finish"


def test_more_shapes_h_reordered_sources_are_a_tool_loop(more_shapes):
    verdict = more_shapes["H"]
    assert _alerts(verdict) == [("tool_loop", 3, (1, 2, 3))]
    assert verdict.stop_reason == "tool_loop"


@pytest.mark.parametrize("name", ["support_sessions.yaml", "more_shapes.yaml"])
def test_examples_meet_their_own_labels(example_policy, name):
    for session, verdict in replay_files([EXAMPLES / name], example_policy):
        assert session.expect is not None, session.session_id
        probes = {a.probe for a in verdict.alerts}
        if session.expect.must_pass:
            assert not verdict.stalled, (session.session_id, verdict.stop_reason)
        else:
            assert set(session.expect.must_stop) <= probes, (session.session_id, probes)
