"""The compiled judge's pass judges a step as the Python pass does, or leaves it to it.

``SessionJudge.observe`` asks the compiled pass (``_judge_pass.c``, where the package was built
with a C compiler) first; it accounts for the step and runs the built-in probes' quiet passes,
calling a probe's own ``observe`` where it may raise an alert, and returns None for what it does
not read (the caller then runs the Python pass, the reference). Here two judges of the same
policy judge the same generated sessions, one with the compiled pass and one without: after
every step their alerts, totals and every other slot must be equal, and an error must be the
reference's error. Every other test of the package judges with the compiled pass in place.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
from array import array
from functools import partial
from typing import Any

import pytest
from compiled_modules import assert_frees_what_it_takes, python_code_run, skip_unless_built
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from otel_agentguard import judge as judge_module
from otel_agentguard.claims import WRITE
from otel_agentguard.judge import SessionJudge
from otel_agentguard.policy import Policy, Profile, parse_policy
from otel_agentguard.pricing import Price, PriceTable
from otel_agentguard.probes import SessionTotals, tool_loop
from otel_agentguard.repetition import summarize
from otel_agentguard.steps import MODEL, TOOL, Step

COMPILED = judge_module._compiled


@pytest.fixture(autouse=True)
def compiled() -> None:
    skip_unless_built(COMPILED is not None, "otel_agentguard._judge_pass", "steps are judged in Python")


POLICY = parse_policy("""
version = "pass-1"
finish_tool = "done"
[tools.refund]
effect = "write"
[pricing."gpt-4o"]
input_usd_per_mtok = 2.5
output_usd_per_mtok = 10.0
""")
# Any thresholds, those a policy file refuses (1, 0) included: a profile can be made in code.
PROFILES = st.builds(
    Profile, window=st.integers(1, 8), repeat_threshold=st.integers(0, 5), cycle_repeats=st.integers(0, 4),
    no_progress_steps=st.integers(0, 6), error_streak=st.integers(0, 5), max_steps=st.integers(1, 40),
    max_tokens=st.integers(1, 10**6), max_cost_usd=st.sampled_from([None, 0.01, 0.5]),
    max_wall_time_s=st.sampled_from([None, 2.5, 30, -0.5]), max_model_calls=st.sampled_from([None, 2, 4]),
)
# Few names, arguments and results: sessions loop, cycle and repeat their states.
FINGERPRINT = st.one_of(st.none(), st.sampled_from(["a1", "b2", "c3", "tool:d4"]))
NAME = st.sampled_from(["lookup", "search", "refund", "done"])
REPEATING = summarize("I will check again. " * 12, 3, 240)
# The kind as the step readers write it, or an equal string of another object (a trajectory file's).
KIND_OF_TOOL = st.sampled_from([TOOL, "".join(["to", "ol"])])
KIND_OF_MODEL = st.sampled_from([MODEL, "".join(["mod", "el"])])
TOOL_STEP = st.fixed_dictionaries({
    "kind": KIND_OF_TOOL, "name": NAME, "args_fingerprint": FINGERPRINT, "result_fingerprint": FINGERPRINT,
    "failed": st.booleans(), "empty": st.sampled_from([None, True, False]),
    "effect": st.sampled_from([None, "write", "read"]),
    "cost_usd": st.one_of(st.none(), st.floats(0, 1)), "label": st.sampled_from([None, "s1"]),
})
MODEL_STEP = st.fixed_dictionaries({
    "kind": KIND_OF_MODEL, "name": st.sampled_from(["gpt-4o", "claude"]),
    "model": st.sampled_from([None, "gpt-4o", "gpt-4o-mini", "other"]),
    "input_tokens": st.one_of(st.integers(0, 5000), st.just(2**61)), "output_tokens": st.integers(0, 900),
    "tool_calls": st.one_of(st.none(), st.integers(-1, 3)), "final": st.booleans(),
    "claims": st.sampled_from([(), (WRITE,), ("read",)]),
    "cost_usd": st.one_of(st.none(), st.floats(0, 1)),
    "output_repetition": st.sampled_from([None, None, REPEATING, summarize("fine", 3, 240)]),
})
STEPS = st.lists(st.tuples(st.one_of(TOOL_STEP, TOOL_STEP, MODEL_STEP), st.integers(-1, 3),
                           st.integers(-10**9, 4 * 10**9), st.sampled_from([True] * 9 + [False])),
                 min_size=1, max_size=40)


def _sessions(specs: list[tuple[dict[str, Any], int, int, bool]]) -> list[Step]:
    """Steps numbered mostly in order (a few late or repeated numbers), with times: some that end
    before they start, a few with no start time."""
    steps, sequence, clock = [], 0, 10**9
    for fields, jump, duration, timed in [(*spec, True)[:4] for spec in specs]:
        sequence = max(sequence + jump, 1) if jump else sequence
        steps.append(Step(session_id="s", sequence=sequence, start_ns=clock if timed else 0,
                          end_ns=max(clock + duration, 0), **fields))
        clock = max(clock + duration, 1)
    return steps


def _state(judge: SessionJudge) -> dict[str, Any]:
    """Every slot of a judge and its totals, as values to compare (containers copied)."""
    def value(thing: Any) -> Any:
        if isinstance(thing, array):
            return (array, thing.typecode, thing.tolist())
        if isinstance(thing, (bytearray, list, dict)):
            return (type(thing), bytes(thing) if isinstance(thing, bytearray) else thing.copy())
        return (type(thing), thing)

    slots = {f"judge.{name}": value(getattr(judge, name)) for name in SessionJudge.__slots__
             if name not in ("totals", "policy", "profile", "_shared", "_by_kind")}
    slots.update({f"totals.{name}": value(getattr(judge.totals, name)) for name in SessionTotals.__slots__})
    return slots


def _python_observe(judge: SessionJudge, step: Step) -> Any:
    saved, judge_module._compiled = judge_module._compiled, None
    try:
        return judge.observe(step)
    finally:
        judge_module._compiled = saved


def _outcome(observe: Any) -> tuple[str, Any]:
    try:
        return "alerts", observe()
    except Exception as exc:  # deliberate: the error is compared
        return "error", (type(exc), str(exc))


# Probes whose observe the compiled pass calls only for the alert (with int settings; a cycle
# of more than one repeat): a call that raises nothing is work the pass should have done itself.
_CALLED_FOR_THE_ALERT = frozenset({"cycle", "no_progress", "error_streak", "budget_exceeded"})


def _judge_both(policy: Policy, steps: list[Step], profile: Profile | None = None, last_actions: bool = True) -> int:
    """Judge ``steps`` with and without the compiled pass, comparing after each; returns how many
    steps the compiled pass judged itself."""
    compiled = SessionJudge("s", policy, profile, last_actions=last_actions)
    reference = SessionJudge("s", policy, profile, last_actions=last_actions)
    called_back: list[tuple[str, bool]] = []
    observe_one, account = SessionJudge._observe_one, SessionJudge._account
    in_python = 0

    def recorded(judge: SessionJudge, probe: Any, step: Step) -> Any:
        found = observe_one(judge, probe, step)
        called_back.append((probe.name, bool(found)))
        return found

    def counted(judge: SessionJudge, step: Step) -> None:
        nonlocal in_python
        in_python += judge is compiled
        account(judge, step)

    SessionJudge._observe_one, SessionJudge._account = recorded, counted  # type: ignore[method-assign]
    try:
        for step in steps:
            got = _outcome(lambda: compiled.observe(step))  # noqa: B023 - called at once
            expected = _outcome(lambda: _python_observe(reference, step))  # noqa: B023
            assert got == expected, step
            assert _state(compiled) == _state(reference), step
    finally:
        SessionJudge._observe_one, SessionJudge._account = observe_one, account  # type: ignore[method-assign]
    assert compiled.finish() == reference.finish()
    called_for_the_alert = _CALLED_FOR_THE_ALERT - ({"cycle"} if compiled.profile.cycle_repeats <= 1 else set())
    assert not [name for name, raised in called_back if name in called_for_the_alert and not raised]
    return len(steps) - in_python


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PROFILES, STEPS.map(_sessions), st.booleans())
@example(Profile(), _sessions([({"kind": TOOL, "name": "lookup", "args_fingerprint": "a1",
                                 "result_fingerprint": "b2"}, 1, 5)] * 9), True)  # a loop is no cycle
@example(Profile(max_wall_time_s=2.5),  # a session whose first step has no start time: no wall time yet
         _sessions([({"kind": TOOL, "name": "lookup", "args_fingerprint": "a1"}, 1, 4 * 10**9, False)] * 2), False)
def test_the_compiled_pass_judges_each_step_as_the_python_pass(profile, steps, last_actions):
    judged_in_c = _judge_both(POLICY, steps, profile, last_actions)
    # Only a count past 2**62 leaves a step to Python here (and every step after it, the total past it).
    assert judged_in_c == len(steps) or any(step.input_tokens >= 2**61 for step in steps)


def _tool(sequence: int, name: str = "lookup", args: str | None = "a1", result: str | None = "r1", **fields: Any) -> Step:
    return Step(session_id="s", sequence=sequence, kind=TOOL, name=name, args_fingerprint=args,
                result_fingerprint=result, start_ns=sequence * 10**9, end_ns=sequence * 10**9 + 5, **fields)


DEFAULT = parse_policy('version = "d"\n[profiles.default]\nmax_steps = 100\nmax_tokens = 1000000\n')
CYCLE = [_tool(n, name, args, result) for n, (name, args, result) in
         enumerate(itertools.islice(itertools.cycle([("a", "1", "x"), ("b", "2", "y"), ("c", "3", "z")]), 9), 1)]


@pytest.mark.parametrize(("steps", "probes"), [
    ([_tool(n) for n in range(1, 4)], "tool_loop"),
    (CYCLE, "no_progress cycle"),  # the results repeat too
    ([_tool(n, args=str(n), result="same") for n in range(1, 6)], "no_progress"),
    ([_tool(n, args=str(n), result=str(n), failed=True) for n in range(1, 5)], "no_progress error_streak"),
    ([_tool(n, args=str(n), result=str(n), empty=True) for n in range(1, 5)], "error_streak"),
    ([_tool(n, args=str(n), result=str(n)) for n in range(1, 102)], "budget_exceeded"),
    ([Step(session_id="s", sequence=1, kind=MODEL, name="m", final=True, claims=(WRITE,))], "fake_completion"),
    ([Step(session_id="s", sequence=1, kind=MODEL, name="m", output_repetition=REPEATING)], "output_repetition"),
])
def test_each_probe_raises_its_alert_from_the_compiled_pass(steps, probes):
    judge = SessionJudge("s", DEFAULT)
    raised = [alert for step in steps for alert in judge.observe(step)]
    assert [alert.probe for alert in raised] == probes.split()
    assert judge.alerts == raised
    assert _judge_both(DEFAULT, steps) == len(steps)  # and every step was judged in C


def test_states_past_the_limit_are_forgotten_oldest_first_as_in_python():
    # 4,096 states are remembered: the first of 4,100 is forgotten, so seeing it again is progress.
    steps = [_tool(n, args=str(n), result=f"state-{n}") for n in range(1, 4101)]
    steps += [_tool(4101 + n, args="again", result=f"state-{n}") for n in (1, 5, 4100)]
    profile = Profile(max_steps=10**6, max_tokens=10**9)
    assert _judge_both(DEFAULT, steps, profile) == len(steps)


def test_the_usual_steps_are_judged_in_c_and_the_others_left_to_python():
    judge = SessionJudge("s", DEFAULT)
    usual = [_tool(1), Step(session_id="s", sequence=2, kind=MODEL, name="m", model="gpt-4o", tool_calls=1,
                                   input_tokens=10**5),
             _tool(3, label="s03", effect="write", empty=False), Step(session_id="s", sequence=4, kind=MODEL,
                                                                      name="m", final=True, cost_usd=0.25)]
    assert all(COMPILED.observe(judge, step) is not None for step in usual)
    assert judge.totals.steps == 3 and judge.totals.wrote and judge.totals.cost_usd > 0.25
    left = [
        dataclasses.replace(_tool(5), kind="other"),
        dataclasses.replace(_tool(5), sequence=True),
        dataclasses.replace(_tool(5), sequence=2**62),
        dataclasses.replace(_tool(5), failed=1),
        dataclasses.replace(_tool(5), args_fingerprint=b"a1"),
        dataclasses.replace(_tool(5), cost_usd=1),
        Step(session_id="s", sequence=5, kind=MODEL, name="m", input_tokens=1.5),
        Step(session_id="s", sequence=5, kind=MODEL, name="m", tool_calls=True),
    ]
    before = _state(judge)
    assert [COMPILED.observe(judge, step) for step in left] == [None] * len(left)
    assert _state(judge) == before  # decided before anything changed

    class Subclass(SessionJudge):
        pass

    assert COMPILED.observe(Subclass("s", DEFAULT), _tool(1)) is None
    judge.totals.tokens = 2**62 - 1  # a sum past 2**62
    assert COMPILED.observe(judge, Step(session_id="s", sequence=6, kind=MODEL, name="m", input_tokens=1)) is None


def test_a_judge_with_a_disabled_or_foreign_probe_is_left_to_python():
    judge = SessionJudge("s", DEFAULT)
    judge._probes.pop()  # the session's own list: a probe was disabled here
    assert COMPILED.observe(judge, _tool(1)) is None

    class Foreign:
        name = "foreign"

        def observe(self, step: Step, totals: SessionTotals) -> None:
            return None

    judge = SessionJudge("s", DEFAULT)
    judge._by_kind = {TOOL: (*judge._by_kind[TOOL], Foreign()), MODEL: judge._by_kind[MODEL]}
    assert COMPILED.observe(judge, _tool(1)) is None
    assert judge.observe(_tool(1)) == []


def test_a_failing_probe_is_disabled_and_reported_as_in_python(caplog):
    # A final answer whose claims cannot be searched: fake_completion's observe raises in both passes.
    odd = Step(session_id="s", sequence=1, kind=MODEL, name="m", final=True, claims=None)  # type: ignore[arg-type]
    compiled, reference = SessionJudge("s", DEFAULT), SessionJudge("s", DEFAULT)
    assert compiled.observe(odd) == _python_observe(reference, odd) == []
    assert [probe.name for probe in compiled._probes] == [probe.name for probe in reference._probes]
    assert "fake_completion" not in [probe.name for probe in compiled._probes]
    # The judge's own list now: the next step is judged in Python, with the others.
    assert COMPILED.observe(compiled, _tool(2)) is None


@pytest.mark.parametrize("held", ["states_seen", "no_progress_run", "error_run"])
def test_a_probe_whose_memory_cannot_grow_is_disabled_as_in_python(held):
    # A buffer exported from what a probe remembers (a memoryview held) cannot be resized: the
    # probe's update raises BufferError, in Python and in C alike, and the probe is disabled.
    first = [_tool(1, args="1", result="r1", failed=True), _tool(2, args="2", result="r2")]
    then = _tool(3, args="3", result="r3", failed=True)
    judges = SessionJudge("s", DEFAULT), SessionJudge("s", DEFAULT)
    for step in first:
        judges[0].observe(step), _python_observe(judges[1], step)
    for judge in judges:
        if getattr(judge.totals, held) is None:
            setattr(judge.totals, held, array("q") if held.endswith("run") else bytearray())
    views = [memoryview(getattr(judge.totals, held)) for judge in judges]
    step = then if held != "states_seen" else dataclasses.replace(then, failed=False)
    assert judges[0].observe(step) == _python_observe(judges[1], step) == []
    assert _state(judges[0]) == _state(judges[1])
    disabled = {"states_seen": "no_progress", "no_progress_run": "no_progress", "error_run": "error_streak"}[held]
    assert disabled not in [probe.name for probe in judges[0]._probes]
    for view in views:
        view.release()


def test_a_price_table_or_policy_of_the_users_is_left_to_python():
    class Prices:
        def cost(self, model: Any, input_tokens: int, output_tokens: int) -> float:
            return 1.0

    class OwnPolicy(Policy):
        pass

    model_step = Step(session_id="s", sequence=1, kind=MODEL, name="m", model="gpt-4o")
    judge = SessionJudge("s", _with_prices(Prices()))
    assert COMPILED.observe(judge, model_step) is None
    assert judge.observe(model_step) == [] and judge.totals.cost_usd == 1.0
    assert COMPILED.observe(SessionJudge("s", OwnPolicy()), _tool(1)) is None
    assert COMPILED.observe(SessionJudge("s", DEFAULT), dataclasses.replace(model_step, model=b"gpt")) is None


def test_a_setting_or_policy_field_replaced_on_its_class_is_left_to_python(monkeypatch):
    # The policy's prices and finish tool and the probes' settings are slots the pass loads at their
    # offsets: replaced on the class (a value, a property), getattr reads the replacement, so Python does.
    judge = SessionJudge("s", DEFAULT)
    assert COMPILED.observe(judge, _tool(1)) is not None
    for owner, name, value in ((Policy, "finish_tool", "lookup"), (Policy, "prices", DEFAULT.prices),
                               (tool_loop.ToolLoop, "_threshold", 2)):
        monkeypatch.setattr(owner, name, value)
        assert COMPILED.observe(judge, _tool(2)) is None, name
        monkeypatch.undo()
    assert COMPILED.observe(judge, _tool(2)) is not None


def test_an_error_of_the_price_table_is_the_python_pass_error():
    # The policy's own price table, given a price it cannot multiply: it raises halfway through the
    # accounting, in C and in Python alike.
    step = Step(session_id="s", sequence=1, kind=MODEL, name="m", model="x-1", input_tokens=3, start_ns=7, end_ns=9)
    judges = SessionJudge("s", DEFAULT), SessionJudge("s", DEFAULT)
    for judge in judges:
        judge.policy = _with_prices(PriceTable({"x": Price(None, None)}))  # type: ignore[arg-type]
    assert COMPILED.observe(SessionJudge("s", judges[0].policy), dataclasses.replace(step, model="y")) is not None
    outcomes = [_outcome(lambda: judges[0].observe(step)), _outcome(lambda: _python_observe(judges[1], step))]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == "error" and outcomes[0][1][0] is TypeError
    assert _state(judges[0]) == _state(judges[1])  # the same partial accounting


def _with_prices(prices: Any) -> Policy:
    policy = parse_policy('version = "p"\n')
    policy.prices = prices
    return policy


def test_the_pass_frees_what_it_takes():
    steps = _sessions([({"kind": TOOL, "name": "lookup", "args_fingerprint": "a1", "result_fingerprint": "b2",
                         "label": "s1"}, 1, 5)] * 30 + [({"kind": MODEL, "name": "m", "model": "gpt-4o"}, 1, 5)] * 10)

    unpriced = _with_prices(PriceTable({"gpt-4o": Price(None, None)}))  # type: ignore[arg-type]

    def judge_often() -> None:
        for _ in range(20):
            judge = SessionJudge("s", DEFAULT)
            for step in steps:
                judge.observe(step)
            judge.finish()
            with pytest.raises(TypeError):  # an error halfway through the accounting
                SessionJudge("s", unpriced).observe(steps[-1])
            judge = SessionJudge("s", DEFAULT)
            judge.observe(steps[0])
            held = memoryview(judge.totals.call_digests)
            with pytest.raises(BufferError):  # (remember_call cannot grow the held array)
                judge.observe(steps[1])
            held.release()
        gc.collect()  # what the interpreter keeps of freed objects (tuple free lists) goes too

    assert_frees_what_it_takes(judge_often)


def test_the_pass_is_configured_once_and_refuses_classes_it_cannot_read():
    configuration = judge_module.compiled_configuration()
    with pytest.raises(RuntimeError, match="configured once"):
        COMPILED.configure(*configuration)

    @dataclasses.dataclass
    class WithDict:
        totals: Any = None

    for at, odd in [(0, WithDict), (1, dict), (2, object), (3, 1), (8, ()), (9, (0,) * 6), (10, "20"), (11, 0),
                    (14, None)]:
        changed = list(configuration)
        changed[at] = odd
        with pytest.raises(TypeError, match="configure"):
            COMPILED.configure(*changed)
    with pytest.raises(TypeError, match="16 arguments"):
        COMPILED.configure(*configuration[:-1])


def test_a_model_priced_before_is_costed_from_the_cache_as_the_method_costs_it(monkeypatch: pytest.MonkeyPatch):
    policy = parse_policy('version = "p"\n')
    steps = [Step(session_id="s", sequence=n, kind=MODEL, name="m", model=model, input_tokens=tokens,
                  output_tokens=n * 7) for n, (model, tokens) in enumerate(
                      [("gpt-4o-2024", 1234), ("gpt-4o-2024", 10**15 + 7), ("nobody's", 9), ("", 3), (None, 5)], 1)]
    called: list[str] = []
    for step in steps:
        policy.prices.price(step.model)  # priced before: cached
        judge = SessionJudge("s", policy)
        observed, ran = python_code_run(partial(COMPILED.observe, judge, step))
        assert observed is not None  # the compiled pass judged it
        called += [code.co_name for code in ran]
        expected = policy.prices.cost(step.model, step.input_tokens, step.output_tokens)
        assert judge.totals.cost_usd == expected and type(judge.totals.cost_usd) is float
    assert "cost" not in called and "price" not in called
    monkeypatch.setattr(PriceTable, "cost", lambda self, model, input_tokens, output_tokens: 2.5)
    judge = SessionJudge("s", policy)
    judge.observe(steps[0])
    assert judge.totals.cost_usd == 2.5  # a replaced method is called
