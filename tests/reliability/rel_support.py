"""Shared pieces of the reliability suite: hostile values, span recipes and read-outs.

Imported by the test modules beside it (pytest puts this folder on ``sys.path``;
the name is unique across the test tree on purpose).
"""

from __future__ import annotations

import dataclasses
import decimal
import enum
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from opentelemetry.trace import Status, StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.exporters import encode_request
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.testing import GuardedTracing

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

# Every hypothesis test here: no per-example deadline (CI machines stall), and fixtures built
# once per test, not per example, are fine.
FUZZ = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)


def fuzz_settings(max_examples: int) -> settings:
    return settings(max_examples=max_examples, **FUZZ)


# --- hostile Python values (tool arguments and results) ----------------------------------------------


class Boom(Exception):
    """Raised by the hostile objects below."""


def _boom(*args: Any, **kwargs: Any) -> Any:
    raise Boom("planted failure")


class EvilRepr:
    __repr__ = __str__ = __format__ = _boom


class EvilEq:
    __eq__ = __ne__ = __lt__ = __gt__ = _boom

    def __hash__(self) -> int:
        return 7


class EvilHash:
    __hash__ = _boom  # type: ignore[assignment]
    __eq__ = _boom


class EvilEverything:
    """Every dunder the guard might touch raises."""

    __repr__ = __str__ = __eq__ = __hash__ = __len__ = __iter__ = __bool__ = __format__ = _boom  # type: ignore[assignment]
    __getattr__ = _boom
    __reduce__ = __reduce_ex__ = __sizeof__ = _boom


class EvilDict:
    @property
    def __dict__(self) -> Any:  # type: ignore[override]
        raise Boom("no state")


class EvilClass:
    """Breaks isinstance() on itself (hypothesis cannot draw it: see the plain tests)."""

    @property
    def __class__(self) -> Any:  # type: ignore[override]
        raise Boom("no class")


class EvilModelDump:
    def model_dump(self) -> Any:
        raise Boom("model_dump failed")


class SelfDumping:
    """A model whose dump contains itself."""

    def model_dump(self) -> Any:
        dumped: dict[str, Any] = {"me": None}
        dumped["me"] = dumped
        return dumped


class EvilMapping(Mapping):
    def __getitem__(self, key: Any) -> Any:
        raise Boom("getitem")

    def __iter__(self) -> Iterator[Any]:
        raise Boom("iter")

    def __len__(self) -> int:
        raise Boom("len")


class HalfMapping(Mapping):
    """Iterates fine, then fails on the second item."""

    def __getitem__(self, key: Any) -> Any:
        if key == "b":
            raise Boom("getitem b")
        return 1

    def __iter__(self) -> Iterator[Any]:
        return iter(("a", "b"))

    def __len__(self) -> int:
        return 2


class EvilStr(str):
    __str__ = __repr__ = __eq__ = __ne__ = __len__ = __iter__ = strip = encode = _boom  # type: ignore[assignment]

    def __hash__(self) -> int:
        return 11


class EvilInt(int):
    __int__ = __index__ = __str__ = __repr__ = __float__ = __format__ = _boom  # type: ignore[assignment]


class EvilFloat(float):
    __float__ = __str__ = __repr__ = is_integer = _boom  # type: ignore[assignment]


class EvilList(list):
    __iter__ = __len__ = __repr__ = _boom  # type: ignore[assignment]


class EvilDictSubclass(dict):
    items = keys = values = __iter__ = __len__ = __repr__ = _boom  # type: ignore[assignment]


@dataclasses.dataclass
class EvilDataclass:
    x: int = 1

    def __getattribute__(self, name: str) -> Any:
        if name == "x":
            raise Boom("field")
        return object.__getattribute__(self, name)


class Colour(enum.Enum):
    RED = 1
    WEIRD = float("nan")


class SlotsOnly:
    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a = 1


class WithState:
    def __init__(self, value: Any) -> None:
        self.public = value
        self._private = "never fingerprinted"


