"""The canonical form written straight from a JSON text (``_plain_check.text_form``): whatever it
writes is byte for byte the form the reference walker writes for the value ``json.loads`` reads
from the text, and what it refuses is left to the decoding path, which then decides."""

from __future__ import annotations

import json
import random
import weakref
from typing import Any

import pytest
from compiled_modules import skip_unless_built
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_agentguard import _json_text_form, _plain_json
from otel_agentguard.fingerprint import DEFAULT_NOISE_KEYS, Fingerprinter, _Canonicalizer, is_empty

try:
    from otel_agentguard._plain_check import text_form
except ImportError:  # built without a C compiler: the text is always decoded first
    text_form = None  # type: ignore[assignment]

PROPS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SPECIAL = DEFAULT_NOISE_KEYS | {"tags"}
ENTRIES = _plain_json.SMALL_ENTRIES


@pytest.fixture(autouse=True)
def _built() -> None:
    skip_unless_built(text_form is not None, "otel_agentguard._plain_check", "texts are decoded, then written")


def reference(raw: str, special: frozenset[str] = SPECIAL) -> tuple[bytes, bool]:
    """The reference walker's form of what the standard library decodes, and its emptiness."""
    walker = _Canonicalizer(special - {"tags"}, special & {"tags"}, bulk=False)
    value = json.loads(raw)
    return walker.form(value).encode("utf-8", "surrogatepass"), is_empty(value)


def assert_written_as_the_reference_writes(raw: str) -> tuple[bytes, bool] | None:
    written = text_form(raw, SPECIAL, ENTRIES)
    if written is not None:
        assert written == reference(raw), raw
    return written


numberish = st.sampled_from(["1", "1.0", "-0", "-0.0", "007", "1e16", "1E3", "-42", "1.", ".5", "12345678901234567890",
                             "0.00001", "1e400", "-1e400", "Infinity", "NaN", "1٢", "x1", "1x", "9999999999999998.0",
                             "1.5e300", "2e-7", " 1", "1 "])
text = st.text(max_size=12) | st.sampled_from(["é", "😀", "\x00", "\x1f", "\u2028", "\u00a0", '"\\', " \t\n",
                                               "/", "\u3000"]) | numberish
floats = st.floats(allow_nan=False) | st.sampled_from(
    [1.0, -0.0, 0.0, 1e16, 1e-7, 0.0001, 0.00009999, 9.999999999999998e15, 2.5, 123456789.0, 1e300])
integers = st.integers(min_value=-(2**80), max_value=2**80)
keys = text | st.sampled_from([*sorted(SPECIAL), "items", "a", "B", "", "a b", "ab", "a\u00e9", "a\U0001f600"])
values = st.recursive(
    st.none() | st.booleans() | integers | floats | text,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=6),
    max_leaves=30,
)
containers = st.lists(values, max_size=6) | st.dictionaries(keys, values, max_size=8)
spellings = st.sampled_from([
    lambda v: json.dumps(v),  # ASCII escapes: \uXXXX and surrogate pairs
    lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
    lambda v: json.dumps(v, indent=2, sort_keys=True),
    lambda v: json.dumps(v, separators=(" ,\r\n", " :\t")),
])


@PROPS
@given(value=containers, spell=spellings)
def test_a_text_is_written_as_the_reference_writes_its_value(value: Any, spell: Any) -> None:
    assert_written_as_the_reference_writes(spell(value))


@PROPS
@given(value=containers, spell=spellings, seed=st.integers(0, 2**32))
def test_a_mangled_text_is_refused_or_written_as_the_reference_writes_it(value: Any, spell: Any, seed: int) -> None:
    """Characters deleted, doubled or swapped for JSON's punctuation: whatever is still written is
    the reference's form of what json.loads reads, and a text json.loads rejects is refused."""
    rng = random.Random(seed)
    chars = list(spell(value))
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(chars))
        move = rng.randrange(3)
        if move == 0:
            del chars[at]
        elif move == 1:
            chars.insert(at, chars[at])
        else:
            chars[at] = rng.choice('{}[]",:\\-0.eE u')
        if not chars:
            return
    raw = "".join(chars)
    try:
        json.loads(raw)
    except (ValueError, RecursionError):
        assert text_form(raw, SPECIAL, ENTRIES) is None, raw
        return
    if raw[:1] in ("{", "["):
        assert_written_as_the_reference_writes(raw)


@pytest.mark.parametrize("raw", [
    '{"order_id": "A-1", "region": "eu", "page": 1, "filters": {"status": ["open", "late"]}}',
    '{"b": "\\u00e9\\ud83d\\ude00", "a": ["1.50", -0, 1.0, 1e400, "007", "\\u0031", "\\/"], "c": " \\t"}',
    '{"z": {"y": {"x": [], "w": {}}}, "a\u00e9": null, "a": "\U0001f600", "a b": 1, "ab": 2}',
    '[1E3, 1e-7, 0.0001, 9999999999999998.0, -0.0, 12345678901234567890123, "\\b\\f\\n\\r\\u001f\\""]',
    ' [ ] '.strip(), "{}", '{"": ""}', '[[[[["deep"]]]]]', '{"a": "\u2028\u3000\u00a0"}',
    '[' * 64 + ']' * 64,  # the walk's depth bound is beyond it
])
def test_the_usual_texts_are_written_from_the_text(raw: str) -> None:
    assert assert_written_as_the_reference_writes(raw) is not None


