"""Raw tool payloads of foreign spans (JSON text) get exactly the fingerprint the reference
walker gives the decoded value, whether orjson writes the form, the walker does, or the
guard remembers the text from an earlier span."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_agentguard.judge.fingerprints import _json_text, _json_text_form
from otel_agentguard.judge.fingerprints import canonical as fingerprint
from otel_agentguard.judge.fingerprints.canonical import DEFAULT_NOISE_KEYS, Fingerprinter, _Canonicalizer, is_empty
from otel_agentguard.judge.fingerprints.payloads import NO_MEMORY, PayloadFingerprints

PROPS = settings(max_examples=500, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

numberish = st.sampled_from(["1", "1.0", "-0", "007", "1e16", "1E3", "-42", "2026-01-01", "1.", ".5", "12345678901234567890",
                             "0.00001", "Infinity", "NaN", "1٢", "x1", "1x", '"1"', "[1]"])
text = st.text(max_size=10) | st.sampled_from(["é", "😀", "\x00", "\u2028", '"\\', "{", "[[", ",\"trace_id\":"]) | numberish
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1.0, -0.0, 0.0, 1e16, 1e-7, 0.0001, 0.00009999, 9.999999999999998e15, 2.5, 123456789.0, 1e300])
integers = st.integers(min_value=-(2**70), max_value=2**70) | st.sampled_from([2**63, 2**64 - 1, -(2**63)])
keys = text | st.sampled_from([*sorted(DEFAULT_NOISE_KEYS), "items", "tags", "a", "B", ""])
values = st.recursive(
    st.none() | st.booleans() | integers | floats | text,
    lambda children: st.lists(children, max_size=6) | st.dictionaries(keys, children, max_size=6),
    max_leaves=30,
)
containers = st.lists(values, max_size=6) | st.dictionaries(keys, values, max_size=8)
spellings = st.sampled_from([
    lambda v: json.dumps(v),
    lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
    lambda v: json.dumps(v, indent=1, sort_keys=True),
])


def reference(tool: Fingerprinter, raw: str) -> tuple[str, str, bool]:
    """What the pure-Python walker gives the value the standard library decodes."""
    walker = Fingerprinter(tool.tool_name, tool.special_keys - {"tags"}, frozenset({"tags"}) & tool.special_keys)
    walker._canonical.bulk = False
    value = json.loads(raw)
    return walker.arguments(value).fingerprint, walker.result(value), is_empty(value)


# Who writes the form of a text: orjson (where installed and writing the form), or the reference walker.
@pytest.fixture(params=["orjson", "walker"])
def writer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "orjson" and not _json_text_form.AVAILABLE:
        pytest.skip("orjson is not installed (or writes another form)")
    if request.param == "walker":
        monkeypatch.setattr(_json_text_form, "AVAILABLE", False)
    return str(request.param)


@PROPS
@given(value=containers, spell=spellings, unordered=st.booleans())
def test_payload_fingerprints_equal_the_reference_walkers(writer: str, value: Any, spell: Any,
                                                          unordered: bool) -> None:
    raw = spell(value)
    tool = Fingerprinter("search", DEFAULT_NOISE_KEYS, frozenset({"tags"}) if unordered else frozenset())
    expected = reference(tool, raw)
    remembered = PayloadFingerprints()
    for payloads in (remembered, remembered, NO_MEMORY):  # fresh, remembered, never remembered
        result, empty = payloads.result(tool, raw)
        assert (payloads.arguments(tool, raw), result, empty) == expected


def test_orjson_writes_the_forms_it_can_and_leaves_the_others_to_the_walker() -> None:
    if not _json_text_form.AVAILABLE:
        pytest.skip("orjson is not installed (or writes another form)")
    plain = frozenset()
    assert _json_text_form.form_of_json_text('{"b": [1, 2.5, "x"], "a": {"c": null}}', plain) is not None
    for raw in ('[1e16]', '{"trace_id": 1}', '[' * 65 + ']' * 65,
                '{"n": 123456789012345678901234}', '[NaN]', '["\\ud800"]', '{"a": 1', '"text"'):
        noise = DEFAULT_NOISE_KEYS
        assert _json_text_form.form_of_json_text(raw, noise) is None, raw
    # Floats orjson spells otherwise, integral floats, and nesting that may reach the walk's bound:
    # the walker writes those.
    for raw in ('[1e-07]', '[' * 64 + ']' * 64, '[-1.0]', '[1.0]'):
        assert _json_text_form.form_of_json_text(raw, plain) is None, raw
    # A noise key's name inside a string is no key: orjson still writes that form.
    assert _json_text_form.form_of_json_text('{"note": "{\\"trace_id\\": 1}"}', DEFAULT_NOISE_KEYS) is not None
    # Digits and an "e" inside a string (a hex id) are no float: orjson writes that form, and a
    # string spelled as a number is written as the number, as the walker writes it.
    for raw in ('{"id": "d6e7f719", "sku": "1e9282"}', '["1e16", "3e4f-x"]', '{"a": "1.0,2"}'):
        written = _json_text_form.form_of_json_text(raw, plain)
        assert written is not None, raw
        assert written[0].decode() == _Canonicalizer(plain, plain, bulk=False).form(json.loads(raw)), raw


def test_orjson_writes_string_values_spelled_as_numbers_as_the_numbers() -> None:
    if not _json_text_form.AVAILABLE:
        pytest.skip("orjson is not installed (or writes another form)")
    raw = '{"id": "42", "42": "x", "q": "\\"12", "z": ["1.50", "007", "-0", "' + "9" * 401 + '"]}'
    written = _json_text_form.form_of_json_text(raw, frozenset())
    assert written is not None
    # Keys stay strings; "007" is no JSON number; a quote inside a string opens no token; a
    # spelling longer than the reference reads as a number stays a string.
    assert written[0] == b'{"42":"x","id":42,"q":"\\"12","z":[1.5,"007",0,"' + b"9" * 401 + b'"]}'
    tool = Fingerprinter("search", DEFAULT_NOISE_KEYS, frozenset())
    assert (NO_MEMORY.arguments(tool, raw), *NO_MEMORY.result(tool, raw)) == reference(tool, raw)


def test_json_text_loads_like_the_standard_library() -> None:
    for raw in ('{"a": 1, "a": 2}', "[-0, -0.0, 1E2, 1e-320]", "[18446744073709551616]", "[1e400]", "[NaN]",
                '"\\ud800"', "[-9223372036854775809]"):
        expected = json.loads(raw)
        got = _json_text.loads(raw)
        assert json.dumps(got) == json.dumps(expected) and type(got) is type(expected), raw
    assert math.isinf(_json_text.loads("[1e400]")[0])


def test_remembered_fingerprints_follow_a_key_change() -> None:
    tool = Fingerprinter("search")
    payloads = PayloadFingerprints()
    raw = '{"order": "A-1"}'
    try:
        fingerprint.set_fingerprint_key("one")
        first = payloads.arguments(tool, raw)
        fingerprint.set_fingerprint_key("two")
        second = payloads.arguments(tool, raw)
        assert second != first
        assert second == tool.arguments({"order": "A-1"}).fingerprint
    finally:
        fingerprint.set_fingerprint_key(None)


def test_remembering_is_bounded() -> None:
    tool = Fingerprinter("search")
    payloads = PayloadFingerprints(max_entries=8)
    texts = [json.dumps({"n": index}) for index in range(50)]
    for raw in texts:
        payloads.arguments(tool, raw)
        payloads.result(tool, raw)
    assert len(payloads._remembered) <= 8
    assert all(payloads.arguments(tool, raw) == tool.arguments(json.loads(raw)).fingerprint for raw in texts)


@PROPS
@given(value=values | containers)
def test_is_empty_answers_as_the_class_walk_does(value: Any) -> None:
    assert is_empty(value) == fingerprint._is_empty(value, 0)


@pytest.mark.parametrize("count", [32_000, 60_000])
def test_long_payloads_keep_the_walks_value_budget(writer: str, count: int) -> None:
    # 60,000 values are past the walk's budget (50,000): the reference cuts them short, and so
    # must the payload path (orjson writes only texts too short to hold that many).
    raw = json.dumps({"ids": [7] * count})
    tool = Fingerprinter("search")
    expected = reference(tool, raw)
    result, empty = NO_MEMORY.result(tool, raw)
    assert (NO_MEMORY.arguments(tool, raw), result, empty) == expected


def _nested(depth: int) -> Any:
    value: Any = {"leaf": " \u3000\t"}
    for _ in range(depth):
        value = {"inner": value}
    return value


@pytest.mark.parametrize("value", [
    {f"k{index}": "" for index in range(64)}, {f"k{index}": None for index in range(65)},  # at most 64 are read
    _nested(7), _nested(8), _nested(9),  # 8 levels down at most
    {"a": [], "b": {"c": None, "d": "\u2028"}}, {"a": [None]}, {"a": 0}, {"a": False}, {"a": "\u200b"},
    [], [None], {},
])
def test_an_empty_result_is_told_as_the_reference_tells_it(writer: str, value: Any) -> None:
    raw = json.dumps(value)
    tool = Fingerprinter("search", DEFAULT_NOISE_KEYS, frozenset())
    assert NO_MEMORY.result(tool, raw) == reference(tool, raw)[1:]



def test_remembered_payload_fingerprints_follow_a_rotated_key(writer: str) -> None:
    tool = Fingerprinter("search")
    raw = '{"order_id": "A-1"}'
    remembered = PayloadFingerprints()
    try:
        fingerprint.set_fingerprint_key("first")
        first = remembered.arguments(tool, raw)
        assert remembered.arguments(tool, raw) == first
        fingerprint.set_fingerprint_key("second")
        second = remembered.arguments(tool, raw)
        assert second != first and second == reference(tool, raw)[0]
    finally:
        fingerprint.set_fingerprint_key(None)
