"""The compiled step reader makes the step the Python reader makes, or leaves the span to it.

``steps.step_from_attributes`` asks the compiled reader (``_step_reader.c``, where the package
was built with a C compiler) first; it reads the values spans usually hold and returns None for
the others, which the Python functions (``steps._tool_step``, ``steps._model_step``, the
reference) then read. Here both read the same generated attributes: every step the compiled
reader makes must equal the reference's, field by field and type by type, and an error must be
the reference's error. Every other test of the package runs with the compiled reader in place.
"""

from __future__ import annotations

import dataclasses
import gc
import itertools
import sys
from typing import Any

import pytest
from compiled_modules import assert_frees_what_it_takes, python_code_run, skip_unless_built
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from otel_agentguard import attributes as A
from otel_agentguard import steps
from otel_agentguard.fingerprint import Fingerprinter
from otel_agentguard.payload_fingerprints import PayloadFingerprints
from otel_agentguard.policy import parse_policy
from otel_agentguard.repetition import summarize
from otel_agentguard.steps import MODEL, Step

COMPILED = steps._compiled
POLICY = parse_policy(
    """
version = "reader-1"
[tools.refund]
effect = "write"
noise_keys = ["request_id"]
[tools.lookup]
effect = "read"
"""
)


@pytest.fixture(autouse=True)
def compiled() -> None:
    skip_unless_built(COMPILED is not None, "otel_agentguard._step_reader", "steps are read in Python")


class _Text(str):
    """A str subclass: read by the reference, never taken for a plain string."""


class _Count(int):
    pass


KEYS = sorted({key for value in steps.compiled_keys().values()
               for key in ((value,) if isinstance(value, str) else value)})
TEXT = st.one_of(st.sampled_from(["", "x", "stop", "STOP", "End_Turn", "tool_calls", "tool_use", "length", "read",
                                  "write", "Write", "refund", "lookup", "gpt-4o", "[]", '{"a": 1}', "\u0130"]),
                 st.text(max_size=5))
COUNT = st.one_of(st.sampled_from([0, 1, 2, -1, 2**63 - 1, 2**63, -(2**63), 10**30]), st.integers(-3, 50))
# (No arbitrary object: an unreadable payload fingerprints to a random token, never twice the same.)
ODD = st.one_of(
    st.none(), st.booleans(), st.floats(allow_nan=False), st.just(float("nan")), st.binary(max_size=3),
    TEXT.map(_Text), COUNT.map(_Count), st.dictionaries(TEXT, COUNT, max_size=2),
)
VALUE = st.one_of(
    TEXT, COUNT,
    st.lists(TEXT, max_size=3).map(tuple), st.lists(TEXT, max_size=3),
    st.lists(st.one_of(TEXT, COUNT, ODD), max_size=3).map(tuple),
    ODD,
)
# Mostly the keys the readers read, a few they do not.
ATTRIBUTES = st.dictionaries(st.one_of(st.sampled_from(KEYS), st.sampled_from(["http.route", "gen_ai.system"])),
                             VALUE, max_size=9)
TIMES = st.one_of(st.integers(0, 2**64), st.just(0))


def _fields(step: Step) -> list[tuple[str, type, Any]]:
    return [(field.name, type(value), value) for field in dataclasses.fields(Step)
            for value in (getattr(step, field.name),)]


def _outcome(read: Any) -> tuple[str, Any]:
    try:
        step = read()
    except Exception as exc:  # deliberate: both readers must raise alike
        return "raised", (type(exc), str(exc))
    return ("left to Python", None) if step is None else ("read", _fields(step))


def _tool(attrs: dict[str, Any], payloads: Any = None, status_error: Any = False, span_name: str = "execute_tool x",
          times: tuple[int, int] = (5, 9)) -> tuple[tuple[str, Any], tuple[str, Any]]:
    # Fresh payload memories: a live one remembers what it was asked, and each reader asks once.
    def memory() -> Any:
        return payloads if payloads is not None else PayloadFingerprints()

    common = ("s1", 3, POLICY, span_name, *times, status_error)
    return (_outcome(lambda: COMPILED.tool_step(attrs, *common, memory())),
            _outcome(lambda: steps._tool_step(attrs, *common, memory())))


def _model(attrs: dict[str, Any], times: tuple[int, int] = (5, 9)) -> tuple[tuple[str, Any], tuple[str, Any]]:
    return (_outcome(lambda: COMPILED.model_step(attrs, "s1", 3, *times)),
            _outcome(lambda: steps._model_step(attrs, "s1", 3, POLICY, *times)))


