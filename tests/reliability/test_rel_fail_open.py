"""Fail open, fuzzed: whatever an agent, a tool or a foreign instrumentation hands the guard,
nothing raises into the caller, the same input gets the same verdict twice, and whatever the
guard had to contain is counted (``_internal_errors.counts()`` and ``agentguard.internal_errors``).
"""

from __future__ import annotations

import asyncio
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rel_support import (
    Boom,
    EvilClass,
    EvilEverything,
    EvilHash,
    SpanRecipe,
    content_capture,
    export_digest,
    exported_json,
    fuzz_settings,
    internal_errors_since,
    metric_sum,
    otlp_file,
    play_spans,
    python_values,
    span_recipes,
    verdict_key,
)

import otel_agentguard as ag
from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.judge.fingerprints.canonical import Fingerprinter, is_empty
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.steps import explicit_session
from otel_agentguard.replay import InputError, replay_files
from otel_agentguard.testing import GuardedTracing

NAMES = st.sampled_from(["lookup", "search", "refund"])
KEY_SETS = st.frozensets(st.sampled_from(["a", "k", "v", "self", "urls", "public", "trace_id"]), max_size=3)


# --- fingerprints ---------------------------------------------------------------------------------------


@fuzz_settings(1000)
@given(value=python_values(), noise=KEY_SETS, unordered=KEY_SETS)
def test_fingerprinter_never_raises_and_is_deterministic(value, noise, unordered):
    """Deterministic for every value the guard reads; a value it does not read (an object of
    the application's) makes the fingerprint unique to the call, and says so."""
    fingerprinter = Fingerprinter("tool", noise_keys=noise, unordered_keys=unordered)
    first = fingerprinter.arguments(value)
    second = fingerprinter.arguments(value)
    assert len(first.fingerprint) == 32 and int(first.fingerprint, 16) >= 0
    assert all(isinstance(key, str) for key in first.keys)
    assert isinstance(fingerprinter.canonical(value), str)
    assert is_empty(value) in (True, False)
    if first.opaque:
        assert second.opaque and first.fingerprint != second.fingerprint
        return
    assert first == second
    assert fingerprinter.result(value) == fingerprinter.result(value)
    # A second fingerprinter with the same contract (another thread, another span) agrees.
    assert Fingerprinter("tool", noise_keys=noise, unordered_keys=unordered).arguments(value) == first


# --- @ag.tool -----------------------------------------------------------------------------------------


def run_tool_session(tracing: GuardedTracing, session_id: str, name: str, args, kwargs, result, is_async: bool):
    """A session calling one fuzzed tool three times, then a final answer; what the caller got back."""

    def body(*a, **k):
        return result

    async def abody(*a, **k):
        return result

    decorated = ag.tool(abody if is_async else body, name=name, tracer_provider=tracing.tracer_provider)
    got = []
    with tracing.session(session_id):
        tracing.record_model_call(tool_calls=1, input_tokens=10, output_tokens=5)
        for _ in range(3):
            outcome = asyncio.run(decorated(*args, **kwargs)) if is_async else decorated(*args, **kwargs)
            got.append(outcome)
        tracing.record_model_call(input_tokens=10, output_tokens=5)
    return got


