"""Canonical fingerprints of tool arguments and results."""

from __future__ import annotations

import copy
import dataclasses
import datetime
import decimal
import enum
import hashlib
import json
import logging
import os
import random
import re
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from otel_agentguard.environment_variables import OTEL_AGENTGUARD_FINGERPRINT_KEY
from otel_agentguard.judge.fingerprints.canonical import (
    DEFAULT_NOISE_KEYS,
    ArgumentsFingerprint,
    Fingerprinter,
    fingerprint_key,
    is_empty,
    set_fingerprint_key,
)
from otel_agentguard.judge.policy import parse_policy

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

POLICY = parse_policy(
    """
version = "test"

[tools.fetch_sources]
unordered_keys = ["urls"]
noise_keys = ["cursor"]
"""
)


@pytest.fixture(autouse=True)
def _restore_key() -> Iterator[None]:
    """Every test starts and ends with the key read from the environment (conftest sets it)."""
    set_fingerprint_key(None)
    yield
    set_fingerprint_key(None)


def fp(value: Any, tool: str = "tool") -> str:
    return Fingerprinter(tool).arguments(value).fingerprint


def rfp(value: Any, tool: str = "tool") -> str:
    return Fingerprinter(tool).result(value)


# --- strategies ----------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=24,
)


class Colour(enum.Enum):
    RED = "red"
    BLUE = 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 5


@dataclasses.dataclass
class Point:
    x: Any
    y: Any


class Item(pydantic.BaseModel):
    name: str
    qty: int
    tags: list[str] = []


class Order(pydantic.BaseModel):
    order_id: str
    items: list[Item]
    trace_id: str = ""


odd_scalars = (
    st.binary(max_size=8)
    | st.binary(max_size=8).map(bytearray)
    | st.datetimes()
    | st.dates()
    | st.times()
    | st.timedeltas()
    | st.decimals(allow_nan=True, allow_infinity=True)
    | st.uuids()
    | st.sampled_from([Path("/tmp/a b"), PurePosixPath("rel/x.txt")])
    | st.sampled_from(list(Colour) + list(Level))
    | st.sampled_from([float("nan"), float("inf"), float("-inf")])
    | st.sampled_from([5000, -5000]).map(lambda e: 10 ** abs(e) * (1 if e > 0 else -1))
    | st.frozensets(st.integers() | st.text(max_size=4), max_size=4)
    | st.sets(st.integers() | st.text(max_size=4), max_size=4)
    | st.builds(Point, json_scalars, json_scalars)
    | st.builds(Item, name=st.text(max_size=5), qty=st.integers(), tags=st.lists(st.text(max_size=3), max_size=3))
)
any_values = st.recursive(
    json_scalars | odd_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.tuples(children, children)
    | st.dictionaries(st.text(max_size=6) | st.integers(), children, max_size=4)
    | st.builds(Point, children, children),
    max_leaves=20,
)


def shuffled(value: Any, rnd: random.Random) -> Any:
    """A copy of ``value`` whose dicts have a shuffled insertion order at every depth."""
    if isinstance(value, dict):
        items = [(k, shuffled(v, rnd)) for k, v in value.items()]
        rnd.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    return value


def with_noise(value: Any, draw: Callable[..., Any], noise: tuple[str, ...]) -> Any:
    """A copy of ``value`` with noise keys (random values) added to every dict at any depth."""
    if isinstance(value, dict):
        out = {k: with_noise(v, draw, noise) for k, v in value.items() if k not in noise}
        for key in draw(st.lists(st.sampled_from(noise), min_size=1, max_size=len(noise), unique=True)):
            out[key] = draw(json_values)
        return out
    if isinstance(value, list):
        return [with_noise(v, draw, noise) for v in value]
    return value


def deep_list(depth: int, leaf: Any = "leaf") -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = [value]
    return value


def deep_dict(depth: int, leaf: Any = "leaf") -> Any:
    value: Any = leaf
    for _ in range(depth):
        value = {"k": value}
    return value


# --- key order ---------------------------------------------------------------------------


@PROPS
@given(value=json_values, rnd=st.randoms(use_true_random=False))
def test_key_order_never_matters_at_any_depth(value: Any, rnd: random.Random) -> None:
    other = shuffled(value, rnd)
    assert fp(other) == fp(value)
    assert rfp(other) == rfp(value)