EVIL_FACTORIES = (
    EvilRepr, EvilEq, EvilHash, EvilEverything, EvilDict, EvilModelDump, SelfDumping, EvilMapping,
    HalfMapping, lambda: EvilStr("x"), lambda: EvilInt(5), lambda: EvilFloat(1.5), lambda: EvilList([1, 2]),
    lambda: EvilDictSubclass(a=1), EvilDataclass, lambda: Colour.RED, lambda: Colour.WEIRD, SlotsOnly,
    lambda: decimal.Decimal("sNaN"), lambda: decimal.Decimal("-Infinity"), lambda: decimal.Decimal("1e999999"),
    lambda: 10**5000, lambda: -(10**4301), object, lambda: type, lambda: len, lambda: (lambda: None), lambda: iter([1]),
    lambda: memoryview(b"abc"), lambda: bytearray(b"\x00\xff"), lambda: float("nan"), lambda: float("-inf"),
    lambda: complex(1, float("nan")), lambda: range(10**12), lambda: Ellipsis, lambda: NotImplemented,
)

evil_objects = st.sampled_from(EVIL_FACTORIES).map(lambda make: make())


def _deep(depth: int, kind: str) -> Any:
    value: Any = "bottom"
    for level in range(depth):
        value = [value] if kind == "list" else {"k": value} if kind == "dict" else (value, level)
    return value


deep_values = st.builds(_deep, st.integers(60, 3000), st.sampled_from(["list", "dict", "tuple"]))
huge_strings = st.sampled_from([10**5, 10**6]).map(lambda n: "€" * n)
huge_containers = st.sampled_from([60_000]).map(lambda n: list(range(n)))
surrogates = st.sampled_from(["\ud800", "a\udfffb", "\udcff" * 3])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(alphabet="0123456789.-eE+", max_size=12),  # strings the canonical form reads as numbers
    st.binary(max_size=40),
    surrogates,
    st.decimals(allow_nan=True, allow_infinity=True),
    st.datetimes(),
    st.uuids(),
)


def _with_cycle(value: Any, kind: str) -> Any:
    if kind == "list":
        outer: list[Any] = [value]
        outer.append(outer)
        return outer
    if kind == "dict":
        mapping: dict[str, Any] = {"v": value}
        mapping["self"] = mapping
        return mapping
    # two containers that point at each other
    left: dict[str, Any] = {"v": value}
    right: list[Any] = [left]
    left["right"] = right
    return [left, right]


def python_values(max_leaves: int = 25) -> st.SearchStrategy[Any]:
    """Anything an agent might hand a tool or get back from one, and worse."""
    leaves = st.one_of(scalars, evil_objects, st.builds(WithState, scalars))
    nested = st.recursive(
        leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=5),
            st.tuples(children, children),
            st.dictionaries(st.one_of(st.text(max_size=10), st.integers(), st.floats(allow_nan=True), st.none(),
                                      st.booleans()), children, max_size=5),
            # a key whose __eq__ raises (built here: hypothesis compares the keys it draws)
            st.builds(lambda value: {EvilEq(): value, "k": value}, children),
            st.frozensets(st.one_of(st.integers(), st.text(max_size=5)), max_size=5),
            st.builds(WithState, children),
        ),
        max_leaves=max_leaves,
    )
    cyclic = st.builds(_with_cycle, nested, st.sampled_from(["list", "dict", "pair"]))
    # Huge values cost tens of milliseconds each: one draw in twenty, so the suite stays fast.
    shapes = {"nested": nested, "cyclic": cyclic, "deep": deep_values, "huge_string": huge_strings,
              "huge_container": huge_containers}
    weights = ["nested"] * 12 + ["cyclic"] * 4 + ["deep"] * 2 + ["huge_string", "huge_container"]
    return st.sampled_from(weights).flatmap(shapes.__getitem__)


# --- span attributes of every type --------------------------------------------------------------------

_JSON_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=10,
).map(json.dumps)
_BROKEN_JSON = st.sampled_from(['{"a": ', "[1, 2", '"unterminated', "{'single': 1}", "[NaN]", '{"a": 1}}',
                                "[" * 5000, '{"a": ' * 3000, '"\\ud800"', "{}" * 3, "[]extra", '"' + "x" * 10])
_OUTPUT_MESSAGES = st.lists(
    st.fixed_dictionaries({
        "role": st.sampled_from(["assistant", 1, None]),
        "parts": st.one_of(st.none(), st.text(max_size=3), st.lists(st.one_of(
            st.fixed_dictionaries({"type": st.sampled_from(["text", "tool_call", "other"]),
                                   "content": st.one_of(st.text(max_size=20), st.integers(), st.none())}),
            st.integers(), st.text(max_size=3)), max_size=3)),
    }) | st.integers() | st.text(max_size=3),
    max_size=3,
).map(json.dumps)

