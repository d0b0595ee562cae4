"""Each stall probe at its edges, fed plain Steps through the real SessionJudge.

Thresholds come from the profile; "threshold minus one" must stay quiet and the
threshold must fire on the step that crosses it, with evidence given as sequence
numbers (never positions), a detail and a disposal, and at most once per session.
"""

from __future__ import annotations

import pytest

from otel_agentguard.judge.policy import Policy, Profile, parse_policy
from otel_agentguard.judge.probes import Alert
from otel_agentguard.judge.session_judge import SessionJudge
from otel_agentguard.judge.steps import MODEL, TOOL, Step

SID = "probe-session"
SECOND = 1_000_000_000
T0 = 1_760_000_000 * SECOND  # a realistic epoch timestamp in ns
_AUTO = object()


# --- helpers ------------------------------------------------------------------------


def tool(
    seq: int,
    name: str,
    args: str | None,
    result: str | None,
    *,
    failed: bool = False,
    empty: object = _AUTO,
    effect: str | None = None,
    start_ns: int = 0,
    end_ns: int = 0,
    input_tokens: int = 0,
    output_tokens: int = 0,
) -> Step:
    """A tool step; fingerprints are derived from the tool name plus args/result (None = unknown)."""
    if empty is _AUTO:
        empty = None if result is None else False
    return Step(
        session_id=SID,
        sequence=seq,
        kind=TOOL,
        name=name,
        args_fingerprint=None if args is None else f"{name}({args})",
        result_fingerprint=None if result is None else f"result:{result}",
        failed=failed,
        empty=empty,  # type: ignore[arg-type]
        effect=effect,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        start_ns=start_ns,
        end_ns=end_ns,
    )


def model(
    seq: int,
    model_name: str = "gpt-4o",
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    final: bool = False,
    claims: tuple[str, ...] = (),
    start_ns: int = 0,
    end_ns: int = 0,
) -> Step:
    """A model step: a final answer when ``final``, else a call that asks for tools."""
    return Step(
        session_id=SID,
        sequence=seq,
        kind=MODEL,
        name=model_name,
        model=model_name,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        final=final,
        claims=claims,
        finish_reasons=("stop",) if final else ("tool_calls",),
        tool_calls=0 if final else 1,
        start_ns=start_ns,
        end_ns=end_ns,
    )


class Run:
    """A judged session: every alert, and which step returned it."""

    def __init__(self, steps: list[Step], profile: Profile | None = None, policy: Policy | None = None,
                 start_ns: int = 0):
        self.policy = policy or Policy.builtin()
        self.judge = SessionJudge(SID, self.policy, profile or Profile(), start_ns=start_ns)
        self.returned: dict[int, list[Alert]] = {}
        for step in steps:
            found = self.judge.observe(step)
            if found:
                self.returned.setdefault(step.sequence, []).extend(found)

    @property
    def alerts(self) -> list[Alert]:
        return list(self.judge.alerts)

    def of(self, probe: str) -> list[Alert]:
        return [alert for alert in self.judge.alerts if alert.probe == probe]

    def one(self, probe: str) -> Alert:
        found = self.of(probe)
        assert len(found) == 1, f"expected exactly one {probe} alert, got {found}"
        alert = found[0]
        # raised by (returned from observe of) the very step it names
        assert alert in self.returned.get(alert.sequence, []), (alert, self.returned)
        assert isinstance(alert.detail, str) and alert.detail.strip()
        assert isinstance(alert.disposal, str) and alert.disposal.strip()
        return alert


def tools_only(calls: list[tuple[str, str | None, str | None]], *, start: int = 1) -> list[Step]:
    """Tool steps with sequences start, start+1, ..."""
    return [tool(start + i, name, args, result) for i, (name, args, result) in enumerate(calls)]