@fuzz_settings(150)
@given(
    name=NAMES,
    args=st.lists(python_values(max_leaves=8), max_size=3),
    kwargs=st.dictionaries(st.text(max_size=8), python_values(max_leaves=8), max_size=3),
    result=python_values(max_leaves=10),
    is_async=st.booleans(),
    capture=st.booleans(),
)
def test_tool_decorated_functions_fail_open_and_judge_deterministically(name, args, kwargs, result, is_async, capture):
    before = _internal_errors.counts()
    with content_capture(capture), GuardedTracing() as tracing:
        got_1 = run_tool_session(tracing, "fuzz-1", name, args, kwargs, result, is_async)
        got_2 = run_tool_session(tracing, "fuzz-2", name, args, kwargs, result, is_async)
        exported_json(tracing.spans())  # the exporters' encoding copes with whatever went on the spans
        contained = internal_errors_since(before)
        counted = sum(metric_sum(tracing, A.METRIC_INTERNAL_ERRORS).values())

    assert all(outcome is result for outcome in got_1 + got_2)  # the tool's own value, untouched
    first, second = tracing.verdict("fuzz-1"), tracing.verdict("fuzz-2")
    tool_spans = [s for s in tracing.spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OP_EXECUTE_TOOL]
    assert len(tool_spans) == 6
    assert first.steps == 4
    opaque_args = any(s.attributes.get(A.TOOL_ARGS_OPAQUE) for s in tool_spans)
    opaque_result = len({s.attributes[A.TOOL_RESULT_FINGERPRINT] for s in tool_spans}) > 1
    if opaque_args or opaque_result:
        # A value the guard does not read: every call (or result) is its own, never a repeat.
        if opaque_args:
            assert all(s.attributes.get(A.TOOL_ARGS_OPAQUE) for s in tool_spans)
            assert len({s.attributes[A.TOOL_ARGS_FINGERPRINT] for s in tool_spans}) == 6
        else:
            assert len({s.attributes[A.TOOL_RESULT_FINGERPRINT] for s in tool_spans}) == 6
        assert first.stop_reason != "tool_loop" and second.stop_reason != "tool_loop"
    else:
        assert verdict_key(first) == verdict_key(second)
        assert first.stop_reason == "tool_loop"  # the same call three times, whatever it was
        assert len({s.attributes[A.TOOL_ARGS_FINGERPRINT] for s in tool_spans}) == 1
    assert counted == sum(contained.values())  # anything contained was counted, once
    # Fingerprinting is total ("any Python value gives a deterministic form"): no tool call lost its telemetry.
    assert not {"tool.start", "tool.result", "tool.error"} & set(contained), contained


@pytest.mark.parametrize("capture", [False, True])
@pytest.mark.parametrize("is_async", [False, True])
def test_a_tool_exception_reaches_the_caller_unchanged_even_if_it_cannot_be_printed(capture, is_async):
    class Unprintable(Exception):
        __str__ = EvilEverything.__str__  # (a raising __repr__ would break asyncio itself, not the guard)

    raised = Unprintable()

    def body(order):
        raise raised

    async def abody(order):
        raise raised

    with content_capture(capture), GuardedTracing() as tracing:
        tool = ag.tool(abody if is_async else body, name="lookup", tracer_provider=tracing.tracer_provider)
        with tracing.session("boom"):
            with pytest.raises(Unprintable) as caught:
                asyncio.run(tool(EvilEverything())) if is_async else tool(EvilEverything())
        exported_json(tracing.spans())
    assert caught.value is raised
    (span,) = [s for s in tracing.spans() if s.name == "execute_tool lookup"]
    assert span.attributes[A.ERROR_TYPE].endswith("Unprintable")  # the judge still sees a failed call
    assert span.status.status_code.name == "ERROR"


@pytest.mark.parametrize("capture", [False, True])
def test_a_session_ended_by_an_unprintable_exception_is_still_judged_error(capture):
    class Unprintable(Exception):
        __str__ = __repr__ = EvilEverything.__repr__

    with content_capture(capture), GuardedTracing() as tracing:
        with pytest.raises(Unprintable):
            with tracing.session("unprintable"):
                tracing.record_model_call(tool_calls=1)
                raise Unprintable()
        exported_json(tracing.spans())
    assert tracing.verdict("unprintable").stop_reason == "error"
    assert tracing.session_span("unprintable").attributes[A.STOP_REASON] == "error"


