"""The bulk path (orjson or the standard library's encoder writing plain JSON values) writes
exactly what the reference walker writes, byte for byte; and it never reads anything but exact
builtins."""

from __future__ import annotations

import enum
import math
import re
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_agentguard.judge.fingerprints import _plain_json
from otel_agentguard.judge.fingerprints.canonical import DEFAULT_NOISE_KEYS, Fingerprinter, _Canonicalizer, _Walk

PROPS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

numberish = st.sampled_from(["1", "1.0", "1e0", "1.50", "-0", "0", "007", "1e16", "1E3", "-42", "1e400", "NaN",
                             "Infinity", "1٢", " 7", "+7", "2026-01-01", "1.", ".5", "1e", "1\n", "1\x00", "-",
                             "12345678901234567890", "0.00001", "9" * 500])
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [1.0, -0.0, 0.0, 1e16, 1e-7, 0.0001, 0.00009999, 9.999999999999998e15, 2.5, 0.35, -1.5e300, 1e22])
text = st.text(max_size=12) | st.text(alphabet=st.characters(codec="utf-8"), max_size=6) | st.sampled_from(
    ["\ud800", "a\udfffb", "é", "😀", "\x00", "\x1f\x7f", '"\\', "\u2028", "x" * 300]) | numberish
integers = st.integers() | st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30]) | st.builds(pow, st.just(-10), st.just(5001))


class Colour(enum.Enum):
    RED = "1"


class Key(str):
    pass


class Number(int):
    pass


class Listish(list):  # type: ignore[type-arg]
    pass


class Mapping(dict):  # type: ignore[type-arg]
    pass


others = st.sampled_from([Colour.RED, Key("1"), Number(3), True, None, b"x", (1, "2")]) | st.builds(Listish) | \
    st.builds(Mapping)
scalars = st.none() | st.booleans() | integers | floats | text
keys = text | st.sampled_from(sorted(DEFAULT_NOISE_KEYS) + ["urls", "a", "b", "B", "é", "😀", ""]) | \
    st.sampled_from([Key("k"), 1, 2.5, None])


def _values(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda children: st.lists(children, max_size=12) | st.tuples(children, children)
        | st.dictionaries(keys, children, max_size=12) | st.dictionaries(text, children, min_size=8, max_size=14),
        max_leaves=60,
    )


plain = _values(scalars)
mixed = _values(scalars | others)


def _both(value: Any, unordered: frozenset[str] = frozenset()) -> tuple[str, str]:
    fast = _Canonicalizer(DEFAULT_NOISE_KEYS, unordered)
    reference = _Canonicalizer(DEFAULT_NOISE_KEYS, unordered, bulk=False)
    return fast.form(value), reference.form(value)


def _walks(value: Any, text_left: int | None = None) -> tuple[_Walk, _Walk]:
    """The budgets the fast path and the reference walker leave after writing ``value``."""
    walk_fast, walk_reference = _Walk(), _Walk()
    if text_left is not None:
        walk_fast.text_left = walk_reference.text_left = text_left
    _Canonicalizer(DEFAULT_NOISE_KEYS, frozenset()).root(value, walk_fast)
    _Canonicalizer(DEFAULT_NOISE_KEYS, frozenset(), bulk=False).root(value, walk_reference)
    return walk_fast, walk_reference


# Who writes the form of a value the check accepts: orjson where installed, else the standard
# library's encoder.
@pytest.fixture(params=["orjson", "stdlib"])
def encoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "orjson":
        if not _plain_json._orjson_agrees:
            pytest.skip("orjson is not installed (or disagrees with the reference and is not used)")
    else:
        monkeypatch.setattr(_plain_json, "_orjson_agrees", False)
    return str(request.param)


@PROPS
@given(value=plain, unordered=st.sampled_from([frozenset(), frozenset({"urls"})]))
def test_plain_json_values_get_the_reference_form(encoder: str, value: Any, unordered: frozenset[str]) -> None:
    fast, reference = _both(value, unordered)
    assert fast == reference


@PROPS
@given(value=mixed)
def test_values_mixing_builtins_and_other_types_get_the_reference_form(encoder: str, value: Any) -> None:
    fast, reference = _both(value)
    if "?" in reference:  # opaque markers are random per call: compare the rest
        return
    assert fast == reference


@settings(PROPS, max_examples=25, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                         HealthCheck.data_too_large])
@given(value=st.dictionaries(text, scalars | st.lists(scalars, max_size=4), min_size=8, max_size=12),
       nesting=st.integers(0, 70),
       width=st.sampled_from([1, 1, 1, 9]))