def interleaved(calls: list[tuple[str, str | None, str | None]]) -> list[Step]:
    """A model call asking for a tool before every tool step: tools get sequences 2, 4, 6, ..."""
    steps: list[Step] = []
    for i, (name, args, result) in enumerate(calls):
        steps.append(model(2 * i + 1))
        steps.append(tool(2 * i + 2, name, args, result))
    return steps


A = ("search", "q=a", "hits:a")
B = ("open_doc", "doc=1", "doc:1")
C = ("summarize", "doc=1", "summary:1")
D = ("notify", "to=ops", "sent")


def distinct(n: int, prefix: str = "x") -> list[tuple[str, str, str]]:
    return [(f"{prefix}tool{i}", f"arg{i}", f"res{i}") for i in range(n)]


# --- tool_loop ------------------------------------------------------------------------


def test_tool_loop_threshold_minus_one_does_not_fire():
    run = Run(interleaved([A, A, *distinct(4)]))
    assert run.of("tool_loop") == []


def test_tool_loop_fires_at_threshold_with_sequences_as_evidence():
    run = Run(interleaved([("get_order", "o=1", "paid"), A, A, A]))
    alert = run.one("tool_loop")
    # tool steps have sequences 2, 4, 6, 8; the repeats are 4, 6, 8 (not positions 2, 3, 4)
    assert alert.sequence == 8
    assert alert.evidence == (4, 6, 8)
    assert alert.budget_kind is None


@pytest.mark.parametrize("threshold", [2, 4, 5])
def test_tool_loop_respects_profile_threshold(threshold):
    profile = Profile(window=8, repeat_threshold=threshold)
    below = Run(tools_only([A] * (threshold - 1)), profile)
    assert below.of("tool_loop") == []
    at = Run(tools_only([A] * threshold), profile)
    alert = at.one("tool_loop")
    assert alert.sequence == threshold
    assert alert.evidence == tuple(range(1, threshold + 1))


def test_tool_loop_poll_with_changing_results_does_not_fire():
    polls = [("job_status", "job=7", f"state:{i}") for i in range(6)]
    run = Run(interleaved(polls))
    assert run.of("tool_loop") == []


def test_tool_loop_same_result_but_different_args_does_not_fire():
    calls = [("query", f"order={i}", "stalled") for i in range(6)]
    run = Run(tools_only(calls))
    assert run.of("tool_loop") == []


def test_tool_loop_repeats_exactly_inside_window_fire():
    # tool positions 1, 5, 6: all inside one window of 6 tool steps
    run = Run(tools_only([A, *distinct(3), A, A]))
    alert = run.one("tool_loop")
    assert alert.sequence == 6
    assert alert.evidence == (1, 5, 6)


def test_tool_loop_repeats_spread_wider_than_window_do_not_fire():
    # tool positions 1, 6, 7: the first has left the window of 6 by the third
    run = Run(tools_only([A, *distinct(4), A, A]))
    assert run.of("tool_loop") == []
    # every 6th tool step, for a long time
    spread = Run(tools_only([A, *distinct(5, "a"), A, *distinct(5, "b"), A, *distinct(5, "c"), A]))
    assert spread.of("tool_loop") == []


def test_tool_loop_window_counts_tool_steps_not_model_steps():
    steps = [tool(1, *A)] + [model(seq) for seq in range(2, 12)] + [tool(12, *A), tool(13, *A)]
    run = Run(steps)
    alert = run.one("tool_loop")
    assert alert.sequence == 13
    assert alert.evidence == (1, 12, 13)


def test_tool_loop_unknown_arguments_never_match():
    run = Run(tools_only([("search", None, "hits")] * 6))
    assert run.of("tool_loop") == []


def test_tool_loop_fires_at_most_once_per_session():
    run = Run(tools_only([A] * 12))
    assert len(run.of("tool_loop")) == 1
    assert run.of("tool_loop")[0].sequence == 3


# --- cycle ----------------------------------------------------------------------------


