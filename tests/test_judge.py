"""The judge: stop_reason precedence, explicit finish, contained probe failures,
verdict totals, and the SequenceBuffer that puts live steps back in order."""

from __future__ import annotations

import dataclasses

import pytest

import otel_agentguard.judge.session_judge as judge_module
from otel_agentguard import _internal_errors
from otel_agentguard.judge.policy import Policy, Profile, parse_policy
from otel_agentguard.judge.probes import Alert
from otel_agentguard.judge.session_judge import SequenceBuffer, SessionJudge, choose_stop_reason
from otel_agentguard.judge.steps import MODEL, TOOL, Step

SID = "judge-session"
SECOND = 1_000_000_000
T0 = 1_760_000_000 * SECOND


def tool(seq: int, name: str, args: str, result: str | None, *, failed: bool = False, effect: str | None = None,
         start_ns: int = 0, end_ns: int = 0) -> Step:
    return Step(
        session_id=SID, sequence=seq, kind=TOOL, name=name,
        args_fingerprint=f"{name}({args})",
        result_fingerprint=None if result is None else f"result:{result}",
        failed=failed, empty=None if result is None else False, effect=effect,
        start_ns=start_ns, end_ns=end_ns,
    )


def model(seq: int, model_name: str = "gpt-4o", *, input_tokens: int = 0, output_tokens: int = 0,
          final: bool = False, claims: tuple[str, ...] = (), start_ns: int = 0, end_ns: int = 0) -> Step:
    return Step(
        session_id=SID, sequence=seq, kind=MODEL, name=model_name, model=model_name,
        input_tokens=input_tokens, output_tokens=output_tokens, final=final, claims=claims,
        finish_reasons=("stop",) if final else ("tool_calls",), tool_calls=0 if final else 1,
        start_ns=start_ns, end_ns=end_ns,
    )


def judged(steps: list[Step], policy: Policy | None = None, profile: Profile | None = None,
           start_ns: int = 0) -> SessionJudge:
    policy = policy or Policy.builtin()
    judge = SessionJudge(SID, policy, profile or Profile(), start_ns=start_ns)
    for step in steps:
        judge.observe(step)
    return judge


def alert(probe: str, sequence: int = 1) -> Alert:
    return Alert(probe=probe, sequence=sequence, evidence=(sequence,), detail="d", disposal="x")


LOOP = [tool(i, "query_logistics", "order=A1", "stalled") for i in (1, 2, 3)]


# --- choose_stop_reason -------------------------------------------------------------


@pytest.mark.parametrize("interrupt", ["steered", "drained", "dispatched", "awaiting"])
def test_interrupt_outranks_everything(interrupt):
    reason = choose_stop_reason(
        [alert("tool_loop"), alert("fake_completion", 2)],
        interrupt=interrupt, error=True, explicit_finish=True, final_answer=True,
    )
    assert reason == interrupt


def test_fake_completion_outranks_an_earlier_alert():
    alerts = [alert("tool_loop", 3), alert("no_progress", 5), alert("fake_completion", 8)]
    assert choose_stop_reason(alerts, error=True, explicit_finish=True, final_answer=True) == "fake_completion"


@pytest.mark.parametrize("first,second", [("no_progress", "tool_loop"), ("budget_exceeded", "cycle"),
                                          ("error_streak", "budget_exceeded")])
def test_first_alert_wins_without_fake_completion(first, second):
    alerts = [alert(first, 4), alert(second, 6)]
    assert choose_stop_reason(alerts, error=True, explicit_finish=True, final_answer=True) == first


def test_error_outranks_explicit_finish_and_completed():
    assert choose_stop_reason([], error=True, explicit_finish=True, final_answer=True) == "error"


def test_explicit_finish_outranks_completed():
    assert choose_stop_reason([], explicit_finish=True, final_answer=True) == "explicit_finish"


def test_completed_with_a_final_answer_and_no_alert():
    assert choose_stop_reason([], final_answer=True) == "completed"


def test_abandoned_without_final_answer():
    assert choose_stop_reason([]) == "abandoned"


# --- SessionJudge.finish ------------------------------------------------------------


def test_explicit_finish_when_finish_tool_succeeded():
    steps = [model(1), tool(2, "export", "t=orders", "job:7"), model(3), tool(4, "finalize", "s=ok", "ok")]
    assert judged(steps).finish().stop_reason == "explicit_finish"