attribute_texts = st.one_of(
    st.text(max_size=30), surrogates, _JSON_TEXT, _BROKEN_JSON, _OUTPUT_MESSAGES,
    st.sampled_from(["", " ", "stop", "end_turn", "tool_calls", "write", "read", "execute_tool", "chat",
                     "invoke_agent", "finalize", "-0", "1e999", "NaN"]),
    st.sampled_from([10**5, 10**6 + 7]).map(lambda n: "{" + " " * n + "}"),
)
attribute_scalars = st.one_of(
    attribute_texts,
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=2**63, max_value=2**70),  # past OTLP's int64: the SDK keeps it
    st.floats(allow_nan=True, allow_infinity=True),
)
attribute_values = st.one_of(
    attribute_scalars,
    st.lists(attribute_texts, max_size=4),
    st.lists(st.booleans(), max_size=4),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=4),
    st.lists(st.one_of(st.integers(), st.text(max_size=3)), max_size=4),  # mixed: the SDK drops it
    st.binary(max_size=20),
)

KNOWN_KEYS = (
    A.GEN_AI_OPERATION_NAME, A.GEN_AI_TOOL_NAME, A.GEN_AI_TOOL_CALL_ARGUMENTS, A.GEN_AI_TOOL_CALL_RESULT,
    A.GEN_AI_TOOL_CALL_ID, A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS,
    A.GEN_AI_RESPONSE_FINISH_REASONS, A.GEN_AI_OUTPUT_MESSAGES, A.GEN_AI_REQUEST_MODEL, A.GEN_AI_RESPONSE_MODEL,
    A.GEN_AI_CONVERSATION_ID, A.SESSION_ID_SEMCONV, A.SESSION_ID, A.SEQUENCE, A.TOOL_ARGS_FINGERPRINT,
    A.TOOL_RESULT_FINGERPRINT, A.TOOL_RESULT_EMPTY, A.TOOL_EFFECT, A.FINAL_CLAIMS, A.RESPONSE_TOOL_CALLS,
    A.NESTED_STEP, A.VERDICT, A.PROFILE, A.TASK_TYPE, A.ERROR_TYPE, A.STOP_REASON, A.ENFORCED,
    "traceloop.span.kind", "openinference.span.kind", "llm.request.type", "traceloop.entity.input",
    "traceloop.entity.output", "traceloop.entity.name", "tool.name", "input.value", "output.value",
    "gen_ai.completion.0.finish_reason", "gen_ai.completion.0.content", "llm.model_name",
    "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.prompt",
)
_OPERATIONS = st.sampled_from(["execute_tool", "chat", "text_completion", "generate_content", "invoke_agent",
                               "embeddings", "", "EXECUTE_TOOL"])

span_attributes = st.builds(
    lambda operation, known, other: {**other, **known, **operation},
    st.one_of(st.just({}), _OPERATIONS.map(lambda op: {A.GEN_AI_OPERATION_NAME: op}),
              attribute_values.map(lambda v: {A.GEN_AI_OPERATION_NAME: v})),
    st.dictionaries(st.sampled_from(KNOWN_KEYS), attribute_values, max_size=8),
    st.dictionaries(st.text(max_size=12), attribute_values, max_size=3),
)


@dataclasses.dataclass(frozen=True)
class SpanRecipe:
    name: str
    attributes: dict[str, Any]
    status: str  # "unset", "ok", "error"
    child_of_previous: bool


_garbage_recipe = st.builds(
    SpanRecipe, st.one_of(st.text(max_size=20), st.sampled_from(["execute_tool lookup", "chat gpt"])),
    span_attributes, st.sampled_from(["unset", "ok", "error"]), st.booleans())