def test_cycle_period_three_fires_at_ninth_tool_step_with_nine_steps_of_evidence():
    run = Run(tools_only([A, B, C] * 3))
    alert = run.one("cycle")
    assert alert.sequence == 9
    assert alert.evidence == tuple(range(1, 10))


def test_cycle_evidence_are_sequences_when_model_steps_interleave():
    run = Run(interleaved([A, B, C] * 3))
    alert = run.one("cycle")
    assert alert.sequence == 18
    assert alert.evidence == (2, 4, 6, 8, 10, 12, 14, 16, 18)


def test_cycle_threshold_minus_one_does_not_fire():
    run = Run(tools_only(([A, B, C] * 3)[:-1]))
    assert run.of("cycle") == []


def test_cycle_period_two():
    assert Run(tools_only(([A, B] * 3)[:-1])).of("cycle") == []
    alert = Run(tools_only([A, B] * 3)).one("cycle")
    assert alert.sequence == 6
    assert alert.evidence == (1, 2, 3, 4, 5, 6)


def test_cycle_period_four():
    assert Run(tools_only(([A, B, C, D] * 3)[:-1])).of("cycle") == []
    alert = Run(tools_only([A, B, C, D] * 3)).one("cycle")
    assert alert.sequence == 12
    assert alert.evidence == tuple(range(1, 13))


@pytest.mark.parametrize("repeats", [2, 4])
def test_cycle_respects_cycle_repeats(repeats):
    profile = Profile(cycle_repeats=repeats)
    assert Run(tools_only(([A, B, C] * repeats)[:-1]), profile).of("cycle") == []
    alert = Run(tools_only([A, B, C] * repeats), profile).one("cycle")
    assert alert.sequence == 3 * repeats
    assert alert.evidence == tuple(range(1, 3 * repeats + 1))


@pytest.mark.parametrize("block", [[A, B], [A, B, C], [A, B, C, D]], ids=["period 2", "period 3", "period 4"])
def test_cycle_of_each_period_fires_on_its_shortest_history(block):
    # Two copies: the fewest calls in which the last call equals the call one period back.
    profile = Profile(cycle_repeats=2)
    assert Run(tools_only((block * 2)[:-1]), profile).of("cycle") == []
    alert = Run(tools_only(block * 2), profile).one("cycle")
    assert alert.sequence == 2 * len(block)
    assert alert.evidence == tuple(range(1, 2 * len(block) + 1))


def test_cycle_does_not_fire_on_one_call_repeated():
    run = Run(tools_only([A] * 12))
    assert run.of("cycle") == []
    assert [a.probe for a in run.alerts].count("tool_loop") == 1  # tool_loop's case, not cycle's


def test_cycle_broken_once_does_not_fire():
    run = Run(tools_only([A, B, C, A, B, C, D, A, B, C, A, B, C]))
    assert run.of("cycle") == []


def test_cycle_with_different_results_is_not_a_cycle():
    calls = []
    for i in range(3):
        calls += [("search", "q=a", f"hits:{i}"), B, C]
    assert Run(tools_only(calls)).of("cycle") == []


def test_cycle_catches_period_three_that_tool_loop_misses_with_unknown_results():
    unknown = [("search", "q=a", None), ("open_doc", "doc=1", None), ("summarize", "doc=1", None)]
    run = Run(tools_only(unknown * 3), Profile(window=6, repeat_threshold=3))
    assert run.of("tool_loop") == []
    alert = run.one("cycle")
    assert alert.sequence == 9
    assert alert.evidence == tuple(range(1, 10))
    assert [a.probe for a in run.alerts] == ["cycle"]


def test_cycle_period_four_with_a_repeated_call_fires():
    # A B A C is a primitive block of 4 calls (not a repetition of a shorter one);
    # repeated 3 times back to back it is a cycle. With a long-chain profile and
    # unknown results neither tool_loop nor no_progress can see it.
    a = ("search", "q=a", None)
    b = ("open_doc", "doc=1", None)
    c = ("open_doc", "doc=2", None)
    profile = Profile(window=8, repeat_threshold=5, no_progress_steps=6)
    run = Run(tools_only([a, b, a, c] * 3), profile)
    alert = run.one("cycle")
    assert alert.sequence == 12
    assert alert.evidence == tuple(range(1, 13))