def test_failed_finish_tool_is_not_an_explicit_finish():
    steps = [tool(1, "export", "t=orders", "job:7"), tool(2, "finalize", "s=ok", None, failed=True)]
    assert judged(steps).finish().stop_reason == "abandoned"


def test_policy_finish_tool_name_is_used():
    policy = parse_policy('finish_tool = "done"\n')
    assert judged([tool(1, "done", "x", "ok")], policy, policy.resolve_profile()).finish().stop_reason == (
        "explicit_finish"
    )
    # "finalize" is no longer the finish tool under this policy
    assert judged([tool(1, "finalize", "x", "ok")], policy, policy.resolve_profile()).finish().stop_reason == (
        "abandoned"
    )


def test_completed_after_final_answer_without_alerts():
    steps = [tool(1, "get_order", "o=1", "paid"), model(2, final=True)]
    verdict = judged(steps).finish()
    assert verdict.stop_reason == "completed"
    assert verdict.alerts == ()
    assert not verdict.stalled


def test_stop_reason_is_first_alert_of_the_session():
    steps = LOOP + [model(4, final=True)]
    verdict = judged(steps).finish()
    assert verdict.stop_reason == "tool_loop"
    assert verdict.stalled
    assert [a.probe for a in verdict.alerts] == ["tool_loop"]


def test_stop_reason_fake_completion_outranks_earlier_loop():
    steps = LOOP + [model(4, final=True, claims=("write",))]
    verdict = judged(steps).finish()
    assert [a.probe for a in verdict.alerts] == ["tool_loop", "fake_completion"]
    assert verdict.stop_reason == "fake_completion"


def test_finish_interrupt_and_error():
    assert judged(LOOP).finish(interrupt="drained").stop_reason == "drained"
    assert judged([tool(1, "a", "1", "r")]).finish(error=True).stop_reason == "error"
    assert judged(LOOP).finish(error=True).stop_reason == "tool_loop"


def test_verdict_records_profile_and_policy_version():
    policy = parse_policy('version = "2026-11-30"\n[profiles.tight]\nmax_steps = 2\n')
    verdict = judged([tool(1, "a", "1", "r")], policy, policy.resolve_profile("tight")).finish()
    assert verdict.profile == "tight"
    assert verdict.policy_version == "2026-11-30"


# --- a probe that raises --------------------------------------------------------------


class _Exploding:
    name = "exploding_test_probe"
    calls = 0

    def __init__(self, profile: Profile, policy: Policy):
        pass

    def observe(self, step, totals):
        type(self).calls += 1
        if type(self).calls >= 2:
            raise RuntimeError("probe bug")
        return None


def test_probe_that_raises_is_disabled_and_others_keep_working(monkeypatch):
    original = judge_module.all_probes
    monkeypatch.setattr(judge_module, "all_probes", lambda: (_Exploding, *original()))
    monkeypatch.setattr(_Exploding, "calls", 0)
    kind = f"probe.{_Exploding.name}"
    before = _internal_errors.counts().get(kind, 0)

    judge = SessionJudge(SID, Policy.builtin(), Profile())
    raised = [judge.observe(step) for step in LOOP + [model(4, final=True, claims=("write",))]]

    assert _Exploding.calls == 2  # raised on the 2nd step, never called again
    assert _internal_errors.counts().get(kind, 0) == before + 1
    assert [a.probe for a in raised[2]] == ["tool_loop"]
    assert [a.probe for a in raised[3]] == ["fake_completion"]
    assert judge.finish().stop_reason == "fake_completion"


def test_probe_injected_into_judge_that_raises_is_contained():
    judge = SessionJudge(SID, Policy.builtin(), Profile())
    judge._probes.insert(0, _AlwaysRaises())
    before = _internal_errors.counts().get("probe.always_raises_test", 0)
    alerts = [a for step in LOOP for a in judge.observe(step)]
    assert [a.probe for a in alerts] == ["tool_loop"]
    assert all(not isinstance(p, _AlwaysRaises) for p in judge._probes)
    assert _internal_errors.counts().get("probe.always_raises_test", 0) == before + 1


class _AlwaysRaises:
    name = "always_raises_test"

    def observe(self, step, totals):
        raise ValueError("boom")


# --- Verdict totals ------------------------------------------------------------------