def test_key_order_example_nested() -> None:
    a = {"order": {"id": "1001", "lines": [{"sku": "A", "qty": 2}]}, "amount": 10}
    b = {"amount": 10, "order": {"lines": [{"qty": 2, "sku": "A"}], "id": "1001"}}
    assert fp(a) == fp(b)
    assert fp(a) != fp({"amount": 11, "order": {"lines": [{"qty": 2, "sku": "A"}], "id": "1001"}})


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _oracle(value: Any) -> Any:
    """An independent model of the canonical form: JSON with text keys and numeric strings."""
    if isinstance(value, dict):
        items = [(k, _oracle(v)) for k, v in value.items() if k not in DEFAULT_NOISE_KEYS]
        return ("dict", tuple(sorted(items, key=lambda kv: kv[0])))
    if isinstance(value, list):
        return ("list", tuple(_oracle(v) for v in value))
    if value is None or isinstance(value, bool):
        return ("lit", value)
    if isinstance(value, (int, float)):
        return ("num", value)
    if _JSON_NUMBER.fullmatch(value):
        return ("num", int(value) if value.lstrip("-").isdigit() else float(value))
    return ("str", value)


@PROPS
@given(a=json_values, b=json_values)
def test_different_json_values_give_different_fingerprints(a: Any, b: Any) -> None:
    assume(_oracle(a) != _oracle(b))
    assert fp(a) != fp(b)
    assert rfp(a) != rfp(b)


# --- numbers and their spelling ----------------------------------------------------------


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (1001, "1001"),
        (1.0, 1),
        (1, "1"),
        (1.0, "1"),
        ("1e3", 1000),
        ("1E3", "1000"),
        ("1.50", 1.5),
        (-0.0, 0),
        ("-42", -42),
        (decimal.Decimal("1001"), 1001),
        (decimal.Decimal("2.50"), "2.5"),
        ({"order_id": 1001}, {"order_id": "1001"}),
        ([1, 2.0, "3"], ["1", 2, 3.0]),
    ],
)
def test_number_and_its_spelling_are_the_same_value(left: Any, right: Any) -> None:
    assert fp(left) == fp(right)
    assert rfp(left) == rfp(right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ("007", 7),
        ("007", "7"),
        (True, 1),
        (False, 0),
        (True, "true"),
        (None, "null"),
        (None, "None"),
        (" 7", 7),
        ("+7", 7),
        ("7.", 7),
        (".5", 0.5),
        ("0x10", 16),
        ("1_000", 1000),
        ("NaN", float("nan")),
        ("1٢", 12),  # an Arabic-Indic digit is not a JSON digit
        (1, 2),
        ("1001", "1002"),
    ],
)
def test_values_that_only_look_alike_are_different(left: Any, right: Any) -> None:
    assert fp(left) != fp(right)
    assert fp({"v": left}) != fp({"v": right})


@PROPS
@given(number=st.integers())
def test_any_integer_equals_its_decimal_spelling(number: int) -> None:
    assert fp({"n": number}) == fp({"n": str(number)})
    assert fp(number) != fp(number + 1)


@PROPS
@given(number=st.integers(min_value=-(2**53), max_value=2**53))
def test_integral_float_equals_the_integer(number: int) -> None:
    assert fp(float(number)) == fp(number) == fp(f"{number}.0") == fp(f"{number}e0")


@PROPS
@given(number=st.floats(allow_nan=False, allow_infinity=False))
def test_any_finite_float_equals_its_json_spelling(number: float) -> None:
    assert fp(number) == fp(json.dumps(number)) == fp(repr(number))


@pytest.mark.parametrize("exponent", [16, 20])
def test_large_integral_float_equals_the_same_integer(exponent: int) -> None:
    # 1e16 == 10**16 exactly; "1e3" == 1000 holds, so "1e16" == 10000000000000000 must too.
    assert float(10**exponent) == 10**exponent
    assert fp(float(10**exponent)) == fp(10**exponent)
    assert fp(f"1e{exponent}") == fp(str(10**exponent))


# --- noise keys --------------------------------------------------------------------------