def test_cycle_fires_at_most_once_per_session():
    run = Run(tools_only([A, B, C] * 6))
    assert len(run.of("cycle")) == 1


# --- no_progress --------------------------------------------------------------------


def test_no_progress_threshold_minus_one_does_not_fire():
    calls = [("query", "d=0", "stalled")] + [("query", f"d={i}", "stalled") for i in range(1, 4)]
    run = Run(interleaved(calls))
    assert run.of("no_progress") == []


def test_no_progress_fires_at_threshold_whatever_the_arguments():
    calls = [("query", "d=0", "stalled")] + [("query", f"d={i}", "stalled") for i in range(1, 5)]
    run = Run(interleaved(calls))  # tool sequences 2, 4, 6, 8, 10
    alert = run.one("no_progress")
    assert alert.sequence == 10
    assert alert.evidence == (4, 6, 8, 10)


@pytest.mark.parametrize("threshold", [2, 6])
def test_no_progress_respects_profile_threshold(threshold):
    profile = Profile(no_progress_steps=threshold)
    calls = [("query", f"d={i}", "same") for i in range(threshold + 1)]
    assert Run(tools_only(calls[:-1]), profile).of("no_progress") == []
    alert = Run(tools_only(calls), profile).one("no_progress")
    assert alert.sequence == threshold + 1
    assert alert.evidence == tuple(range(2, threshold + 2))


def test_no_progress_new_state_resets_the_run():
    calls = [("q", "1", "s1"), ("q", "2", "s1"), ("q", "3", "s1"), ("q", "4", "s1"),
             ("q", "5", "s2"),  # new state: the run of 3 ends
             ("q", "6", "s1"), ("q", "7", "s2"), ("q", "8", "s1")]
    run = Run(tools_only(calls))
    assert run.of("no_progress") == []
    run = Run(tools_only(calls + [("q", "9", "s2")]))
    alert = run.one("no_progress")
    assert alert.sequence == 9
    assert alert.evidence == (6, 7, 8, 9)


def test_no_progress_remembers_states_far_back_and_forgets_the_oldest_first():
    from otel_agentguard.judge.probes.no_progress import _MAX_STATES

    fresh = [("q", f"a{i}", f"s{i}") for i in range(_MAX_STATES)]
    # Four results seen long ago (the first 4 of the session): still no progress.
    early = [("q", f"b{i}", f"s{i}") for i in range(4)]
    alert = Run(tools_only(fresh + early)).one("no_progress")
    assert alert.evidence == tuple(range(_MAX_STATES + 1, _MAX_STATES + 5))
    # Past the memory's bound the oldest states are forgotten: seeing them again is progress.
    more = [("q", f"c{i}", f"t{i}") for i in range(4)]
    assert Run(tools_only(fresh + more + early)).of("no_progress") == []


def test_no_progress_digest_straddling_two_remembered_ones_is_not_seen():
    from otel_agentguard.judge.probes import SessionTotals
    from otel_agentguard.judge.probes.no_progress import _DIGEST, _holds

    first, second = _DIGEST.pack(0x0102030405060708), _DIGEST.pack(0x1112131415161718)
    seen = bytearray(first + second)
    straddling = bytes(seen[4:12])
    assert not _holds(seen, straddling)
    assert _holds(seen, second) and _holds(seen, first)
    assert _holds(seen + straddling, straddling)  # straddled first, then whole at a boundary
    assert SessionTotals().states_seen is None  # made at the first state only