@pytest.mark.parametrize("raw", [
    '{"a": 1, "a": 2}',  # json.loads keeps the last: the decoded value decides
    '{"trace_id": "t", "a": 1}', '{"a": {"tags": ["x"]}}',  # noise and unordered keys
    '{"a\\"b": 1}', '{"a\\\\": 1}', '{"a\\n": 1}',  # keys that need an escape
    '[NaN]', '[Infinity]', '[-Infinity]', '["\\ud800"]', '["\\udc00"]', '["\\ud800x"]', '["\\ud800\\u0041"]',
    '["a\tb"]', '["\\x"]', '["\\u12"]',  # a raw control character, unknown and short escapes
    '[1e16]', '[1.5e300]', '["1e16"]',  # integral floats the form writes as wide integers
    '[01]', '[1.]', '[.5]', '[+1]', '[-]', '[1e]', '[1,]', '{"a":1,}', '{"a" 1}', '{a:1}', '[1 2]', '[1]x', '[tru]',
    '[' * 65 + ']' * 65, '[' + "1" * 400 + ']', '[' + ",".join(["0"] * (ENTRIES + 1)) + ']',
    '"text"', "1", " [1]", "",
])
def test_what_it_refuses(raw: str) -> None:
    assert text_form(raw, SPECIAL, ENTRIES) is None


def test_a_lone_surrogate_in_the_text_itself_is_refused() -> None:
    assert text_form('["\ud800"]', SPECIAL, ENTRIES) is None
    assert text_form('{"\udc00": 1}', SPECIAL, ENTRIES) is None


def test_an_empty_result_is_told_as_the_reference_tells_it() -> None:
    nested = "{}"
    for _ in range(9):
        nested = '{"a": ' + nested + "}"
    for raw in ('{"a": [], "b": {"c": null, "d": " \\u2028"}}', '{"a": [null]}', '{"a": 0}', '{"a": false}',
                '{"a": "\\u200b"}', '{"a": "\\u00a0"}', "[]", "[null]", "{}", nested,
                "{" + ",".join(f'"k{i}": ""' for i in range(64)) + "}"):  # (65 members: refused)
        written = text_form(raw, SPECIAL, ENTRIES)
        assert written is not None and written[1] is reference(raw)[1], raw


def test_the_special_keys_are_the_fingerprinters_own() -> None:
    tool = Fingerprinter("search", frozenset({"session"}), frozenset({"ids"}))
    assert text_form('{"trace_id": 1}', tool.special_keys, ENTRIES) is not None  # not noise for this tool
    assert text_form('{"x": {"session": 1}}', tool.special_keys, ENTRIES) is None
    assert text_form('{"ids": [2, 1]}', tool.special_keys, ENTRIES) is None


def test_the_decoding_path_still_writes_what_the_text_path_refuses() -> None:
    """One call fingerprints a text either way: what the text path refuses (a duplicate key, a key
    with an escape) is decoded and written, to the reference's fingerprint."""
    small = _json_text_form.fingerprint_of_small_text
    if small is None:
        pytest.skip("orjson is not installed (or writes another form)")
    tool = Fingerprinter("search")
    for raw in ('{"a": 1, "a": 2}', '{"a\\"b": [1, "2"], "c": {"d\\\\": null}}'):
        assert text_form(raw, tool.special_keys, ENTRIES) is None
        expected = tool.digest_of_form(reference(raw, tool.special_keys)[0], arguments=True)
        assert small(raw, tool.special_keys, tool.hash_seed(arguments=True), False) == (expected, False), raw


def test_a_special_key_set_released_while_the_cache_turns_over_is_never_read_after() -> None:
    """The sets of special keys are kept ready in a small round robin. A set that makes way for
    another may carry a weak reference whose callback runs Python code when it goes, and that code
    may turn the round robin over again: the text is read before the set is let go."""
    keep: list[frozenset[str]] = []

    def turn_over(_: Any) -> None:
        for index in range(8):
            keep.append(frozenset({f"other{index}"}))
            text_form("[]", keep[-1], ENTRIES)

    first = frozenset({"first"})
    watch = weakref.ref(first, turn_over)
    text_form("[]", first, ENTRIES)
    del first
    for index in range(7):  # the round robin full: the first set goes next
        keep.append(frozenset({f"filler{index}"}))
        text_form("[]", keep[-1], ENTRIES)
    noise = frozenset({"secret"})
    raw = '{"secret": 1, "a": 2}'
    assert watch() is not None
    assert text_form(raw, noise, ENTRIES) is None  # a noise key: refused, never written with it
    assert watch() is None and len(keep) == 15  # the callback ran, after the read


def test_the_walks_budgets_hold_whatever_the_caller_allows() -> None:
    many = "[" + ",".join(["0"] * 50_001) + "]"
    assert text_form(many, SPECIAL, 10**6) is None  # past the walk's 50,000 values
    long = '["' + "a" * ((4 << 20) + 1) + '"]'
    assert text_form(long, SPECIAL, 10**6) is None  # past its 4 MiB of long strings
    wide = "{" + ",".join(f'"k{index:03}": {index}' for index in range(65)) + "}"
    assert text_form(wide, SPECIAL, 10**6) is None  # more members than are put in order by insertion
    assert text_form(wide[:wide.rindex(",")] + "}", SPECIAL, 10**6) is not None  # 64 are