@PROPS
@given(value=json_values, data=st.data())
def test_global_noise_keys_are_dropped_at_any_depth(value: Any, data: st.DataObject) -> None:
    base = {"payload": value, "nested": [{"x": value}]}
    noisy = with_noise(base, data.draw, tuple(sorted(DEFAULT_NOISE_KEYS)))
    clean = with_noise(base, lambda s: [], ())  # same structure, noise keys stripped
    assert fp(noisy) == fp(clean)
    assert rfp(noisy) == rfp(clean)


def test_default_noise_keys_are_the_documented_four() -> None:
    assert DEFAULT_NOISE_KEYS == {"trace_id", "request_id", "timestamp", "random_seed"}
    assert POLICY.noise_keys >= DEFAULT_NOISE_KEYS


def test_noise_key_values_change_nothing_but_other_keys_do() -> None:
    a = {"q": "x", "trace_id": "t1", "meta": {"request_id": 1, "random_seed": 7, "timestamp": "now"}}
    b = {"q": "x", "trace_id": "t2", "meta": {"request_id": 2, "random_seed": 8, "timestamp": "later"}}
    assert fp(a) == fp(b)
    assert fp(a) == fp({"q": "x", "meta": {}})
    assert fp(a) != fp({"q": "y", "trace_id": "t1", "meta": {}})
    assert fp({"q": "x", "trace": 1}) != fp({"q": "x", "trace": 2})  # not a noise key


@PROPS
@given(value=json_values, data=st.data())
def test_tool_noise_keys_from_policy_are_dropped_at_any_depth(value: Any, data: st.DataObject) -> None:
    fetch = POLICY.fingerprinter("fetch_sources")
    base = {"query": value, "pages": [{"inner": value}]}
    noisy = with_noise(base, data.draw, ("cursor", "trace_id"))
    clean = with_noise(base, lambda s: [], ())
    assert fetch.arguments(noisy).fingerprint == fetch.arguments(clean).fingerprint
    assert fetch.result(noisy) == fetch.result(clean)


def test_tool_noise_keys_apply_only_to_that_tool() -> None:
    a = {"q": "x", "page": {"cursor": "abc"}}
    b = {"q": "x", "page": {"cursor": "def"}}
    fetch = POLICY.fingerprinter("fetch_sources")
    other = POLICY.fingerprinter("search")
    assert fetch.arguments(a).fingerprint == fetch.arguments(b).fingerprint
    assert other.arguments(a).fingerprint != other.arguments(b).fingerprint


def test_policy_top_level_noise_keys_apply_to_every_tool() -> None:
    policy = parse_policy('noise_keys = ["nonce"]\n')
    f = policy.fingerprinter("any_tool")
    assert f.arguments({"a": 1, "x": {"nonce": 1}}) == f.arguments({"a": 1, "x": {"nonce": 2}})
    assert f.arguments({"a": 1, "trace_id": 1}) == f.arguments({"a": 1, "trace_id": 2})


def test_noise_keys_are_dropped_inside_models_and_dataclasses() -> None:
    a = Order(order_id="1", items=[Item(name="a", qty=1)], trace_id="t1")
    b = Order(order_id="1", items=[Item(name="a", qty=1)], trace_id="t2")
    assert fp(a) == fp(b)
    assert fp(a) != fp(Order(order_id="2", items=[Item(name="a", qty=1)], trace_id="t1"))
    assert fp(Point({"trace_id": 1, "v": 1}, 0)) == fp(Point({"trace_id": 2, "v": 1}, 0))


# --- unordered keys ------------------------------------------------------------------------


@PROPS
@given(urls=st.lists(json_values, max_size=6), rnd=st.randoms(use_true_random=False))
def test_unordered_key_lists_compare_as_multisets(urls: list[Any], rnd: random.Random) -> None:
    fetch = POLICY.fingerprinter("fetch_sources")
    permuted = list(urls)
    rnd.shuffle(permuted)
    assert fetch.arguments({"urls": urls}).fingerprint == fetch.arguments({"urls": permuted}).fingerprint
    nested_a = {"spec": {"urls": urls, "n": 1}}
    nested_b = {"spec": {"n": 1, "urls": permuted}}
    assert fetch.arguments(nested_a).fingerprint == fetch.arguments(nested_b).fingerprint