def test_no_progress_counts_failed_steps():
    steps = [
        tool(1, "lookup", "id=1", "found"),
        tool(2, "lookup", "id=2", None, failed=True),
        tool(3, "lookup", "id=3", "found"),  # seen before
        tool(4, "lookup", "id=4", None, failed=True),
        tool(5, "lookup", "id=5", "err", failed=True),  # a failed step is no progress, whatever its result
    ]
    run = Run(steps)
    alert = run.one("no_progress")
    assert alert.sequence == 5
    assert alert.evidence == (2, 3, 4, 5)


def test_no_progress_unknown_results_and_model_steps_are_neutral():
    steps = [
        tool(1, "q", "1", "s1"),
        tool(2, "q", "2", "s1"),
        model(3),
        tool(4, "q", "3", "s1"),
        tool(5, "q", "4", "s1"),  # run of 3: 2, 4, 5
        tool(6, "q", "5", None),  # unknown result: neither extends ...
        model(7),
        tool(8, "q", "6", None),
        tool(9, "q", "7", None),
        tool(10, "q", "8", None),
    ]
    assert Run(steps).of("no_progress") == []
    # ... nor resets
    run = Run(steps + [tool(11, "q", "9", "s1")])
    alert = run.one("no_progress")
    assert alert.sequence == 11
    assert alert.evidence == (2, 4, 5, 11)


def test_no_progress_fires_at_most_once_per_session():
    run = Run(tools_only([("q", f"{i}", "same") for i in range(15)]))
    assert len(run.of("no_progress")) == 1


# --- error_streak -------------------------------------------------------------------


def _bad(seq: int, i: int, kind: str) -> Step:
    if kind == "failed":
        return tool(seq, "lookup", f"id={i}", None, failed=True)
    return tool(seq, "search", f"q={i}", "nothing", empty=True)


def test_error_streak_threshold_minus_one_does_not_fire():
    steps = [_bad(1, 1, "failed"), _bad(2, 2, "empty"), _bad(3, 3, "failed")]
    assert Run(steps).of("error_streak") == []


def test_error_streak_fires_on_failed_or_empty_results_with_varied_args():
    steps = []
    seq = 0
    for i, kind in enumerate(["empty", "failed", "empty", "failed"]):
        seq += 1
        steps.append(model(seq))
        seq += 1
        steps.append(_bad(seq, i, kind))
    run = Run(steps)  # tool sequences 2, 4, 6, 8
    alert = run.one("error_streak")
    assert alert.sequence == 8
    assert alert.evidence == (2, 4, 6, 8)


@pytest.mark.parametrize("threshold", [2, 6])
def test_error_streak_respects_profile_threshold(threshold):
    profile = Profile(error_streak=threshold)
    steps = [_bad(i, i, "failed") for i in range(1, threshold + 1)]
    assert Run(steps[:-1], profile).of("error_streak") == []
    alert = Run(steps, profile).one("error_streak")
    assert alert.sequence == threshold
    assert alert.evidence == tuple(range(1, threshold + 1))


def test_error_streak_useful_result_resets():
    steps = [_bad(1, 1, "failed"), _bad(2, 2, "empty"), _bad(3, 3, "failed"),
             tool(4, "search", "q=4", "hits:3"),
             _bad(5, 5, "failed"), _bad(6, 6, "empty"), _bad(7, 7, "failed")]
    assert Run(steps).of("error_streak") == []
    alert = Run(steps + [_bad(8, 8, "empty")]).one("error_streak")
    assert alert.sequence == 8
    assert alert.evidence == (5, 6, 7, 8)


def test_error_streak_unknown_emptiness_is_neutral():
    neutral = [tool(seq, "search", f"q={seq}", None, empty=None) for seq in (4, 5, 6, 7)]
    steps = [_bad(1, 1, "failed"), _bad(2, 2, "empty"), _bad(3, 3, "failed"), *neutral]
    assert Run(steps).of("error_streak") == []  # neither extends ...
    alert = Run(steps + [_bad(8, 8, "empty")]).one("error_streak")  # ... nor resets
    assert alert.sequence == 8
    assert alert.evidence == (1, 2, 3, 8)


