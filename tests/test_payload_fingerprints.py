"""Raw tool payloads of foreign spans (JSON text) get exactly the fingerprint the reference
walker gives the decoded value, whether orjson writes the form, the walker does, or the
guard remembers the text from an earlier span."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from compiled_modules import assert_frees_what_it_takes, python_code_run, skip_unless_built
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_agentguard import _json_text, _json_text_form, _plain_json, fingerprint, payload_fingerprints
from otel_agentguard.fingerprint import DEFAULT_NOISE_KEYS, Fingerprinter, _Canonicalizer, is_empty
from otel_agentguard.payload_fingerprints import NO_MEMORY, PayloadFingerprints

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


# Who writes the form of a text: one compiled call that decodes, writes and hashes a short text
# (where the package has it), else the compiled writer (small values), else orjson; the compiled
# writer, else orjson; orjson alone (as where nothing is compiled); the reference walker (no orjson).
@pytest.fixture(params=["one compiled call, else", "compiled, else orjson", "orjson", "walker"])
def writer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param != "walker" and not _json_text_form.available():
        pytest.skip("orjson is not installed (or writes another form)")
    if request.param in ("one compiled call, else", "compiled, else orjson"):
        skip_unless_built(_json_text_form.fingerprint_of_small_text is not None, "otel_agentguard._plain_check",
                          "orjson writes every form")
    if request.param != "one compiled call, else":
        monkeypatch.setattr(_json_text_form, "fingerprint_of_small_text", None)
    if request.param == "orjson":
        monkeypatch.setattr(_plain_json, "_compiled_write", None)
    if request.param == "walker":
        monkeypatch.setattr(_json_text_form, "available", lambda: False)
    return str(request.param)


def _compiled_methods() -> None:
    """Skip (or fail) unless the compiled payload methods are in place."""
    skip_unless_built(payload_fingerprints._compiled is not None or _json_text_form.fingerprint_of_small_text is None,
                      "otel_agentguard._payload_memory", "the Python methods remember")
    if payload_fingerprints._compiled is None:
        pytest.skip("no one-call fingerprint (orjson is not installed, or writes another form)")


# Who remembers: the compiled arguments and result (where the package has them), or the Python
# methods they stand for.
@pytest.fixture(params=["compiled methods", "python methods"])
def methods(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "compiled methods":
        _compiled_methods()
    else:
        monkeypatch.setattr(PayloadFingerprints, "arguments", payload_fingerprints._python_arguments)
        monkeypatch.setattr(PayloadFingerprints, "result", payload_fingerprints._python_result)
    return str(request.param)


@PROPS
@given(value=containers, spell=spellings, unordered=st.booleans())
def test_payload_fingerprints_equal_the_reference_walkers(writer: str, methods: str, value: Any, spell: Any,
                                                          unordered: bool) -> None:
    raw = spell(value)
    tool = Fingerprinter("search", DEFAULT_NOISE_KEYS, frozenset({"tags"}) if unordered else frozenset())
    expected = reference(tool, raw)
    remembered = PayloadFingerprints()
    for payloads in (remembered, remembered, NO_MEMORY):  # fresh, remembered, never remembered
        result, empty = payloads.result(tool, raw)
        assert (payloads.arguments(tool, raw), result, empty) == expected


def test_orjson_writes_the_forms_it_can_and_leaves_the_others_to_the_walker() -> None:
    if not _json_text_form.available():
        pytest.skip("orjson is not installed (or writes another form)")
    plain = frozenset()
    assert _json_text_form.form_of_json_text('{"b": [1, 2.5, "x"], "a": {"c": null}}', plain) is not None
    for raw in ('[1e16]', '["1e16"]', '{"trace_id": 1}', '[' * 65 + ']' * 65,
                '{"n": 123456789012345678901234}', '[NaN]', '["\\ud800"]', '{"a": 1', '"text"'):
        noise = DEFAULT_NOISE_KEYS
        assert _json_text_form.form_of_json_text(raw, noise) is None, raw
    # Small values go to the compiled writer (where the package has it), which also writes floats
    # orjson spells otherwise, integral floats and strings spelled as numbers (below 1e16), and
    # nesting up to the walk's own bound; orjson's own path is looser.
    compiled = _plain_json._compiled_write is not None
    for raw in ('[1e-07]', '[' * 64 + ']' * 64, '{"id": "4e2"}', '[-1.0]', '[1.0]', '["-0", "1.50", 9999999999999998.0]'):
        written = _json_text_form.form_of_json_text(raw, plain)
        assert (written is not None) is compiled, raw
        if written is not None:
            assert written[0].decode() == _Canonicalizer(plain, plain, bulk=False).form(json.loads(raw)), raw
        big = raw[:-1] + ", 0" * 300 + "]"  # over the small size: orjson's path
        assert _json_text_form.form_of_json_text(big, plain) is None, raw
    # A noise key's name inside a string is no key: orjson still writes that form.
    assert _json_text_form.form_of_json_text('{"note": "{\\"trace_id\\": 1}"}', DEFAULT_NOISE_KEYS) is not None


def test_orjson_writes_string_values_spelled_as_numbers_as_the_numbers() -> None:
    if not _json_text_form.available():
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


def test_remembered_fingerprints_follow_a_key_change(methods: str) -> None:
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


def test_remembering_is_bounded(methods: str) -> None:
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



@pytest.mark.parametrize("key", [None, b"a key of this fingerprinter's own"])
def test_one_compiled_call_fingerprints_a_plain_payload_as_the_form_and_keyed_hash_do(key: bytes | None) -> None:
    small = _json_text_form.fingerprint_of_small_text
    skip_unless_built(small is not None or not _json_text_form.available(), "otel_agentguard._plain_check",
                      "orjson writes every form")
    if small is None:
        pytest.skip("orjson is not installed (or writes another form)")
    tool = Fingerprinter("search", DEFAULT_NOISE_KEYS, frozenset(), key=key)
    raw = '{"order_id": "A-1", "page": 2, "filters": {"status": ["open", "late"]}, "note": " "}'
    for arguments in (True, False):
        written = _json_text_form.form_of_json_text(raw, tool.special_keys)
        assert written is not None
        expected = (tool.digest_of_form(written[0], arguments=arguments), False)
        # Hashed by the compiled keyed hash from the fingerprinter's seed, or by a copy of its hashlib state.
        for start in (tool.hash_seed(arguments=arguments), tool.hash_state(arguments=arguments)):
            assert small(raw, tool.special_keys, start, not arguments) == expected
    assert small('{"a": [], "b": " "}', tool.special_keys, tool.hash_seed(arguments=False), True)[1] is True


def test_remembered_payload_fingerprints_follow_a_rotated_key(writer: str, methods: str) -> None:
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


# --- the compiled methods ------------------------------------------------------------------------


# Hits, misses, texts the one call refuses (noise key, NaN, long text, a wide int), texts it never
# takes (a scalar, too long to remember, no str), and the same texts again.
ODD_PAYLOADS: list[Any] = [
    '{"order_id": "A-1", "qty": 2}', '[1, "2", 3.0]', '{"trace_id": "t", "a": 1}', '[NaN]', '["' + "x" * 300 + '"]',
    "[18446744073709551616]", '"text"', "7", "", "[" + "0," * 600 + "0]", {"a": 1}, b"[1]", None,
    '{"order_id": "A-1", "qty": 2}', '{"status": "ok", "items": []}', " [1]", '{"a": {"b": [true, null]}}',
    '{"items": [], "note": " "}', "[]",
]


def test_the_compiled_methods_remember_what_the_python_methods_remember() -> None:
    _compiled_methods()
    tool = Fingerprinter("search", DEFAULT_NOISE_KEYS, frozenset({"tags"}))
    compiled, python = PayloadFingerprints(max_entries=6), PayloadFingerprints(max_entries=6)
    for round_ in range(3):  # the memory fills, forgets its older half, and fills again
        for raw in ODD_PAYLOADS + [f'{{"round": {round_}, "n": {n}}}' for n in range(5)]:
            assert compiled.arguments(tool, raw) == payload_fingerprints._python_arguments(python, tool, raw), raw
            assert compiled.result(tool, raw) == payload_fingerprints._python_result(python, tool, raw), raw
            assert compiled._remembered == python._remembered, raw
    assert PayloadFingerprints.arguments is not payload_fingerprints._python_arguments


def test_the_compiled_methods_fingerprint_a_usual_text_with_no_python_frame() -> None:
    _compiled_methods()
    tool = Fingerprinter("search")
    payloads = PayloadFingerprints()
    tool.hash_state(arguments=True)  # (its states are built on first use, by Python)

    def a_miss_then_a_hit() -> None:
        for _ in range(2):
            payloads.arguments(tool, '{"order_id": "A-1", "page": 2}')
            payloads.result(tool, '{"status": "ok", "items": [{"sku": "12", "qty": 1.0}]}')

    _, ran = python_code_run(a_miss_then_a_hit)
    assert [code for code in ran if "otel_agentguard" in code.co_filename] == []
    assert len(payloads._remembered) == 2


def test_the_compiled_methods_leave_anything_unusual_to_the_python_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    _compiled_methods()
    tool, raw = Fingerprinter("search"), '{"order_id": "A-1"}'
    seen: list[Any] = []

    class Counting(PayloadFingerprints):
        __slots__ = ()

        def _fingerprint(self, fingerprinter: Fingerprinter, raw: Any, arguments: bool) -> tuple[str, bool]:
            seen.append(("subclass", raw))
            return super()._fingerprint(fingerprinter, raw, arguments)

    class OwnFingerprinter(Fingerprinter):
        __slots__ = ()

    assert Counting().arguments(tool, raw) == reference(tool, raw)[0]
    assert seen == [("subclass", raw)]
    own = OwnFingerprinter("search")
    payloads = PayloadFingerprints()
    assert payloads.arguments(own, raw) == reference(own, raw)[0]
    assert (own, raw, True) in payloads._remembered  # remembered by the Python method
    assert payloads.result(fingerprinter=tool, raw=raw) == reference(tool, raw)[1:]
    with pytest.raises(TypeError):
        payloads.arguments(tool)  # type: ignore[call-arg]

    python_fingerprint_of = payload_fingerprints._fingerprint_of

    def replaced(fingerprinter: Fingerprinter, raw: Any, arguments: bool) -> tuple[str, bool]:
        seen.append(("replaced", raw))
        return python_fingerprint_of(fingerprinter, raw, arguments)

    monkeypatch.setattr(payload_fingerprints, "_fingerprint_of", replaced)
    assert PayloadFingerprints().arguments(tool, raw) == reference(tool, raw)[0]
    assert seen[-1] == ("replaced", raw)
    monkeypatch.undo()
    # So does a method the Python methods call, or one whose work the compiled ones do themselves.
    monkeypatch.setattr(PayloadFingerprints, "_fingerprint", lambda self, tool, raw, arguments: ("patched", False))
    assert PayloadFingerprints().arguments(tool, raw) == "patched"
    monkeypatch.undo()
    monkeypatch.setattr(Fingerprinter, "hash_seed", lambda self, arguments: b"\x00")  # no key, no prefix
    assert PayloadFingerprints().arguments(tool, raw) == payload_fingerprints._python_arguments(NO_MEMORY, tool, raw)


def test_the_compiled_methods_free_what_they_take() -> None:
    _compiled_methods()
    tool = Fingerprinter("search")
    texts = [f'{{"n": {n}, "s": "{n}"}}' for n in range(40)] + ODD_PAYLOADS

    def run() -> None:
        payloads = PayloadFingerprints(max_entries=16)
        for raw in texts * 3:
            payloads.arguments(tool, raw)
            payloads.result(tool, raw)

    assert_frees_what_it_takes(run)


def test_the_compiled_methods_are_made_once() -> None:
    _compiled_methods()
    from otel_agentguard import _payload_memory

    with pytest.raises(RuntimeError, match="made once"):  # a reload of the module keeps the Python methods
        _payload_memory.methods({})