@PROPS
@given(items=st.lists(st.integers(), min_size=2, max_size=6, unique=True), rnd=st.randoms(use_true_random=False))
def test_other_lists_keep_their_order(items: list[int], rnd: random.Random) -> None:
    permuted = list(items)
    rnd.shuffle(permuted)
    assume(permuted != items)
    fetch = POLICY.fingerprinter("fetch_sources")
    assert fetch.arguments({"steps": items}).fingerprint != fetch.arguments({"steps": permuted}).fingerprint
    # "urls" is unordered only for fetch_sources
    other = POLICY.fingerprinter("crawl")
    assert other.arguments({"urls": items}).fingerprint != other.arguments({"urls": permuted}).fingerprint
    # and the elements of an unordered list keep their own inner order
    assert (
        fetch.arguments({"urls": [items]}).fingerprint != fetch.arguments({"urls": [permuted]}).fingerprint
    )


@PROPS
@given(a=json_values, b=json_values)
def test_unordered_lists_count_duplicates(a: Any, b: Any) -> None:
    fetch = POLICY.fingerprinter("fetch_sources")
    assume(fetch.canonical(a) != fetch.canonical(b))
    assert fetch.arguments({"urls": [a, a, b]}).fingerprint != fetch.arguments({"urls": [a, b, b]}).fingerprint
    assert fetch.arguments({"urls": [a, b]}).fingerprint != fetch.arguments({"urls": [a, a, b]}).fingerprint


def test_unordered_multiset_example() -> None:
    fetch = POLICY.fingerprinter("fetch_sources")
    args = lambda urls: fetch.arguments({"urls": urls, "cursor": random.random()}).fingerprint  # noqa: E731
    assert args(["a", "b", "c"]) == args(["c", "a", "b"])
    assert args(["a", "a", "b"]) != args(["a", "b", "b"])
    assert args(["a", "b"]) != args(["a", "b", "c"])


def test_sets_compare_as_multisets_and_ignore_insertion_order() -> None:
    left = {"tags": set(["b", "a", "c"])}
    right = {"tags": set(["c", "b", "a"])}
    assert fp(left) == fp(right)
    assert fp(frozenset([1, 2, 3])) == fp(frozenset([3, 2, 1]))
    assert fp({"tags": {"a", "b"}}) != fp({"tags": {"a", "c"}})


# --- tool name -----------------------------------------------------------------------------


@PROPS
@given(args=json_values, tools=st.lists(st.text(min_size=1, max_size=10), min_size=2, max_size=2, unique=True))
def test_tool_name_is_part_of_the_argument_fingerprint(args: Any, tools: list[str]) -> None:
    first, second = tools
    assert Fingerprinter(first).arguments(args).fingerprint != Fingerprinter(second).arguments(args).fingerprint
    assert Fingerprinter(first).arguments(args).fingerprint == Fingerprinter(first).arguments(args).fingerprint


def test_tool_name_and_arguments_do_not_run_together() -> None:
    # "ab" + "c" must not equal "a" + "bc" once joined.
    assert Fingerprinter("ab").arguments("c").fingerprint != Fingerprinter("a").arguments("bc").fingerprint
    assert Fingerprinter("a|").arguments("x").fingerprint != Fingerprinter("a").arguments("|x").fingerprint


# --- keyed hash ---------------------------------------------------------------------------


@PROPS
@given(value=json_values)
def test_a_different_key_gives_a_different_fingerprint(value: Any) -> None:
    one = Fingerprinter("tool", key=b"key-one").arguments(value).fingerprint
    two = Fingerprinter("tool", key=b"key-two").arguments(value).fingerprint
    assert one != two
    assert Fingerprinter("tool", key=b"key-one").arguments(value).fingerprint == one
    assert Fingerprinter("tool", key=b"key-one").result(value) != Fingerprinter("tool", key=b"key-two").result(value)


def test_set_fingerprint_key_changes_and_restores_fingerprints() -> None:
    value = {"order_id": "1001"}
    from_env = fp(value)
    set_fingerprint_key("rotated")
    rotated = fp(value)
    set_fingerprint_key(b"rotated")
    assert fp(value) == rotated  # str and its UTF-8 bytes are one key
    set_fingerprint_key("another")
    assert fp(value) != rotated
    assert rotated != from_env
    set_fingerprint_key(None)
    assert fp(value) == from_env