# Well-formed GenAI spans (what real instrumentations write), so every list judges real steps too.
_tool_call = st.fixed_dictionaries({
    A.GEN_AI_OPERATION_NAME: st.just(A.OP_EXECUTE_TOOL),
    A.GEN_AI_TOOL_NAME: st.sampled_from(["lookup", "search", "refund", "finalize"]),
    A.GEN_AI_TOOL_CALL_ARGUMENTS: st.sampled_from(['{"order": "A1"}', '{"order": "B2"}', '{"q": [1, 2]}', "{}"]),
}, optional={
    A.GEN_AI_TOOL_CALL_RESULT: st.sampled_from(['{"state": "stalled"}', "[]", '""', '{"ok": true}']),
    A.ERROR_TYPE: st.just("TimeoutError"),
})
_model_call = st.fixed_dictionaries({
    A.GEN_AI_OPERATION_NAME: st.sampled_from(["chat", "text_completion", "generate_content"]),
    A.GEN_AI_REQUEST_MODEL: st.sampled_from(["gpt-4o", "claude-sonnet-4"]),
    A.GEN_AI_USAGE_INPUT_TOKENS: st.integers(0, 3000),
    A.GEN_AI_USAGE_OUTPUT_TOKENS: st.integers(0, 500),
    A.GEN_AI_RESPONSE_FINISH_REASONS: st.sampled_from([("stop",), ("tool_calls",), ("end_turn",), ("length",)]),
}, optional={
    A.GEN_AI_OUTPUT_MESSAGES: _OUTPUT_MESSAGES,
    A.RESPONSE_TOOL_CALLS: st.integers(0, 3),
    A.FINAL_CLAIMS: st.sampled_from([(), ("write",)]),
})
_well_formed_recipe = st.builds(
    SpanRecipe, st.sampled_from(["execute_tool lookup", "chat gpt-4o"]), st.one_of(_tool_call, _model_call),
    st.sampled_from(["unset", "unset", "error"]), st.booleans())

span_recipes = st.lists(st.one_of(_garbage_recipe, _well_formed_recipe, _well_formed_recipe), min_size=1, max_size=10)


def play_spans(tracing: GuardedTracing, recipes: list[SpanRecipe], end_order: list[int]) -> None:
    """Start every span (a child of the previous one when the recipe says so), then end them in
    ``end_order``; all inside whatever context is current."""
    from opentelemetry import trace

    spans = []
    for recipe in recipes:
        context = trace.set_span_in_context(spans[-1]) if recipe.child_of_previous and spans else None
        spans.append(tracing.tracer.start_span(recipe.name, context=context, attributes=recipe.attributes))
    for index in end_order:
        recipe, span = recipes[index], spans[index]
        if recipe.status != "unset":
            span.set_status(Status(StatusCode.ERROR if recipe.status == "error" else StatusCode.OK, "x"))
        span.end()


# --- read-outs -----------------------------------------------------------------------------------------


def exported_json(spans: Any) -> str:
    """The OTLP/JSON bytes an exporter would send (what the privacy tests search)."""
    return json.dumps(encode_request(spans))


def verdict_key(verdict: Verdict | None) -> Any:
    """Everything about a verdict that must not depend on timing or on which run it was."""
    if verdict is None:
        return None
    return (verdict.stop_reason, verdict.profile, verdict.steps, verdict.tokens, verdict.model_calls,
            round(verdict.cost_usd, 9),
            tuple((a.probe, a.sequence, a.evidence, a.detail, a.disposal, a.budget_kind) for a in verdict.alerts))


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value


def export_digest(spans: Any) -> list[Any]:
    """The exported spans without ids and times: equal for two runs of the same input."""
    digest = []
    for span in spans:
        attrs = {key: _plain(value) for key, value in (span.attributes or {}).items()}
        events = tuple((e.name, tuple(sorted((k, _plain(v)) for k, v in (e.attributes or {}).items())))
                       for e in span.events)
        digest.append((span.name, repr(sorted(attrs.items())), repr(events), span.status.status_code.name))
    return sorted(digest)


def metric_sum(tracing: GuardedTracing, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
    """Counter values of metric ``name`` by label set."""
    return {tuple(sorted(labels.items())): point.value for labels, point in tracing.metric_points(name)}


def internal_errors_since(before: dict[str, int]) -> dict[str, int]:
    after = _internal_errors.counts()
    return {kind: n - before.get(kind, 0) for kind, n in after.items() if n != before.get(kind, 0)}


@contextmanager
def content_capture(on: bool) -> Iterator[None]:
    """Set the GenAI content-capture switch for a block (hypothesis-safe: no fixture)."""
    saved = os.environ.get(CAPTURE)
    if on:
        os.environ[CAPTURE] = "true"
    else:
        os.environ.pop(CAPTURE, None)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(CAPTURE, None)
        else:
            os.environ[CAPTURE] = saved


@contextmanager
def otlp_file(spans: Any) -> Iterator[str]:
    """The spans written as one OTLP JSON line to a temporary file, as the exporters write them."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.jsonl")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(encode_request(spans)) + "\n")
        yield path