def test_error_streak_fires_at_most_once_per_session():
    run = Run([_bad(i, i, "failed") for i in range(1, 13)])
    assert len(run.of("error_streak")) == 1


# --- budget_exceeded ----------------------------------------------------------------


def _budget(run: Run, kind: str) -> Alert:
    found = [a for a in run.of("budget_exceeded") if a.budget_kind == kind]
    assert len(found) == 1, (kind, run.alerts)
    alert = found[0]
    assert alert in run.returned.get(alert.sequence, [])
    assert alert.detail.strip() and alert.disposal.strip()
    assert alert.evidence == (alert.sequence,)
    return alert


def _kinds(run: Run) -> list[str | None]:
    return [a.budget_kind for a in run.of("budget_exceeded")]


def test_budget_steps_counts_tool_steps_not_tool_requesting_model_calls():
    calls = distinct(13)
    steps = interleaved(calls)  # 13 model calls asking for tools + 13 tool steps
    assert "steps" not in _kinds(Run(steps[:-1]))  # 12 tool steps: at the limit of 12
    run = Run(steps)
    alert = _budget(run, "steps")
    assert alert.sequence == 26  # the 13th tool step


def test_budget_steps_counts_the_final_answer():
    steps = tools_only(distinct(12)) + [model(13, final=True)]
    run = Run(steps)
    alert = _budget(run, "steps")
    assert alert.sequence == 13


def test_budget_tokens_raised_on_crossing_step():
    steps = [model(i, input_tokens=800, output_tokens=200) for i in range(1, 5)]  # exactly 4000
    assert "tokens" not in _kinds(Run(steps))
    run = Run(steps + [model(5, input_tokens=1)])
    assert _budget(run, "tokens").sequence == 5


def test_budget_cost_uses_builtin_price_table():
    # gpt-4o: 2.5 USD per Mtok input, 10 USD per Mtok output -> 0.25 + 0.10 = 0.35 per call
    profile = Profile(max_cost_usd=1.0, max_tokens=10_000_000)
    calls = [model(i, "gpt-4o", input_tokens=100_000, output_tokens=10_000) for i in range(1, 4)]
    below = Run(calls[:2], profile)
    assert "cost" not in _kinds(below)
    assert below.judge.finish().cost_usd == pytest.approx(0.70)
    run = Run(calls, profile)
    assert _budget(run, "cost").sequence == 3
    assert run.judge.finish().cost_usd == pytest.approx(1.05)


def test_budget_cost_uses_policy_pricing_override():
    policy = parse_policy(
        """
version = "t"
[profiles.default]
max_cost_usd = 3.0
max_tokens = 10000000
[pricing."my-model"]
input_usd_per_mtok = 10
output_usd_per_mtok = 20
"""
    )
    profile = policy.resolve_profile("default")
    # 100k in * 10 + 50k out * 20 = 1.0 + 1.0 = 2.0 USD per call
    calls = [model(i, "my-model", input_tokens=100_000, output_tokens=50_000) for i in range(1, 3)]
    below = Run(calls[:1], profile, policy)
    assert "cost" not in _kinds(below)
    assert below.judge.finish().cost_usd == pytest.approx(2.0)
    run = Run(calls, profile, policy)
    assert _budget(run, "cost").sequence == 2