def test_fingerprints_and_flags_are_the_reference_ones(encoder: str, value: dict[str, Any], nesting: int,
                                                       width: int) -> None:
    for level in range(nesting if width == 1 else min(nesting, 5)):  # past the depth bound or the budget
        value = {"k" + str(level): [value] * width, **{str(i): i for i in range(8)}}
    fast = Fingerprinter("tool", key=b"k")
    reference = Fingerprinter("tool", key=b"k")
    reference._canonical.bulk = False
    assert fast.arguments(value) == reference.arguments(value)
    assert fast.result(value) == reference.result(value)


@pytest.mark.parametrize("size", [49_990, 50_000, 50_001, 60_000])
def test_the_element_budget_is_spent_as_by_the_reference(encoder: str, size: int) -> None:
    value = {"a": list(range(size - 12)), "b": {str(i): i for i in range(10)}, "c": list(range(30))}
    fast, reference = _both(value)
    assert fast == reference
    walk_fast, walk_reference = _walks(value)
    assert (walk_fast.left, walk_fast.truncated) == (walk_reference.left, walk_reference.truncated)


@pytest.mark.parametrize("long", [1 << 20, (1 << 20) + 1, 3 << 20])
def test_the_text_budget_is_spent_as_by_the_reference(encoder: str, long: int) -> None:
    value = {"a": ["x" * long, "y" * 300] * 2, "b": list("abcdefghij"), "c": "z" * (1 << 20)}
    fast, reference = _both(value)
    assert fast == reference


def test_the_bulk_path_is_taken_for_plain_arguments(encoder: str) -> None:
    value = {"query": "x", "documents": [{"id": f"doc-{i}", "score": 0.5, "when": "2026-01-01"} for i in range(20)]}
    walk = _Walk()
    canonical = _Canonicalizer(DEFAULT_NOISE_KEYS, frozenset())
    assert canonical._bulk(value["documents"], 1, walk) is not None
    assert walk.left == 50_000 - 20 * 4


class Spy:
    """Records any dunder an encoder might call on it."""

    calls: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        Spy.calls.append(name)
        return object.__getattribute__(self, name)


class SpyEnum(enum.Enum):
    A = 1

    @property
    def value(self) -> Any:  # type: ignore[override]  # what orjson would call
        Spy.calls.append("value")
        return 1


class SpyMapping(dict):  # type: ignore[type-arg]
    def items(self) -> Any:  # what the stdlib encoder would call
        Spy.calls.append("items")
        return super().items()

    def __iter__(self) -> Any:
        Spy.calls.append("__iter__")
        return super().__iter__()