def _assert_alike(compiled: tuple[str, Any], reference: tuple[str, Any]) -> None:
    if compiled[0] != "left to Python":
        assert compiled == reference


OUR_TOOL_SPAN = {A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "refund",
                 A.TOOL_ARGS_FINGERPRINT: "v1:ab", A.TOOL_RESULT_FINGERPRINT: "v1:cd", A.TOOL_RESULT_EMPTY: False}
FOREIGN_TOOL_SPAN = {A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "refund",
                     A.GEN_AI_TOOL_CALL_ARGUMENTS: '{"order": "A1", "request_id": "r9"}',
                     A.GEN_AI_TOOL_CALL_RESULT: '{"status": "ok"}'}
OUR_MODEL_SPAN = {A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_REQUEST_MODEL: "gpt-4o", A.GEN_AI_RESPONSE_MODEL: "gpt-4o-1",
                  A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",), A.RESPONSE_TOOL_CALLS: 0,
                  A.GEN_AI_USAGE_INPUT_TOKENS: 12, A.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
                  A.FINAL_CLAIMS: ("refund", "email"), A.FINAL_CLAIM_RULE: "en.done", A.FINAL_CLAIM_CLAUSE: 1,
                  A.OUTPUT_REPETITION: summarize("It is done. " * 4).attribute}


@settings(max_examples=1500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ATTRIBUTES, st.sampled_from([False, True, 1, None]), TIMES)
@example(OUR_TOOL_SPAN, False, 0)
@example(FOREIGN_TOOL_SPAN, False, 0)
@example({A.GEN_AI_TOOL_NAME: "", A.TOOL_EFFECT: "write", A.ERROR_TYPE: ""}, True, 1)
@example({A.GEN_AI_TOOL_NAME: 7, A.TOOL_RESULT_EMPTY: True, "output.value": "[]"}, False, 1)
@example({"traceloop.entity.name": "lookup", "input.value": "{}", A.TOOL_RESULT_FINGERPRINT: "r"}, False, 2)
def test_a_tool_step_is_read_as_the_python_reader_reads_it(attrs, status_error, end_ns):
    _assert_alike(*_tool(attrs, status_error=status_error, times=(3, end_ns)))