def test_verdict_totals():
    steps = [
        model(1, "gpt-4o", input_tokens=1000, output_tokens=200, start_ns=T0, end_ns=T0 + SECOND),
        tool(2, "get_order", "o=1", "paid", start_ns=T0 + SECOND, end_ns=T0 + 2 * SECOND),
        tool(3, "refund", "o=1", "ok", effect="write", start_ns=T0 + 2 * SECOND, end_ns=T0 + 3 * SECOND),
        model(4, "gpt-4o-mini", input_tokens=500, output_tokens=100, final=True, claims=("write",),
              start_ns=T0 + 3 * SECOND, end_ns=T0 + 3 * SECOND + SECOND // 2),
    ]
    verdict = judged(steps).finish()
    assert verdict.stop_reason == "completed"
    assert verdict.steps == 3  # two tool steps plus the final answer
    assert verdict.tokens == 1800
    assert verdict.model_calls == 2
    # gpt-4o 2.5/10 USD per Mtok; gpt-4o-mini (longest prefix) 0.15/0.6
    assert verdict.cost_usd == pytest.approx((1000 * 2.5 + 200 * 10 + 500 * 0.15 + 100 * 0.6) / 1e6)
    assert verdict.duration_s == pytest.approx(3.5)


def test_verdict_duration_from_session_start_and_finish_end():
    steps = [tool(1, "a", "1", "r", start_ns=T0, end_ns=T0 + 2 * SECOND)]
    judge = judged(steps, start_ns=T0 - SECOND)
    assert judge.finish().duration_s == pytest.approx(3.0)
    assert judge.finish(end_ns=T0 + 9 * SECOND).duration_s == pytest.approx(10.0)


def test_verdict_uses_stated_cost_over_price_table():
    step = Step(session_id=SID, sequence=1, kind=MODEL, name="gpt-4o", model="gpt-4o",
                input_tokens=1_000_000, output_tokens=0, cost_usd=0.5)
    assert judged([step]).finish().cost_usd == pytest.approx(0.5)


# --- sessions judged side by side -----------------------------------------------------


def _trajectories() -> dict[str, list[Step]]:
    """Each makes other probes fire (or none); every one twice, so two sessions of one
    profile raise the same alert at the same time."""
    one = {
        "loop": LOOP + [model(4)],
        "cycle": [tool(i, name, "x", name) for i, name in enumerate(["a", "b", "c"] * 3, start=1)],
        "no_progress": [tool(i, "search", f"q{i}", "nothing new") for i in range(1, 6)],
        "errors": [tool(i, "fetch", f"p{i}", None, failed=True) for i in range(1, 5)],
        "budget": [tool(i, "t", f"{i}", f"{i}") for i in range(1, 14)],
        "fake": [tool(1, "get_order", "1", "o"), model(2, final=True, claims=("write",))],
        "healthy": [tool(1, "a", "1", "r1"), tool(2, "b", "2", "r2"), model(3, final=True)],
    }
    return {f"{name}-{copy}": list(steps) for name, steps in one.items() for copy in (1, 2)}


def test_sessions_of_one_profile_judged_side_by_side_raise_what_each_raises_alone():
    policy, profile = Policy.builtin(), Profile()
    alone = {name: judged(steps, policy, profile).finish() for name, steps in _trajectories().items()}
    judges = {name: SessionJudge(name, policy, profile) for name in alone}
    pending = _trajectories()
    while any(pending.values()):  # one step of each session in turn
        for name, steps in pending.items():
            if steps:
                judges[name].observe(steps.pop(0))
    together = {name: judge.finish() for name, judge in judges.items()}

    assert {name: (v.stop_reason, v.alerts) for name, v in together.items()} == {
        name: (v.stop_reason, v.alerts) for name, v in alone.items()}
    raised = {alert.probe for verdict in alone.values() for alert in verdict.alerts}
    assert raised == {"tool_loop", "cycle", "no_progress", "error_streak", "budget_exceeded", "fake_completion"}


def test_last_steps_name_the_last_five_steps():
    steps = [tool(1, "a", "1", "r"), tool(2, "b", "2", None, failed=True), model(3), tool(4, "c", "3", "r"),
             model(5), tool(6, "d", "4", "r"), model(7, "gpt-4o-mini")]
    judge = judged(steps)
    assert [(a.sequence, a.kind, a.name, a.failed) for a in judge.last_steps] == [
        (3, MODEL, "gpt-4o", False), (4, TOOL, "c", False), (5, MODEL, "gpt-4o", False), (6, TOOL, "d", False),
        (7, MODEL, "gpt-4o-mini", False)]
    assert [(a.sequence, a.failed) for a in judged(steps[:2]).last_steps] == [(1, False), (2, True)]


def test_a_judge_asked_for_no_last_actions_judges_alike_and_names_none():
    kept, lean = SessionJudge(SID, Policy.builtin()), SessionJudge(SID, Policy.builtin(), last_actions=False)
    raised = [(kept.observe(step), lean.observe(step)) for step in LOOP]
    assert [mine for mine, _ in raised] == [theirs for _, theirs in raised]
    assert lean.last_steps == [] and len(kept.last_steps) == 3


# --- SequenceBuffer -------------------------------------------------------------------


def _s(seq: int) -> Step:
    return tool(seq, "t", str(seq), f"r{seq}")


def _seqs(steps: list[Step]) -> list[int]:
    return [s.sequence for s in steps]


def test_sequence_buffer_in_order_passes_through():
    buffer = SequenceBuffer()
    assert [_seqs(buffer.push(_s(i))) for i in (1, 2, 3)] == [[1], [2], [3]]


def test_sequence_buffer_releases_out_of_order_pushes_in_order():
    buffer = SequenceBuffer()
    assert buffer.push(_s(3)) == []
    assert buffer.push(_s(2)) == []
    assert _seqs(buffer.push(_s(1))) == [1, 2, 3]
    assert buffer.push(_s(5)) == []
    assert _seqs(buffer.push(_s(4))) == [4, 5]


def test_sequence_buffer_skip_releases_a_gap():
    buffer = SequenceBuffer()
    assert buffer.push(_s(2)) == []
    assert buffer.push(_s(4)) == []
    assert _seqs(buffer.skip(1)) == [2]
    assert _seqs(buffer.skip(3)) == [4]
    assert _seqs(buffer.push(_s(5))) == [5]


def test_sequence_buffer_skip_ahead_of_time():
    buffer = SequenceBuffer()
    assert buffer.skip(2) == []
    assert _seqs(buffer.push(_s(1))) == [1]
    assert _seqs(buffer.push(_s(3))) == [3]


def test_sequence_buffer_gives_up_on_missing_number_beyond_max_pending():
    buffer = SequenceBuffer(max_pending=3)
    assert buffer.push(_s(2)) == []
    assert buffer.push(_s(4)) == []
    assert buffer.push(_s(3)) == []  # 3 held: at the limit, still waiting for 1
    assert _seqs(buffer.push(_s(5))) == [2, 3, 4, 5]
    # the given-up number is judged at once if it ever arrives
    assert _seqs(buffer.push(_s(1))) == [1]
    assert _seqs(buffer.push(_s(6))) == [6]


def test_sequence_buffer_drain_returns_rest_sorted():
    buffer = SequenceBuffer()
    for seq in (7, 3, 5):
        assert buffer.push(_s(seq)) == []
    assert _seqs(buffer.drain()) == [3, 5, 7]
    assert buffer.drain() == []
    assert _seqs(buffer.push(_s(8))) == [8]


def test_open_tool_calls_count_down_to_zero_and_never_below():
    judge = SessionJudge(SID, Policy.builtin(), Profile())
    judge.observe(dataclasses.replace(model(1), tool_calls=2))
    left = []
    for seq in (2, 3, 4):
        judge.observe(tool(seq, "lookup", f"n={seq}", "ok"))
        left.append(judge.totals.open_tool_calls)
    assert left == [1, 0, 0]
    # A span may claim any count: a negative one opens no call, and a tool step leaves 0.
    judge.observe(dataclasses.replace(model(5), tool_calls=-2))
    judge.observe(tool(6, "lookup", "n=6", "ok"))
    assert judge.totals.open_tool_calls == 0


def test_probes_swapped_for_a_known_profile_are_the_ones_its_next_session_runs(monkeypatch):
    policy, profile = Policy.builtin(), Profile()
    assert [a.probe for a in judged(LOOP, policy, profile).alerts] == ["tool_loop"]  # its probe set is cached
    monkeypatch.setattr(judge_module, "all_probes", lambda: ())
    assert judged(LOOP, policy, profile).alerts == []