def test_set_fingerprint_key_accepts_any_length() -> None:
    for secret in ("k", "k" * 64, "k" * 1000, b"\x00" * 200):
        set_fingerprint_key(secret)
        assert len(fingerprint_key()) > 0
        digest = fp({"a": 1})
        int(digest, 16)  # hex
    set_fingerprint_key("k" * 1000)
    long_key = fp({"a": 1})
    set_fingerprint_key("k" * 999)
    assert fp({"a": 1}) != long_key


def _unkeyed_digests(data: str) -> set[str]:
    raw = data.encode("utf-8")
    out = {
        hashlib.sha256(raw).hexdigest(),
        hashlib.sha1(raw).hexdigest(),
        hashlib.md5(raw).hexdigest(),
        hashlib.blake2b(raw).hexdigest(),
        hashlib.blake2s(raw).hexdigest(),
    }
    out |= {hashlib.blake2b(raw, digest_size=n).hexdigest() for n in (8, 16, 20, 32)}
    return out


@pytest.mark.parametrize("order_id", ["1001", 1001, "A-7"])
def test_low_entropy_value_is_not_an_unkeyed_hash_of_obvious_serialisations(order_id: Any) -> None:
    tool = "refund"
    f = Fingerprinter(tool)
    args = {"order_id": order_id}
    canonical = f.canonical(args)
    serialisations = [
        str(order_id),
        json.dumps(order_id),
        json.dumps(args),
        json.dumps(args, sort_keys=True, separators=(",", ":")),
        repr(args),
        canonical,
        f"{tool}{canonical}",
        f"{tool}|{canonical}",
        f"{len(tool)}:{tool}|{canonical}",
        f"{tool}:{json.dumps(args, sort_keys=True)}",
        f"{tool}{json.dumps(args, sort_keys=True)}",
    ]
    digest = f.arguments(args).fingerprint
    result = f.result(order_id)
    for text in serialisations:
        for unkeyed in _unkeyed_digests(text):
            for candidate in (digest, result):
                assert candidate != unkeyed
                assert not unkeyed.startswith(candidate)


def test_fingerprint_key_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    value = {"order_id": "1001"}
    monkeypatch.setenv(OTEL_AGENTGUARD_FINGERPRINT_KEY, "alpha")
    set_fingerprint_key(None)
    key_alpha = fingerprint_key()
    fp_alpha = fp(value)
    monkeypatch.setenv(OTEL_AGENTGUARD_FINGERPRINT_KEY, "beta")
    assert fingerprint_key() == key_alpha  # read once, on first use
    set_fingerprint_key(None)
    assert fingerprint_key() != key_alpha
    assert fp(value) != fp_alpha
    monkeypatch.setenv(OTEL_AGENTGUARD_FINGERPRINT_KEY, "alpha")
    set_fingerprint_key(None)
    assert fingerprint_key() == key_alpha
    assert fp(value) == fp_alpha
    set_fingerprint_key("alpha")  # the explicit setter derives the same key as the environment
    assert fp(value) == fp_alpha


def test_missing_key_draws_a_random_key_and_warns_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(OTEL_AGENTGUARD_FINGERPRINT_KEY, raising=False)
    set_fingerprint_key(None)
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        first = fingerprint_key()
        digests = {fp({"a": 1}) for _ in range(5)}
        assert fingerprint_key() == first
        rfp("x")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert OTEL_AGENTGUARD_FINGERPRINT_KEY in warnings[0].getMessage()
    assert len(digests) == 1  # stable within the process
    # the random key is random: a fresh draw differs and does not equal the env-derived one
    set_fingerprint_key(None)
    assert fingerprint_key() != first
    monkeypatch.setenv(OTEL_AGENTGUARD_FINGERPRINT_KEY, "")
    set_fingerprint_key(None)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        fingerprint_key()
        fingerprint_key()
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1  # empty counts as unset