@settings(max_examples=1500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ATTRIBUTES, TIMES)
@example(OUR_MODEL_SPAN, 0)
@example({**OUR_MODEL_SPAN, A.FINAL_CLAIMS: "refund", A.FINAL_CLAIM_CLAUSE: True}, 0)
@example({**OUR_MODEL_SPAN, A.RESPONSE_TOOL_CALLS: True, A.GEN_AI_RESPONSE_FINISH_REASONS: ("STOP", "tool_calls")}, 0)
@example({**OUR_MODEL_SPAN, A.GEN_AI_USAGE_INPUT_TOKENS: 2**63 - 1, A.GEN_AI_USAGE_OUTPUT_TOKENS: 2**63}, 0)
@example({A.GEN_AI_RESPONSE_MODEL: "", A.GEN_AI_REQUEST_MODEL: "m", "llm.finish_reason": ("end_turn",)}, 0)
@example({A.RESPONSE_TOOL_CALLS: None, A.FINAL_CLAIMS: ()}, 0)
@example({A.GEN_AI_OUTPUT_MESSAGES: None, A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",)}, 0)
@example({A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls", "stop")}, 0)  # a tool call's reason first
@example({**OUR_MODEL_SPAN, A.FINAL_CLAIM_RULE: _Text("en.done")}, 0)
@example({**OUR_MODEL_SPAN, A.FINAL_CLAIM_RULE: 5, A.FINAL_CLAIM_CLAUSE: 2.0}, 0)
@example({"gen_ai.completion.0.role": "assistant", A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",)}, 0)
def test_a_model_step_is_read_as_the_python_reader_reads_it(attrs, end_ns):
    _assert_alike(*_model(attrs, times=(3, end_ns)))


class _Recording(dict):
    """Attributes that note every key read from them."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.read: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(key)  # type: ignore[arg-type]
        return super().__contains__(key)

    def __getitem__(self, key: Any) -> Any:
        self.read.add(key)
        return super().__getitem__(key)


def _keys_tool_name_reads() -> set[str]:
    recording = _Recording()
    steps.tool_name(recording)
    return recording.read


TOOL_NAME_KEYS = _keys_tool_name_reads()  # the compiled reader calls steps.tool_name itself


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(ATTRIBUTES)
@example(OUR_MODEL_SPAN)
@example(FOREIGN_TOOL_SPAN)
@example({A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",)})
def test_where_the_compiled_reader_reads_a_span_it_knows_every_attribute_python_reads(attrs):
    # The compiled reader is told the attributes to read (steps.compiled_keys()): one the Python
    # readers came to read without it being told would be one it ignores.
    for compiled, reference in ((lambda: COMPILED.model_step(attrs, "s", 1, 0, 0),
                                 lambda recording: steps._model_step(recording, "s", 1, POLICY, 0, 0)),
                                (lambda: COMPILED.tool_step(attrs, "s", 1, POLICY, "", 0, 0, False, PayloadFingerprints()),
                                 lambda recording: steps._tool_step(recording, "s", 1, POLICY, "", 0, 0, False,
                                                                    PayloadFingerprints()))):
        if _outcome(compiled)[0] != "read":
            continue
        recording = _Recording(attrs)
        reference(recording)
        assert recording.read <= set(KEYS) | TOOL_NAME_KEYS


@pytest.mark.parametrize(("read", "attrs"), [
    (_tool, OUR_TOOL_SPAN), (_tool, FOREIGN_TOOL_SPAN), (_model, OUR_MODEL_SPAN),
    (_model, {**OUR_MODEL_SPAN, A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",), A.RESPONSE_TOOL_CALLS: 2}),
    # A foreign model span without our attributes, and the shapes other instrumentations record.
    (_model, {A.GEN_AI_REQUEST_MODEL: "m", A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
              A.GEN_AI_USAGE_INPUT_TOKENS: 3}),
    (_model, {"llm.model_name": "m", "llm.token_count.prompt": 3, "llm.finish_reason": "stop"}),
    (_model, {**OUR_MODEL_SPAN, A.GEN_AI_USAGE_INPUT_TOKENS: 2**63 - 1, A.GEN_AI_USAGE_OUTPUT_TOKENS: 0}),
    (_model, {A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls", "stop")}),
], ids=["ours-tool", "foreign-tool", "ours-answer", "ours-tool-calls", "foreign-model", "legacy-counts",
        "the-largest-counts", "a-tool-call-before-an-answer"])
def test_the_usual_spans_are_read_in_c_and_the_unusual_left_to_python(read, attrs):
    compiled, reference = read(attrs)
    assert reference[0] == "read"
    legacy = "llm.token_count.prompt" in attrs  # counts under legacy names: the reference reads them
    assert compiled == (("left to Python", None) if legacy else reference)


class _BrokenPayloads:
    def __init__(self, result: Any, arguments: Any = "args"):
        self._result = result
        self._arguments = arguments

    def arguments(self, fingerprinter: Any, raw: Any) -> Any:
        return self._arguments

    def result(self, fingerprinter: Any, raw: Any) -> Any:
        if isinstance(self._result, Exception):
            raise type(self._result)(*self._result.args)  # a new one: a raised exception keeps its traceback
        return self._result() if callable(self._result) else self._result


def _endless() -> Any:
    return itertools.count()


def _one_then_failing() -> Any:
    yield "fp"
    raise KeyError("after one")


@pytest.mark.parametrize("result", [("fp", 0), ("fp", "yes"), ["fp", None], [None, True], ("fp",), ("a", "b", "c"), 5,
                                    (_Count(3), [1]), KeyError("boom"), _endless, _one_then_failing], ids=repr)
@pytest.mark.parametrize("arguments", ["args", _Text("args"), None, 5], ids=repr)
def test_what_the_payload_fingerprints_return_or_raise_is_taken_as_python_takes_it(result, arguments):
    compiled, reference = _tool(FOREIGN_TOOL_SPAN, payloads=_BrokenPayloads(result, arguments))
    assert compiled[0] != "left to Python"
    assert compiled == reference


class _Falsy:
    def __bool__(self) -> bool:
        return False


def test_a_false_fingerprinter_is_made_again_for_the_result_as_python_makes_it():
    class Counting:
        def __init__(self) -> None:
            self.made = 0

        def fingerprinter(self, name: str) -> Any:
            self.made += 1
            return _Falsy()

        def effect(self, name: str, fallback: Any) -> Any:
            return fallback

    compiled, reference = Counting(), Counting()
    payloads = _BrokenPayloads(("fp", False))
    step = COMPILED.tool_step(FOREIGN_TOOL_SPAN, "s", 1, compiled, "", 0, 0, False, payloads)
    assert step == steps._tool_step(FOREIGN_TOOL_SPAN, "s", 1, reference, "", 0, 0, False, payloads)  # type: ignore[arg-type]
    assert compiled.made == reference.made == 2


class _RaisingKey(str):
    """A key equal in hash to one the readers read, whose comparison raises."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        raise KeyError(f"compared {str(self)!r}")


@pytest.mark.parametrize("key", KEYS)
def test_a_key_whose_comparison_raises_is_met_as_python_meets_it(key):
    # Read by both, or by the reference alone (which may never look at it): the same outcome.
    plain = {A.GEN_AI_RESPONSE_MODEL: "m", A.GEN_AI_TOOL_NAME: "t"}
    attrs: dict[str, Any] = {_RaisingKey(key): "v", **{k: v for k, v in plain.items() if k != key}}
    for compiled, reference in (_tool(attrs), _model(attrs)):
        assert compiled in (reference, ("left to Python", None))


def test_a_callback_that_empties_the_attributes_does_not_pull_them_from_under_the_reader():
    attrs = {**FOREIGN_TOOL_SPAN, A.TOOL_EFFECT: "read", A.ERROR_TYPE: "Timeout"}

    class Emptying(PayloadFingerprints):
        def arguments(self, fingerprinter: Any, raw: Any) -> str:
            attrs.clear()  # the values read before are held by the reader
            return super().arguments(fingerprinter, raw)

    step = COMPILED.tool_step(attrs, "s1", 1, POLICY, "", 0, 0, False, Emptying())
    assert (step.name, step.failed, step.effect, step.empty) == ("refund", True, "write", False)
    assert step.result_fingerprint is not None


def test_reading_holds_on_to_nothing():
    payloads = PayloadFingerprints()
    cases = [OUR_TOOL_SPAN, FOREIGN_TOOL_SPAN, {A.GEN_AI_TOOL_NAME: 3}, OUR_MODEL_SPAN,
             {**OUR_MODEL_SPAN, A.FINAL_CLAIMS: ("b", "a", 1)}, {**OUR_MODEL_SPAN, A.OUTPUT_REPETITION: "{"}]
    # (Not the small ints and the singletons, which the whole interpreter shares.)
    held = [value for attrs in cases for value in attrs.values() if type(value) not in (int, bool)]
    texts = [_Text("tool") for _ in range(3)]

    def read_often() -> None:
        for _ in range(100):
            for attrs in cases:
                COMPILED.tool_step(attrs, texts[0], 1, POLICY, texts[1], 0, 0, False, payloads)
                COMPILED.model_step(attrs, texts[2], 1, 0, 0)
            for broken in (("fp",), KeyError("x")):
                with pytest.raises((ValueError, KeyError)):
                    COMPILED.tool_step(FOREIGN_TOOL_SPAN, "s", 1, POLICY, "", 0, 0, False, _BrokenPayloads(broken))
        gc.collect()  # which empties the free lists of small tuples, where the summaries' arguments wait

    read_often()
    # The result's fingerprint and emptiness, as the payloads remember them: the same tuple each time.
    held.append(payloads.result(POLICY.fingerprinter("refund"), FOREIGN_TOOL_SPAN[A.GEN_AI_TOOL_CALL_RESULT]))
    shared = [None, False, ()]  # the defaults every step takes (which Python 3.12 and later never free)
    before = [sys.getrefcount(value) for value in [*held, *texts]]
    before_shared = [sys.getrefcount(value) for value in shared]
    assert_frees_what_it_takes(read_often)
    assert [sys.getrefcount(value) for value in [*held, *texts]] == before
    # Thousands of steps made and freed: a default taken without its reference would show by the thousand.
    assert all(abs(sys.getrefcount(value) - count) < 200 for value, count in zip(shared, before_shared, strict=True))


def test_the_reader_is_configured_once_and_refuses_a_step_it_cannot_write():
    configuration = steps.compiled_configuration()
    assert configuration is not None
    step_type, names, defaults, keys, *rest = configuration

    @dataclasses.dataclass
    class WithDict:
        session_id: str

    def changed(at: int, value: Any) -> tuple[Any, ...]:
        return (*configuration[:at], value, *configuration[at + 1:])

    refused = [
        changed(0, WithDict),  # no slots
        changed(1, names[::-1]),  # fields in another order
        (step_type, names[:-1], defaults[:-1], keys, *rest),  # a field missing
        changed(3, {**keys, "raw_result": "output.value"}),  # a group given as one key
        changed(configuration.index(2**63 - 1), 2**64),  # a count limit beyond 64 bits
        changed(len(configuration) - 1, None),  # no summary reader
    ]
    for arguments in refused:
        with pytest.raises(TypeError):
            COMPILED.configure(*arguments)
    with pytest.raises(RuntimeError, match="configured once"):
        COMPILED.configure(*configuration)
    with pytest.raises(TypeError, match="must be a dict"):
        COMPILED.model_step(list(OUR_MODEL_SPAN.items()), "s", 1, 0, 0)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        COMPILED.model_step(OUR_MODEL_SPAN)


def test_step_from_attributes_takes_the_compiled_step_and_falls_back_for_the_rest(monkeypatch):
    made: list[Any] = []

    class Counting:
        def model_step(self, *arguments: Any) -> Any:
            made.append(COMPILED.model_step(*arguments))
            return made[-1]

    monkeypatch.setattr(steps, "_compiled", Counting())
    common = {"kind": MODEL, "session_id": "s", "sequence": 1, "policy": POLICY}
    answer = steps.step_from_attributes(OUR_MODEL_SPAN, **common)
    assert answer.final and answer.claims == ("email", "refund") and made[-1] is answer
    legacy = steps.step_from_attributes({"llm.token_count.prompt": 4}, **common)
    assert legacy.input_tokens == 4 and made[-1] is None  # left to Python, which read it
    assert steps.step_from_attributes(_Mapping(OUR_MODEL_SPAN), **common) == answer  # no dict: Python alone
    assert len(made) == 2


class _Mapping(dict):  # a dict subclass may read keys its own way: the compiled reader never sees it
    pass


def test_the_policys_caches_are_read_where_its_methods_would_answer_from_them(monkeypatch: pytest.MonkeyPatch) -> None:
    # A fingerprinter made already and a tool without a contract are read without calling the
    # policy's methods; a subclass, a replaced method or a tool with a contract goes to the methods.
    policy = parse_policy('version = "reads"\n[tools.refund]\neffect = "write"\n')
    made = policy.fingerprinter("lookup")
    calls: list[str] = []

    def counting(name: str) -> Any:
        original = getattr(type(policy), name)

        def method(self: Any, *args: Any) -> Any:
            calls.append(name)
            return original(self, *args)

        return method

    def read(tool: str, owner: Any = policy) -> Step:
        attrs = {**FOREIGN_TOOL_SPAN, A.GEN_AI_TOOL_NAME: tool}
        step = COMPILED.tool_step(attrs, "s", 1, owner, "", 0, 0, False, PayloadFingerprints())
        assert step == steps._tool_step(attrs, "s", 1, owner, "", 0, 0, False, PayloadFingerprints())
        return step

    assert read("lookup").effect is None and made is policy.fingerprinter("lookup")
    assert read("refund").effect == "write"
    attrs = {**FOREIGN_TOOL_SPAN, A.GEN_AI_TOOL_NAME: "lookup"}
    step, ran = python_code_run(lambda: COMPILED.tool_step(attrs, "s", 1, policy, "", 0, 0, False, PayloadFingerprints()))
    assert step is not None and not {"fingerprinter", "effect"} & {code.co_name for code in ran}
    subclass = type("OwnPolicy", (type(policy),), {"effect": counting("effect"), "fingerprinter": counting("fingerprinter")})
    own = parse_policy('version = "reads"\n')
    own.__class__ = subclass
    read("lookup", own)
    assert calls == ["fingerprinter", "effect"] * 2  # (the compiled reader, then the reference)
    calls.clear()
    monkeypatch.setattr(policy, "effect", lambda name, fallback=None: "write")  # on the object alone
    monkeypatch.setattr(policy, "fingerprinter", lambda name: Fingerprinter(name, key=b"its own"))
    assert read("lookup").effect == "write"
    monkeypatch.undo()
    monkeypatch.setattr(type(policy), "effect", counting("effect"))
    read("lookup")
    assert calls == ["effect"] * 2