def test_budget_wall_time_from_span_timestamps():
    profile = Profile(max_wall_time_s=10)
    bounds = [(0, 3), (3, 6), (6, 10)]  # the last ends exactly 10 s after the session start: not over
    steps = [tool(i + 1, "t", f"{i}", f"r{i}", start_ns=T0 + start * SECOND, end_ns=T0 + end * SECOND)
             for i, (start, end) in enumerate(bounds)]
    assert "wall_time" not in _kinds(Run(steps, profile))
    late = tool(4, "t", "late", "r-late", start_ns=T0 + 10 * SECOND, end_ns=T0 + 10 * SECOND + SECOND // 2)
    run = Run(steps + [late], profile)
    assert _budget(run, "wall_time").sequence == 4


def test_budget_wall_time_counts_from_the_session_start():
    profile = Profile(max_wall_time_s=10)
    steps = [tool(1, "t", "1", "r1", start_ns=T0, end_ns=T0 + 6 * SECOND)]
    assert "wall_time" not in _kinds(Run(steps, profile))
    run = Run(steps, profile, start_ns=T0 - 5 * SECOND)  # the session began 5 s before its first step
    assert _budget(run, "wall_time").sequence == 1


def test_budget_model_calls():
    profile = Profile(max_model_calls=3)
    steps = [model(1), tool(2, *A), model(3), tool(4, *B), tool(5, *C), model(6)]
    assert "model_calls" not in _kinds(Run(steps, profile))
    run = Run(steps + [tool(7, *D), model(8)], profile)
    assert _budget(run, "model_calls").sequence == 8


def test_budget_fires_once_per_kind():
    steps = [tool(i, f"t{i}", "a", f"r{i}", input_tokens=500) for i in range(1, 21)]
    run = Run(steps)
    assert sorted(_kinds(run)) == ["steps", "tokens"]
    assert _budget(run, "tokens").sequence == 9  # 9 * 500 = 4500 > 4000
    assert _budget(run, "steps").sequence == 13


# --- fake_completion ---------------------------------------------------------------


def test_fake_completion_fires_on_claimed_write_without_write_tool():
    steps = [model(1), tool(2, "get_order", "o=1", "paid", effect="read"), model(3, final=True, claims=("write",))]
    run = Run(steps)
    alert = run.one("fake_completion")
    assert alert.sequence == 3
    assert alert.evidence == (3,)


def test_fake_completion_not_raised_after_successful_write():
    steps = [tool(1, "update_order", "o=1", "changed", effect="write"), model(2, final=True, claims=("write",))]
    assert Run(steps).of("fake_completion") == []


def test_fake_completion_failed_write_does_not_count():
    steps = [tool(1, "update_order", "o=1", None, failed=True, effect="write"),
             model(2, final=True, claims=("write",))]
    alert = Run(steps).one("fake_completion")
    assert alert.sequence == 2
    assert alert.evidence == (2,)


def test_fake_completion_needs_a_claim():
    steps = [tool(1, "get_order", "o=1", "paid"), model(2, final=True, claims=())]
    assert Run(steps).of("fake_completion") == []


def test_fake_completion_only_on_the_final_answer():
    steps = [tool(1, "get_order", "o=1", "paid"), model(2, final=False, claims=("write",))]
    assert Run(steps).of("fake_completion") == []


# --- profile.disabled_probes -------------------------------------------------------

TRIGGERS: dict[str, list[Step]] = {
    "tool_loop": tools_only([A, A, A]),
    "cycle": tools_only([("s", "1", None), ("o", "1", None), ("m", "1", None)] * 3),
    "no_progress": tools_only([("q", f"{i}", "same") for i in range(5)]),
    "error_streak": [tool(i, "q", f"{i}", None, failed=True) for i in range(1, 5)],
    "budget_exceeded": tools_only(distinct(13)),
    "fake_completion": [model(1, final=True, claims=("write",))],
}


@pytest.mark.parametrize("probe", sorted(TRIGGERS))
def test_profile_disabled_probes_disables_a_probe(probe):
    steps = TRIGGERS[probe]
    assert Run(steps, Profile()).of(probe), f"{probe} trigger does not fire when enabled"
    assert Run(steps, Profile(disabled_probes=(probe,))).of(probe) == []


def test_disabled_probes_from_policy_file_leaves_others_working():
    policy = parse_policy(
        """
[profiles.default]
disabled_probes = ["tool_loop"]
"""
    )
    run = Run(tools_only([("q", "1", "same")] * 6), policy.resolve_profile(), policy)
    assert run.of("tool_loop") == []
    assert run.one("no_progress").sequence == 5