@pytest.mark.parametrize("make", [EvilClass, EvilHash, EvilEverything], ids=lambda make: make.__name__)
def test_objects_that_break_isinstance_or_hashing_are_opaque(make):
    # Drawn by hand: hypothesis itself cannot handle an object whose __class__ raises.
    with GuardedTracing() as tracing:
        tool = ag.tool(lambda value: make(), name="lookup", tracer_provider=tracing.tracer_provider)
        with tracing.session("odd"):
            for _ in range(3):
                tool(make())
            tracing.record_model_call()
    assert tracing.verdict("odd").stop_reason == "completed"  # unread objects never make a repeat
    spans = [s for s in tracing.spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OP_EXECUTE_TOOL]
    assert [s.attributes[A.TOOL_ARGS_OPAQUE] for s in spans] == [True] * 3
    fingerprinter = Fingerprinter("lookup")
    first, second = fingerprinter.arguments({"v": make()}), fingerprinter.arguments({"v": make()})
    assert first.opaque and first.fingerprint != second.fingerprint


# --- foreign spans through the real processor ------------------------------------------------------------


def run_recipes(recipes: list[SpanRecipe], order: list[int]) -> tuple[GuardedTracing, list, dict[str, int], float]:
    """Play the spans inside a session; the tracing, its export digest, what was contained and
    how much of it the ``agentguard.internal_errors`` metric counted.

    The guard is shut down before the exporter, so sessions the spans left open end (as
    ``abandoned``) while their verdict spans can still be exported."""
    before = _internal_errors.counts()
    with GuardedTracing() as tracing:
        with tracing.session("foreign"):
            play_spans(tracing, recipes, order)
        tracing.processor.shutdown()
        counted = sum(metric_sum(tracing, A.METRIC_INTERNAL_ERRORS).values())
    return tracing, export_digest(tracing.spans()), internal_errors_since(before), counted


@st.composite
def recipes_and_order(draw):
    recipes = draw(span_recipes)
    order = draw(st.permutations(range(len(recipes))))
    return recipes, list(order)


@fuzz_settings(250)
@given(case=recipes_and_order())
def test_foreign_span_attributes_of_every_type_never_raise_and_judge_deterministically(case):
    recipes, order = case
    tracing_1, digest_1, contained_1, counted_1 = run_recipes(recipes, order)
    tracing_2, digest_2, contained_2, _ = run_recipes(recipes, order)
    assert digest_1 == digest_2  # same spans, same stamps, same stall events, same verdict attributes
    assert verdict_key(tracing_1.verdicts.get("foreign")) == verdict_key(tracing_2.verdicts.get("foreign"))
    assert contained_1 == contained_2
    assert counted_1 == sum(contained_1.values())
    exported_json(tracing_1.spans())


# --- the same spans through replay ----------------------------------------------------------------------


def replay_digest(path: str, policy: Policy) -> object:
    try:
        judged = replay_files([path], policy)
    except InputError as error:
        return ("unusable input", str(error).split(":", 1)[-1])  # the documented outcome: exit 2, one line
    return [(session.session_id, [(s.sequence, s.kind, s.name, s.args_fingerprint, s.result_fingerprint, s.failed,
                                   s.empty, s.final, s.claims, s.tokens) for s in session.steps], verdict_key(verdict))
            for session, verdict in judged]


def live_verdicts(tracing: GuardedTracing) -> dict[str, list]:
    """Session id -> the verdicts the live processor wrote (session spans and verdict spans)."""
    found: dict[str, list] = {}
    for span in tracing.spans():
        attrs = span.attributes or {}
        ours = span.instrumentation_scope is not None and span.instrumentation_scope.name == "otel_agentguard"
        if ours and A.STOP_REASON in attrs and A.SESSION_ID in attrs:
            alerts = sorted((e.attributes[A.PROBE], tuple(e.attributes[A.EVIDENCE])) for e in span.events
                            if e.name == A.STALL_EVENT)
            found.setdefault(attrs[A.SESSION_ID], []).append(
                (attrs[A.STOP_REASON], attrs[A.STEPS], attrs[A.TOKENS], alerts))
    return {key: sorted(value) for key, value in found.items()}


def replayed_verdicts(path: str, policy: Policy) -> dict[str, list]:
    found: dict[str, list] = {}
    for session, verdict in replay_files([path], policy):
        alerts = sorted((a.probe, a.evidence) for a in verdict.alerts)
        found.setdefault(session.session_id, []).append((verdict.stop_reason, verdict.steps, verdict.tokens, alerts))
    return {key: sorted(value) for key, value in found.items()}