def test_set_key_does_not_warn(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(OTEL_AGENTGUARD_FINGERPRINT_KEY, raising=False)
    set_fingerprint_key("explicit")
    with caplog.at_level(logging.WARNING):
        fp({"a": 1})
        fingerprint_key()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


_CHILD = textwrap.dedent(
    """
    from otel_agentguard.judge.fingerprints.canonical import Fingerprinter
    f = Fingerprinter("fetch")
    print(f.arguments({"tags": {"alpha", "beta", "gamma", "delta", "eps"}, "id": "1001"}).fingerprint)
    """
)


def _child_fingerprint(key: str | None, hash_seed: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != OTEL_AGENTGUARD_FINGERPRINT_KEY}
    env["PYTHONHASHSEED"] = hash_seed
    if key is not None:
        env[OTEL_AGENTGUARD_FINGERPRINT_KEY] = key
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_fingerprints_correlate_across_processes_only_with_a_shared_key() -> None:
    keyed_1 = _child_fingerprint("shared-secret", "1")
    keyed_2 = _child_fingerprint("shared-secret", "2")  # another hash seed: set order differs
    assert keyed_1 == keyed_2
    assert _child_fingerprint("other-secret", "1") != keyed_1
    assert _child_fingerprint(None, "1") != _child_fingerprint(None, "1")


# --- any Python value: deterministic, never raises ----------------------------------------


class RaisingDunders:
    def __init__(self) -> None:
        self.visible = 1

    def __repr__(self) -> str:
        raise RuntimeError("repr")

    def __str__(self) -> str:
        raise RuntimeError("str")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("eq")

    def __hash__(self) -> int:
        raise RuntimeError("hash")


class BadDump:
    def __init__(self, v: int) -> None:
        self.v = v

    def model_dump(self) -> dict[str, Any]:
        raise RuntimeError("model_dump")


class BadItems(Mapping):
    def __getitem__(self, key: str) -> int:
        return 1

    def __iter__(self) -> Iterator[str]:
        return iter(["a"])

    def __len__(self) -> int:
        return 1

    def items(self) -> Any:
        raise RuntimeError("items")


class BadIter(Mapping):
    def __getitem__(self, key: str) -> int:
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("iter")

    def __len__(self) -> int:
        raise RuntimeError("len")


class NoAttributes:
    """A proxy-like object: every attribute lookup, even __class__, fails."""

    def __getattribute__(self, name: str) -> Any:
        raise RuntimeError(f"no attribute {name}")


class Slotted:
    __slots__ = ("a",)

    def __init__(self) -> None:
        self.a = 1


def _self_list() -> Any:
    a: list[Any] = [1]
    a.append(a)
    return a


def _self_dict() -> Any:
    d: dict[str, Any] = {"a": 1}
    d["self"] = d
    d["nested"] = {"back": d, "list": [d]}
    return d


def _mutual_cycle() -> Any:
    a: list[Any] = ["a"]
    b: dict[str, Any] = {"a": a}
    a.append(b)
    return {"root": b}


def _cyclic_dataclass() -> Any:
    p = Point(1, None)
    p.y = p
    return p


ODD_VALUES: dict[str, Callable[[], Any]] = {
    "bytes": lambda: b"\x00\xffabc",
    "bytearray": lambda: bytearray(b"\x00\xffabc"),
    "memoryview": lambda: memoryview(b"abc"),
    "datetime_naive": lambda: datetime.datetime(2026, 1, 2, 3, 4, 5, 6),
    "datetime_aware": lambda: datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc),
    "date": lambda: datetime.date(2026, 1, 2),
    "time": lambda: datetime.time(3, 4, 5),
    "timedelta": lambda: datetime.timedelta(days=1, seconds=3),
    "decimal": lambda: decimal.Decimal("12.3400"),
    "decimal_nan": lambda: decimal.Decimal("NaN"),
    "decimal_snan": lambda: decimal.Decimal("sNaN"),
    "decimal_inf": lambda: decimal.Decimal("-Infinity"),
    "decimal_huge_exponent": lambda: decimal.Decimal("1e999999"),
    "set": lambda: {1, "a", (2, 3), None},
    "frozenset": lambda: frozenset({"x", "y", 3.5}),
    "dataclass": lambda: Point([1, 2], {"k": "v"}),
    "pydantic": lambda: Order(order_id="7", items=[Item(name="n", qty=2, tags=["a"])]),
    "pydantic_class": lambda: Order,
    "enum": lambda: Colour.RED,
    "int_enum": lambda: Level.HIGH,
    "uuid": lambda: uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "path": lambda: Path("/tmp/some file.txt"),
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
    "neg_inf": lambda: float("-inf"),
    "huge_int": lambda: 10**5000,
    "huge_negative_int": lambda: -(10**5000) - 1,
    "self_list": _self_list,
    "self_dict": _self_dict,
    "mutual_cycle": _mutual_cycle,
    "cyclic_dataclass": _cyclic_dataclass,
    "deep_list_1500": lambda: deep_list(1500),
    "deep_dict_3000": lambda: deep_dict(3000),
    "mb_string": lambda: "x" * (1 << 20),
    "lone_surrogate": lambda: "\ud800 text",
    "complex": lambda: 1 + 2j,
    "function": lambda: len,
    "mixed_container": lambda: {
        "when": datetime.date(2026, 1, 1),
        "blob": b"x",
        "ids": {uuid.UUID(int=1), uuid.UUID(int=2)},
        "odd": [float("nan"), decimal.Decimal("NaN"), Point(1, 2)],
    },
}