class SpyList(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        Spy.calls.append("__iter__")
        return super().__iter__()


def test_no_application_code_runs_on_the_bulk_path(encoder: str) -> None:
    Spy.calls.clear()
    items = [{"id": i, "name": "n"} for i in range(10)]
    for odd in (SpyEnum.A, SpyMapping(a=1), SpyList([1]), Spy()):
        value = {str(i): i for i in range(10)} | {"odd": [odd] + items}
        Fingerprinter("tool").arguments(value)
        Fingerprinter("tool").result([value] * 9)
    assert Spy.calls == []


def test_the_orjson_self_check_refuses_an_encoder_that_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    class Lenient:  # writes floats its own way
        OPT_SORT_KEYS = 0

        @staticmethod
        def dumps(value: Any, option: int = 0) -> bytes:
            return b"{}"

    monkeypatch.setattr(_plain_json, "_orjson", Lenient)
    assert _plain_json._orjson_writes_the_canonical_form() is False


def test_wide_integers_and_non_finite_floats_use_the_stdlib_encoder_or_the_walker() -> None:
    for value in ([2**64] * 9, [math.nan, math.inf] * 5, [10**5000] * 9, [1e-5] * 9):
        fast, reference = _both(value)
        assert fast == reference
    # Keys left to orjson to check are checked once a float sends the value to the stdlib encoder.
    value = {str(i): {"x": [1e-5, 0.5]} for i in range(9)}
    walk = _Walk()
    assert _Canonicalizer(DEFAULT_NOISE_KEYS, frozenset())._bulk(value, 0, walk) == _both(value)[1]
    assert walk.left == 50_000 - 9 - 9 - 18
    refused = _plain_json.check({str(i): {1: [1e-5]} for i in range(9)}, 0, 50_000, 1 << 22, frozenset())
    assert type(refused) is int  # an int key: neither encoder writes the canonical form


def _reference_fingerprinter(unordered: frozenset[str] = frozenset()) -> Fingerprinter:
    reference = Fingerprinter("tool", unordered_keys=unordered, key=b"k")
    reference._canonical.bulk = False
    return reference


@PROPS
@given(value=st.dictionaries(keys, scalars | others | st.lists(scalars, max_size=3)
                             | st.dictionaries(keys, scalars | st.lists(scalars, max_size=3), max_size=4), max_size=7))
def test_small_arguments_get_the_reference_fingerprint_keys_and_flags(encoder: str, value: dict[Any, Any]) -> None:
    fast = Fingerprinter("tool", key=b"k").arguments(value)
    reference = _reference_fingerprinter().arguments(value)
    if reference.opaque:  # opaque markers are random per call: compare the rest
        assert fast._replace(fingerprint="", size=0) == reference._replace(fingerprint="", size=0)
        return
    assert fast == reference


def test_small_arguments_with_long_text_odd_numbers_and_noise_get_the_reference_fingerprint(encoder: str) -> None:
    for value in ({"a": "x" * 300, "b": 1}, {"a": "1.0", "b": "-0", "c": "007", "d": 1e16, "e": -0.0},
                  {"a": math.nan, "b": math.inf, "c": 10**5000, "trace_id": "t"}, {"timestamp": [1, 2]},
                  {Key("a"): 1}, {1: 1, "1": 2}, {"a": True, "b": None, "c": False, "é": "😀", "\ud800": "\udfff"},
                  {"a": {"trace_id": 1, "b": 2}}, {"a": [{"b": "12"}]}, {"a": {"b": 2.0}}, {"a": ["x" * 5000] * 3},
                  {"a": list(range(300))}, {"a": {"b": {1: 2}}}, {}, {"a": {}, "b": [], "c": ()}):
        assert Fingerprinter("tool", key=b"k").arguments(value) == _reference_fingerprinter().arguments(value)
        assert Fingerprinter("tool", key=b"k").result(value) == _reference_fingerprinter().result(value)


def _general_table(items: dict[str, Any]) -> dict[Any, Any]:
    """A dict with only str keys whose key table once held another kind of key."""
    value: dict[Any, Any] = {0: 0}
    value.update(items)
    del value[0]
    return value


@PROPS
@given(value=plain, data=st.data())
def test_dicts_whose_key_table_once_held_other_keys_get_the_reference_form(encoder: str, value: Any,
                                                                           data: st.DataObject) -> None:
    items = data.draw(st.dictionaries(text | st.just("k" * 300), plain, min_size=8, max_size=10))
    records = [_general_table(items), items, {"v": value, **{str(i): i for i in range(8)}}]
    for candidate in (_general_table({"a": records, **{str(i): [value] for i in range(8)}}), records * 3):
        fast, reference = _both(candidate)
        assert fast == reference
        walk_fast, walk_reference = _walks(candidate)
        assert (walk_fast.left, walk_fast.text_left) == (walk_reference.left, walk_reference.text_left)


@pytest.mark.parametrize("odd", ["\x00", "1\x00", "\x001", "x" * 200 + "\x00" + "y" * 200, "\x00" * 300,
                                 "7", "-0.5e3", "2026-01-01", "1" * 300, "é" * 257, "😀" * 129])
def test_strings_with_nuls_numbers_and_long_text_at_any_level_get_the_reference_form(encoder: str, odd: str) -> None:
    records = [{"id": f"doc-{i}", "tags": ["a", "b", odd if i == 5 else "c"], "meta": {"n": i, "s": "x"},
                "score": 0.5} for i in range(9)]
    for value in (records, {"a": records, **{str(i): odd for i in range(8)}}, [odd] * 9, [[odd] * 9] * 9):
        fast, reference = _both(value)
        assert fast == reference
        walk_fast, walk_reference = _walks(value, text_left=2000)  # a budget the long strings reach
        assert (walk_fast.left, walk_fast.text_left, walk_fast.truncated) == (
            walk_reference.left, walk_reference.text_left, walk_reference.truncated)


class _UnhashableClass(type):
    def __eq__(cls, other: object) -> bool:  # no __hash__: the class itself cannot be hashed
        return cls is other


class _Tag(str, metaclass=_UnhashableClass):
    pass


class _TouchyName(str):
    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        raise TypeError("compared")


def test_values_whose_type_or_keys_refuse_hashing_or_comparison_get_the_reference_form(encoder: str) -> None:
    # A type that cannot be hashed, and keys (sharing a hash) that raise when compared: the bulk
    # check gives up on both, and the walker writes what it always writes (not an opaque marker).
    unhashable_type = {"tags": [_Tag("a"), *map(str, range(10))], **{f"k{i}": i for i in range(8)}}
    touchy_keys = [{_TouchyName("a"): 1}, {_TouchyName("a"): 2}, *range(8)]
    for value in (unhashable_type, touchy_keys):
        fast, reference = _both(value)
        assert fast == reference
        assert "?" not in fast


@settings(max_examples=2000, deadline=None, derandomize=True, database=None)
@given(st.text(alphabet="\x00-+.eE0123456789a", max_size=24), st.integers(0, 4))
def test_the_number_pattern_matches_alike_without_possessive_quantifiers(text: str, start: int) -> None:
    # Python 3.10 reads the pattern without them (they came in 3.11): it must find what 3.11 finds.
    if sys.version_info < (3, 11):
        pytest.skip("possessive quantifiers need Python 3.11")
    possessive = re.compile(_plain_json._NUMBER_BETWEEN_NULS)
    plain = re.compile(_plain_json._without_possessive_quantifiers(_plain_json._NUMBER_BETWEEN_NULS))
    assert "+" not in plain.pattern.replace("[+-]", "").replace("]+", "")  # nothing possessive left
    found, expected = plain.search(text, start), possessive.search(text, start)
    assert (found and found.span()) == (expected and expected.span())


def _nested(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


# --- the boundaries of the check, with either checker ------------------------------------------

def _accepted(value: Any, entries_left: int = 50_000, text_left: int = 4 << 20, depth: int = 0) -> _plain_json.Plain | None:
    found = _plain_json.check(value, depth, entries_left, text_left, frozenset())
    return found if isinstance(found, _plain_json.Plain) else None


@pytest.mark.parametrize("spelled", ["1e+5", "1E-3", "-0.5e-7", "0", "-12.5", "1e5"])
def test_strings_spelled_as_numbers_with_signed_exponents_are_left_to_the_walker(spelled: str) -> None:
    assert _accepted([spelled]) is None
    assert _accepted([spelled[:-1] + "x"]) is not None  # one character off: text


def test_a_number_spelling_is_read_up_to_400_characters() -> None:
    assert _accepted(["9" * 400]) is None  # a number, as the reference writes it
    # Past 400 the reference quotes it: the check leaves it to the walker, which writes that form.
    value = {"n": "9" * 401, "m": "9" * 400, **{str(i): i for i in range(8)}}
    fast, reference = _both(value)
    assert fast == reference


def test_many_huge_digit_strings_get_the_reference_form() -> None:
    # 6,400 references to one 20 MB digit string: 128 GB if a check joined them, 128 GB of digits
    # if it read each spelling in full. The check charges the text budget first and give up.
    huge = "9" * 20_000_000
    value = {str(i): [huge] * 8 for i in range(800)}
    assert _accepted(value) is None
    fast, reference = _both(value)
    assert fast == reference


def test_the_depth_bound_is_64_levels() -> None:
    assert _accepted(_nested(63)) is not None  # the innermost list at depth 63
    assert _accepted(_nested(64)) is None
    assert _accepted(_nested(62), depth=1) is not None
    assert _accepted(_nested(63), depth=1) is None


def test_the_value_budget_allows_exactly_what_is_left() -> None:
    plain = _accepted([0] * 50_000)
    assert plain is not None and plain.entries == 50_000
    assert _accepted([0] * 50_001) is None
    for inner in ([0] * 9, {str(i): 0 for i in range(9)}):
        assert _accepted([inner, 1], entries_left=11) is not None
        assert _accepted([inner, 1], entries_left=10) is None
    for size in (50_000, 50_001):
        value = [0] * (size - 10) + [[0] * 9]  # the last ten values fill or overflow the budget
        walk_fast, walk_reference = _walks(value)
        assert (walk_fast.left, walk_fast.truncated) == (walk_reference.left, walk_reference.truncated)


@pytest.mark.parametrize("others", [[], [1, 2.5]])
def test_strings_over_256_characters_count_against_the_text_budget(others: list[Any]) -> None:
    short = _accepted(["x" * 256, *others])
    assert short is not None and short.text == 0
    long = _accepted(["x" * 257, *others])
    assert long is not None and long.text == 257
    assert _accepted(["x" * 257, *others], text_left=257) is not None
    assert _accepted(["x" * 257, *others], text_left=256) is None
    value = ["x" * 257, *others, *range(8)]
    walk_fast, walk_reference = _walks(value, text_left=1000)
    assert walk_fast.text_left == walk_reference.text_left == 1000 - 257


def test_orjson_writes_floats_only_from_1e_minus_4_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_plain_json, "_orjson_agrees", True)  # what the check says, orjson or not
    for writes, floats in ((True, [1e-4, 0.5, -1e-4, 1e15 + 0.5]), (False, [9.99e-5]),
                           (False, [1.5e-5]), (False, [-1.5e-5]), (False, [math.inf]), (False, [math.nan])):
        plain = _accepted(floats)
        assert plain is not None and plain.orjson is writes, floats