def known_live_replay_gap(recipes: list[SpanRecipe]) -> bool:
    """The span shapes live and replay judge differently today (see the xfail tests below)."""
    for recipe in recipes:
        if recipe.attributes.get(A.VERDICT):
            return True
        if A.SESSION_ID in recipe.attributes and not (isinstance(recipe.attributes[A.SESSION_ID], str)
                                                      and recipe.attributes[A.SESSION_ID]):
            return True
    runs = [explicit_session(r.attributes) for r in recipes
            if r.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT and explicit_session(r.attributes)]
    return len(runs) != len(set(runs))


@fuzz_settings(200)
@given(case=recipes_and_order())
def test_foreign_spans_replayed_from_an_otlp_file_never_raise_and_give_the_live_verdicts(case):
    recipes, order = case
    tracing = run_recipes(recipes, order)[0]
    policy = tracing.processor.policy
    with otlp_file(tracing.spans()) as path:
        first = replay_digest(path, policy)
        second = replay_digest(path, policy)
        assert first == second
        if first[0] != "unusable input" and not known_live_replay_gap(recipes):
            # One judge, two feeds: the file gives the verdicts the live run gave.
            assert replayed_verdicts(path, policy) == live_verdicts(tracing)


def _replay_of(recipes: list[SpanRecipe]) -> tuple[dict, dict]:
    tracing = run_recipes(recipes, list(range(len(recipes))))[0]
    with otlp_file(tracing.spans()) as path:
        return live_verdicts(tracing), replayed_verdicts(path, tracing.processor.policy)