# Objects the guard does not read: each call's fingerprint is its own, and says so.
OPAQUE_VALUES: dict[str, Callable[[], Any]] = {
    "raising_dunders": RaisingDunders,
    "bad_model_dump": lambda: BadDump(3),
    "mapping_items_raise": BadItems,
    "mapping_iter_raise": BadIter,
    "no_attributes": NoAttributes,
    "slotted": Slotted,
    "container_with_opaque": lambda: {"when": datetime.date(2026, 1, 1), "odd": [RaisingDunders(), BadDump(1)]},
}


@pytest.mark.parametrize("name", sorted(ODD_VALUES))
def test_any_python_value_gives_a_deterministic_fingerprint(name: str) -> None:
    build = ODD_VALUES[name]
    value = build()
    f = Fingerprinter("tool")
    first = f.arguments(value)
    again = f.arguments(value)
    rebuilt = f.arguments(build())
    assert isinstance(first, ArgumentsFingerprint)
    assert first == again == rebuilt
    int(first.fingerprint, 16)
    assert f.result(value) == f.result(value) == f.result(build())
    wrapped = {"arg": value, "n": 1}
    assert f.arguments(wrapped) == f.arguments({"n": 1, "arg": build()})
    is_empty(value)  # never raises


@pytest.mark.parametrize("name", sorted(OPAQUE_VALUES))
def test_an_opaque_value_gives_a_fingerprint_unique_to_the_call(name: str) -> None:
    build = OPAQUE_VALUES[name]
    value = build()
    f = Fingerprinter("tool")
    first = f.arguments(value)
    again = f.arguments(value)
    assert first.opaque and again.opaque
    assert first.fingerprint != again.fingerprint  # never a repeat, so never a loop
    assert f.result(value) != f.result(value)
    assert not f.arguments({"n": 1}).opaque
    is_empty(value)  # never raises


@PROPS
@given(value=any_values)
def test_generated_odd_values_are_deterministic(value: Any) -> None:
    f = Fingerprinter("tool")
    first = f.arguments(value).fingerprint
    assert f.arguments(value).fingerprint == first
    assert f.arguments(copy.deepcopy(value)).fingerprint == first
    assert f.result(value) == f.result(copy.deepcopy(value))


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (b"abc", b"abd"),
        (b"abc", "abc"),
        (datetime.datetime(2026, 1, 1, 0, 0, 1), datetime.datetime(2026, 1, 1, 0, 0, 2)),
        (datetime.date(2026, 1, 1), datetime.date(2026, 1, 2)),
        (decimal.Decimal("1.5"), decimal.Decimal("2.5")),
        (Point(1, 2), Point(2, 1)),
        (Item(name="a", qty=1), Item(name="a", qty=2)),
        (Colour.RED, Colour.BLUE),
        (uuid.UUID(int=1), uuid.UUID(int=2)),
        (Path("/a"), Path("/b")),
        (10**5000, 10**5000 + 1),
        (float("inf"), float("-inf")),
        (float("nan"), float("inf")),
        ({1, 2}, {1, 3}),
        (1 + 2j, 1 + 3j),
        (len, abs),
    ],
    ids=lambda v: type(v).__name__,
)
def test_distinct_odd_values_give_distinct_fingerprints(left: Any, right: Any) -> None:
    assert fp(left) != fp(right)


def test_enum_uuid_and_path_equal_their_plain_values() -> None:
    assert fp(Colour.RED) == fp("red")
    assert fp(Level.HIGH) == fp(5)
    assert fp(uuid.UUID(int=1)) == fp(str(uuid.UUID(int=1)))
    assert fp(Path("/tmp/x")) == fp("/tmp/x")
    assert fp(decimal.Decimal("NaN")) == fp(float("nan"))


def test_pydantic_model_equals_its_dump() -> None:
    model = Order(order_id="7", items=[Item(name="n", qty=2)])
    assert fp(model) == fp(model.model_dump())
    assert fp(model) != fp(Order(order_id="8", items=[Item(name="n", qty=2)]))


def test_deep_nesting_keeps_the_difference_near_the_top() -> None:
    deep = deep_list(2000)
    assert fp([1, deep]) != fp([2, deep])
    assert fp({"a": 1, "d": deep_dict(2000)}) != fp({"a": 2, "d": deep_dict(2000)})


def test_one_megabyte_string_is_fingerprinted_in_full() -> None:
    big = "x" * (1 << 20)
    changed = big[:-1] + "y"
    assert fp(big) != fp(changed)
    assert Fingerprinter("tool").arguments({"doc": big}).size >= 1 << 20


def test_a_failing_nested_value_does_not_erase_the_rest_of_the_arguments() -> None:
    # Two calls with different amounts must not collapse into one fingerprint just
    # because each also carries an object that cannot be read.
    a = {"amount": 1, "extra": BadItems()}
    b = {"amount": 2, "extra": BadItems()}
    assert fp(a) != fp(b)
    assert rfp([1, BadIter()]) != rfp([2, BadIter()])


def test_object_whose_attribute_access_raises_does_not_raise() -> None:
    f = Fingerprinter("tool")
    first = f.arguments(NoAttributes())  # must not raise
    assert first.opaque


# --- keys and size ------------------------------------------------------------------------


def test_arguments_keys_are_sorted_top_level_keys() -> None:
    result = Fingerprinter("tool").arguments({"b": 1, "a": {"z": 1, "y": 2}, "c": [{"d": 1}]})
    assert result.keys == ("a", "b", "c")
    assert Fingerprinter("tool").arguments({}).keys == ()
    assert Fingerprinter("tool").arguments([1, 2]).keys == ()
    assert Fingerprinter("tool").arguments({2: "x", 10: "y"}).keys == ("10", "2")


@PROPS
@given(args=st.dictionaries(st.text(max_size=6), json_values, max_size=5))
def test_keys_match_the_mapping(args: dict[str, Any]) -> None:
    assert Fingerprinter("tool").arguments(args).keys == tuple(sorted(args))


@PROPS
@given(
    args=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    key=st.text(min_size=1, max_size=6),
    extra=json_values,
)
def test_size_is_canonical_bytes_and_grows_with_content(args: dict[str, Any], key: str, extra: Any) -> None:
    f = Fingerprinter("tool")
    assume(key not in args and key not in DEFAULT_NOISE_KEYS)
    size = f.arguments(args).size
    assert size == len(f.canonical(args).encode("utf-8"))
    bigger = dict(args)
    bigger[key] = extra
    assert f.arguments(bigger).size > size


def test_size_counts_bytes_not_characters() -> None:
    f = Fingerprinter("tool")
    ascii_size = f.arguments({"q": "aaaa"}).size
    assert f.arguments({"q": "ääää"}).size == ascii_size + 4
    assert f.arguments({"q": "a" * 100}).size > f.arguments({"q": "a" * 10}).size
    assert f.arguments({"q": "x", "trace_id": "y" * 1000}).size == f.arguments({"q": "x"}).size


# --- is_empty -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [None, "", "  ", "\n\t", [], (), {}, set(), b"", {"a": [], "b": {"c": None}}, {"a": "", "b": " "}],
)
def test_is_empty_for_results_that_carry_nothing(value: Any) -> None:
    assert is_empty(value) is True


@pytest.mark.parametrize(
    "value",
    [0, 0.0, False, "0", "x", {"a": 0}, {"a": False}, [None], [[]], {"a": [], "b": 1}, {"a": {"b": "x"}}, Point(None, None)],
)
def test_is_empty_false_for_results_with_content(value: Any) -> None:
    assert is_empty(value) is False


def test_is_empty_never_raises_on_odd_values() -> None:
    for build in ODD_VALUES.values():
        assert is_empty(build()) in (True, False)