TOOL_STEP = {A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup"}


def test_replay_matches_live_for_a_step_under_a_span_marked_as_a_verdict():
    live, replayed = _replay_of([SpanRecipe("marked", {A.VERDICT: True}, "unset", False),
                                 SpanRecipe("execute_tool lookup", TOOL_STEP, "unset", True)])
    assert replayed == live


def test_replay_matches_live_for_an_empty_agentguard_session_id():
    live, replayed = _replay_of([SpanRecipe("execute_tool lookup", {**TOOL_STEP, A.SESSION_ID: "",
                                                                    A.GEN_AI_CONVERSATION_ID: "conv-1"}, "unset", False)])
    assert replayed == live


def test_replay_matches_live_for_two_overlapping_session_spans_of_one_session():
    agent = {A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.GEN_AI_CONVERSATION_ID: "conv-2"}
    live, replayed = _replay_of([SpanRecipe("invoke_agent", agent, "unset", False),
                                 SpanRecipe("invoke_agent", agent, "unset", False)])
    assert replayed == live


@pytest.mark.parametrize("sequence", ["7", (7,)])
def test_a_foreign_non_integer_sequence_is_ignored_without_an_internal_error(sequence):
    before = _internal_errors.counts()
    with GuardedTracing() as tracing:
        with tracing.session("odd-sequence"):
            tracing.tracer.start_span("other", attributes={A.SEQUENCE: sequence}).end()
            tracing.record_model_call()
    assert tracing.verdict("odd-sequence").stop_reason == "completed"
    assert internal_errors_since(before) == {}


def test_a_tool_span_with_deeply_nested_json_arguments_is_still_a_step_live_and_in_replay():
    deep = {A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup",
            A.GEN_AI_TOOL_CALL_ARGUMENTS: "[" * 5000 + "]" * 5000}
    before = _internal_errors.counts()
    tracing = run_recipes([SpanRecipe("execute_tool lookup", deep, "unset", False)] * 3, [0, 1, 2])[0]
    assert internal_errors_since(before) == {}
    live = live_verdicts(tracing)
    assert live["foreign"][0][1] == 3  # three tool steps (a tool_loop)
    with otlp_file(tracing.spans()) as path:
        try:
            replayed: object = replayed_verdicts(path, tracing.processor.policy)
        except InputError as error:
            replayed = f"unusable input: {error}"
    assert replayed == live


# --- failures inside the guard: contained and counted --------------------------------------------------


def _raise(*args, **kwargs):
    raise Boom("injected fault")


# Where a fault is injected -> the kinds of failure it may be counted as (depends on the path:
# with or without a session span, a stall or none).
FAULTS = {
    "otel_agentguard.judge.policy.Policy.fingerprinter": {"tool.start"},
    "otel_agentguard.instrumentation._tool_span.is_empty": {"tool.result"},
    "otel_agentguard.live.processor.step_from_attributes": {"processor.step"},
    "otel_agentguard.judge.probes.tool_loop.ToolLoop.observe": {"probe.tool_loop"},
    "otel_agentguard.live.metrics.GuardMetrics.stall": {"processor.on_end", "processor.end_session"},
    "otel_agentguard.live.metrics.GuardMetrics.session_ended": {"processor.on_end", "processor.end_session"},
    # (a step whose session could not open at its start tries again at its end, as a late-marked one)
    "otel_agentguard.live.sessions.LiveSessions._new_session": {"processor.on_start", "processor.on_end"},
    "otel_agentguard.live.processor.AgentGuardSpanProcessor.end_session": {"session.exit"},
    "otel_agentguard.live.verdicts.VerdictWriter.verdict_span": {"processor.on_end"},
    "otel_agentguard.judge.session_judge.SessionJudge.finish": {"processor.end_session", "processor.on_end"},
}


@fuzz_settings(150)
@given(fault=st.sampled_from(sorted(FAULTS)), result=python_values(max_leaves=5), with_session=st.booleans(),
       is_async=st.booleans())
def test_an_injected_fault_anywhere_is_contained_and_counted(fault, result, with_session, is_async):
    before = _internal_errors.counts()
    with GuardedTracing() as tracing, mock.patch(fault, _raise):
        def body(order):
            return result

        async def abody(order):
            return result

        tool = ag.tool(abody if is_async else body, name="lookup", tracer_provider=tracing.tracer_provider)
        got = []
        if with_session:
            with tracing.session("faulty"):
                for _ in range(4):
                    got.append(asyncio.run(tool("A1")) if is_async else tool("A1"))
                tracing.record_model_call()
        else:
            for _ in range(4):
                got.append(asyncio.run(tool("A1")) if is_async else tool("A1"))
            tracing.record_model_call()
        tracing.tracer_provider.force_flush()
        contained = internal_errors_since(before)
        counted = metric_sum(tracing, A.METRIC_INTERNAL_ERRORS)
    assert all(outcome is result for outcome in got)
    # The fault fires only where its code path runs (no session span: no end_session; no stall:
    # no stall metric); where it did fire, it was contained under its kind and counted once.
    assert set(contained) <= FAULTS[fault], contained
    assert {dict(labels)["kind"]: value for labels, value in counted.items()} == contained


@pytest.mark.parametrize("fault", ["otel_agentguard.judge.policy.Policy.fingerprinter",
                                   "otel_agentguard.live.processor.step_from_attributes",
                                   "otel_agentguard.judge.probes.tool_loop.ToolLoop.observe",
                                   "otel_agentguard.judge.session_judge.SessionJudge.finish"])
def test_the_faults_above_do_fire(fault):
    """The property test above must not pass vacuously: each fault here is hit and counted."""
    before = _internal_errors.counts()
    with GuardedTracing() as tracing, mock.patch(fault, _raise):
        tool = ag.tool(lambda order: {"order": order}, name="lookup", tracer_provider=tracing.tracer_provider)
        with tracing.session("faulty"):
            for _ in range(4):
                tool("A1")
            tracing.record_model_call()
        counted = metric_sum(tracing, A.METRIC_INTERNAL_ERRORS)
    contained = internal_errors_since(before)
    assert contained and set(contained) <= FAULTS[fault], contained
    assert {dict(labels)["kind"]: value for labels, value in counted.items()} == contained
