"""The compiled decoder of a span's attributes reads every record as the Python one does.

The typed reader of OTLP JSON lines (``_typed_otlp``) decodes each span's attributes from the
records msgspec made, in C where the package was built with a C compiler
(``replay/_typed_attributes.c``), else in Python (``_typed_otlp._attributes``). Both run on the
same records here, from Hypothesis and from the odd values the reader tests collect: the same
dict (values, key order, the shared strings a replay keeps once), or both leave the line to the
reference reader. test_replay_typed_reader runs every reader test with each of the two.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("msgspec")  # the fast extra; `make test` installs it

import msgspec
from compiled_modules import assert_frees_what_it_takes, skip_unless_built
from test_replay_fuzz import VALUES
from test_replay_typed_reader import NEAR_USUAL_KEYS, ODD_VALUE, ODD_VALUES, USUAL_VALUE

from otel_agentguard import attributes as A
from otel_agentguard.replay import _typed_otlp, otlp
from otel_agentguard.replay.otlp import decode_read_attributes

COMPILED = _typed_otlp.read_attributes  # as chosen at import, before any test switches it
PARSE = _typed_otlp.parse_attributes
RECORDS = msgspec.json.Decoder(list[_typed_otlp._KeyValue])

ANY_KEY = st.one_of(NEAR_USUAL_KEYS, st.sampled_from(sorted(otlp.READ_KEYS)), st.text(max_size=8),
                    st.sampled_from(["llm.input_messages.1.message.role", "gen_ai.prompt.0.content", "x"]))
ANY_VALUE = st.one_of(USUAL_VALUE, ODD_VALUE, st.sampled_from(ODD_VALUES), VALUES)
ATTRIBUTES = st.lists(st.fixed_dictionaries({"key": ANY_KEY}, optional={"value": ANY_VALUE}), max_size=8)


@pytest.fixture(autouse=True)
def compiled() -> None:
    skip_unless_built(COMPILED is not _typed_otlp._attributes, "otel_agentguard.replay._typed_attributes",
                      "attributes are decoded in Python")


def _outcome(decode: Any, records: Any) -> tuple[str, Any]:
    shared: dict[str, str] = {}
    try:
        attrs = decode(records, shared, otlp._KEPT)
    except _typed_otlp._LEFT_TO_THE_REFERENCE as exc:
        return "left to the reference reader", type(exc).__name__
    # The same values under the same keys in the same order, and the same strings shared: each
    # read key is the one string kept for it, each repeated value the line's one copy.
    return repr(list(attrs.items())), [
        (key is otlp.SHARED_READ_KEYS.get(key), type(value) is str and value is shared.get(value))
        for key, value in attrs.items()
    ]


@settings(max_examples=600, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ATTRIBUTES)
def test_every_record_is_read_as_the_python_decoder_reads_it(attributes):
    try:
        records = RECORDS.decode(json.dumps(attributes).encode())
    except msgspec.MsgspecError:  # not records the typed reader decodes: the reference reader reads the line
        return
    outcome = _outcome(COMPILED, records)
    assert outcome == _outcome(_typed_otlp._attributes, records)
    if outcome[0] != "left to the reference reader":  # and so the reference decoder reads them
        assert outcome[0] == repr(list(decode_read_attributes(attributes).items()))


@pytest.mark.parametrize("value", ODD_VALUES, ids=[json.dumps(v) for v in ODD_VALUES])
@pytest.mark.parametrize("key", [A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_OPERATION_NAME, "http.route"])
def test_each_odd_value_is_read_alike(key, value):
    records = RECORDS.decode(json.dumps([{"key": key, "value": value}]).encode())
    assert _outcome(COMPILED, records) == _outcome(_typed_otlp._attributes, records)


INT64_EDGES = [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 0, -1]
NUMBER_TEXTS = ["\u0661\u0662\u0663", "1\u0000", "\u00a07", "+7", " 7 ", "1_000", "1__0", "0x10", "07", "", "-",
                "9" * 5000, "1e3", "1.0", "inf", "nan", "-0", "\u0b67"]


@pytest.mark.parametrize("member", ["intValue", "doubleValue", "boolValue"])
@pytest.mark.parametrize("value", [*INT64_EDGES, *map(str, INT64_EDGES), *NUMBER_TEXTS],
                         ids=lambda v: repr(v)[:24])
def test_numbers_at_their_limits_and_in_odd_spellings_are_read_alike(member, value):
    records = RECORDS.decode(json.dumps([{"key": A.GEN_AI_USAGE_INPUT_TOKENS, "value": {member: value}}]).encode())
    assert _outcome(COMPILED, records) == _outcome(_typed_otlp._attributes, records)


LEAK_CASES = [
    {"arrayValue": {"values": [{"stringValue": "stop"}, {"stringValue": "tool_calls"}]}},
    {"arrayValue": {"values": [{"stringValue": "stop"}, {"intValue": "1"}]}},
    {"arrayValue": {"values": [{"stringValue": "stop"}, {"intValue": "x"}]}},
    {"kvlistValue": {"values": [{"key": "a", "value": {"stringValue": "b"}}]}},
    {"intValue": "99999999999999999999"}, {"intValue": 7}, {"doubleValue": "x"}, {"boolValue": 1},
    {"stringValue": "chat"}, {"bytesValue": "!!"}, None,
]


@pytest.mark.parametrize("value", LEAK_CASES, ids=json.dumps)
@pytest.mark.parametrize("key", [A.GEN_AI_RESPONSE_FINISH_REASONS, A.GEN_AI_OPERATION_NAME, "http.route"])
def test_reading_holds_on_to_nothing(key, value):
    # Every reference the decoder takes, on every path (errors included), it gives back.
    records = RECORDS.decode(json.dumps([{"key": key, "value": value}]).encode())
    record = records[0]
    watched = [records, record, record.key, record.value]
    if record.value is not None:
        members = [getattr(record.value, name) for name in record.value.__struct_fields__]
        watched += [member for member in members if member is not msgspec.UNSET]
        array = record.value.arrayValue
        if isinstance(array, dict):
            watched += [array["values"], *array["values"], *(m.get("stringValue") for m in array["values"])]

    def read_often() -> None:
        for _ in range(50):
            try:
                COMPILED(records, {}, otlp._KEPT)
            except _typed_otlp._LEFT_TO_THE_REFERENCE:
                pass

    read_often()  # the first reads fill the memory of unlisted keys
    before = [sys.getrefcount(x) for x in watched]
    read_often()
    assert [sys.getrefcount(x) for x in watched] == before


def test_a_key_of_a_str_subclass_is_read_as_the_python_decoder_reads_it():
    class Key(str):
        pass

    for key in ("http.route", A.GEN_AI_OPERATION_NAME):
        records = [_typed_otlp._KeyValue(Key(key), _typed_otlp._AnyValue(stringValue="v"))]
        otlp.is_read_key(key)  # the memory of unlisted keys knows the plain string
        assert _outcome(COMPILED, records) == _outcome(_typed_otlp._attributes, records)


def test_repeated_values_are_kept_once_and_others_not():
    records = RECORDS.decode(json.dumps([
        {"key": A.GEN_AI_TOOL_NAME, "value": {"stringValue": "get_order"}},
        {"key": A.TOOL_ARGS_FINGERPRINT, "value": {"stringValue": "ab12"}},
    ]).encode())
    shared = {"get_order": "get_order", "ab12": "ab12"}
    attrs = COMPILED(records, shared, otlp._KEPT)
    assert attrs == {A.GEN_AI_TOOL_NAME: "get_order", A.TOOL_ARGS_FINGERPRINT: "ab12"}
    assert attrs[A.GEN_AI_TOOL_NAME] is shared["get_order"]  # a tool name repeats across a trace's spans
    assert attrs[A.TOOL_ARGS_FINGERPRINT] is not shared["ab12"]  # a fingerprint is the span's own


@pytest.mark.parametrize("array", [
    {"values": [{"stringValue": "stop"}, {"stringValue": "tool_calls"}]}, {"values": []}, {},
    {"values": [{"stringValue": "stop"}, {"intValue": "1"}]}, {"values": [{"stringValue": "a", "x": 1}]},
    {"values": [{"stringValue": 5}]}, {"values": "ab"}, {"values": None}, {"values": [], "x": 1}, {"other": []},
    {"values": [None]}, {"values": [[]]},
])
def test_arrays_of_strings_read_inline_and_others_alike(array):
    records = RECORDS.decode(json.dumps([{"key": A.GEN_AI_RESPONSE_FINISH_REASONS,
                                          "value": {"arrayValue": array}}]).encode())
    assert _outcome(COMPILED, records) == _outcome(_typed_otlp._attributes, records)


def test_records_of_another_type_are_refused():
    class Other(msgspec.Struct):
        key: str
        value: Any = None

    with pytest.raises(TypeError):
        COMPILED([Other("k")], {}, {})
    with pytest.raises(TypeError):
        COMPILED([_typed_otlp._KeyValue("k", Other("v"))], {}, {})


def test_a_helper_that_changes_the_records_under_it_crashes_nothing(monkeypatch):
    # Values other than strings, numbers, booleans and arrays of strings go to Python helpers, which
    # run Python code.
    records = RECORDS.decode(b'[{"key":"gen_ai.response.finish_reasons","value":{"arrayValue":{"values":'
                             b'[{"intValue":"1"}]}}},{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}}]')

    decode_array = otlp.decode_array

    def emptying(value: Any) -> tuple[Any, ...]:
        records.clear()
        return decode_array(value)

    monkeypatch.setattr(otlp, "decode_array", emptying)
    try:
        _typed_otlp._compiled()  # configured with the helper now in place
        assert COMPILED(records, {}, {}) == {A.GEN_AI_RESPONSE_FINISH_REASONS: (1,)}
    finally:
        monkeypatch.undo()
        _typed_otlp._compiled()


class _Plain:  # fields that are no slots (as another msgspec might make them)
    key = value = stringValue = intValue = boolValue = doubleValue = arrayValue = kvlistValue = bytesValue = None


class _Shifted(msgspec.Struct):  # slots, elsewhere than in the real records
    padding: Any = None
    key: str = ""
    value: Any = None


@pytest.mark.parametrize("key_value, any_value", [
    (_Plain, _typed_otlp._AnyValue), (_typed_otlp._KeyValue, _Plain), (_Shifted, _Plain),
])
def test_records_it_cannot_read_through_their_slots_leave_the_python_decoder_in_place(monkeypatch, key_value,
                                                                                     any_value):
    records = RECORDS.decode(b'[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},'
                             b'{"key":"gen_ai.usage.input_tokens","value":{"intValue":"7"}}]')
    monkeypatch.setattr(_typed_otlp, "_KeyValue", key_value)
    monkeypatch.setattr(_typed_otlp, "_AnyValue", any_value)
    try:
        assert _typed_otlp._compiled() is None  # so read_attributes would be the Python loop
    finally:
        monkeypatch.undo()
    # The refused configuration changed nothing: the module still reads the real records.
    assert COMPILED(records, {}, {}) == {A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_USAGE_INPUT_TOKENS: 7}
    assert _typed_otlp._compiled() == (COMPILED, PARSE)


def test_a_helper_that_configures_the_module_anew_frees_nothing_still_in_use():
    # The key an attribute is kept under is held through the helpers a value is handed to: one
    # that drops the configuration (and so the only reference to that key) crashes nothing.
    from otel_agentguard.replay import _typed_attributes

    def configure(shared_keys: dict[str, str], decode_value: Any) -> None:
        _typed_attributes.configure(_typed_otlp._KeyValue, _typed_otlp._AnyValue, shared_keys,
                                    otlp.REPEATED_VALUE_KEYS, otlp.is_read_key, otlp.decode_array, decode_value,
                                    msgspec.UNSET, _typed_otlp._Unparsed)

    def reconfiguring(value: Any) -> Any:
        configure(dict(otlp.SHARED_READ_KEYS), otlp.decode_value)
        _ = ["x" * 40 + str(i) for i in range(1000)]  # takes the memory freed, were anything freed
        return otlp.decode_value(value)

    key = "".join(["only", ".", "key"])  # a string no other object holds
    configure({key: key}, reconfiguring)
    del key
    try:
        records = RECORDS.decode(b'[{"key":"only.key","value":{"kvlistValue":{"values":[]}}}]')
        assert COMPILED(records, {}, {}) == {"only.key": {}}
    finally:
        assert _typed_otlp._compiled() == (COMPILED, PARSE)


SPAN_LINES = [
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}' % fields for fields in (
        b'{"traceId":"t1","spanId":"s1","parentSpanId":"p","name":"chat m","startTimeUnixNano":"1",'
        b'"endTimeUnixNano":"2","status":{"code":2}}',
        b'{"traceId":"t1","spanId":"s1","startTimeUnixNano":"x"}', b'{"traceId":"t1","spanId":5}',
        b'{"traceId":"t1","spanId":"s1","endTimeUnixNano":"%d"}' % 2**64, b'{"traceId":"t1","spanId":"s1","status":{}}',
        b'{"traceId":"t1","spanId":"s1","name":7,"status":{"code":[1]}}',
    )
]


def _span_outcome(read: Any, span: Any, attributes: dict[str, Any]) -> str:
    """What reading a span comes to: its facts with their types (a str subclass prints as a str),
    or the error that sends its line to the reference reader."""
    try:
        facts = read(span, dict(attributes), "p", {})
    except _typed_otlp._LEFT_TO_THE_REFERENCE as exc:
        return type(exc).__name__
    return repr((facts, [type(fact).__name__ for fact in facts]))


@pytest.mark.parametrize("line", SPAN_LINES, ids=range(len(SPAN_LINES)))
@pytest.mark.parametrize("attributes", [{}, {A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_USAGE_INPUT_TOKENS: 3},
                                        {A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_USAGE_INPUT_TOKENS: -3},
                                        {A.GEN_AI_OPERATION_NAME: "invoke_agent", A.SESSION_ID: "session-1"},
                                        {A.GEN_AI_OPERATION_NAME: "chat", A.SESSION_ID: "session-1"},
                                        {A.SESSION_ID: "session-1"}])
def test_a_span_read_in_c_is_read_as_in_python_and_holds_on_to_nothing(line, attributes):
    read_span = _typed_otlp._compiled_span_reader()
    skip_unless_built(read_span is not None, "otel_agentguard.replay._typed_attributes", "spans are read in Python")
    span = _typed_otlp._decode(line).resourceSpans[0].scopeSpans[0].spans[0]
    # Strings of this test's own (a decoded copy), so that a reference the reader keeps to a value
    # shows in its count, whatever else the process does with an equal string.
    attributes = {key: value.encode().decode() if type(value) is str else value for key, value in attributes.items()}
    own = [value for value in attributes.values() if type(value) is str]
    assert _span_outcome(read_span, span, attributes) == _span_outcome(_typed_otlp._read_span, span, attributes)

    def read_often() -> None:
        for _ in range(300):
            _span_outcome(read_span, span, attributes)

    held = [sys.getrefcount(value) for value in own]
    assert_frees_what_it_takes(read_often)
    assert [sys.getrefcount(value) for value in own] == held


class _Text(str):
    """A str subclass: equal to the str it holds, but not one."""


class _EqualToAll(str):
    """A str subclass equal to every value: what it is taken for depends on who compares."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0


_OPERATIONS = st.sampled_from(["chat", "execute_tool", "invoke_agent", "embeddings", "text_completion", "", "Chat"])
_FACT_VALUES = st.one_of(
    _OPERATIONS, _OPERATIONS.map(_Text), _OPERATIONS.map(_EqualToAll), st.text(max_size=4), st.none(),
    st.booleans(), st.integers(), st.floats(allow_nan=False), st.tuples(st.text(max_size=2)),
)
_COUNT_VALUES = st.one_of(
    st.integers(min_value=-(2**65), max_value=2**65), st.sampled_from([0, 2**63 - 1, 2**63, -1]), st.booleans(),
    st.floats(allow_nan=False), st.text(max_size=3), st.none(),
)


@settings(max_examples=400, deadline=None)
@example(operation="chat", session="s", counts={A.SEQUENCE: 2**63 - 1}, absent=set())
@example(operation="chat", session="s", counts={A.SEQUENCE: 2**63}, absent=set())
@example(operation="chat", session="s", counts={A.SEQUENCE: -1}, absent=set())
@example(operation="chat", session="s", counts={A.SEQUENCE: True}, absent=set())
@example(operation="chat", session="s", counts={A.SEQUENCE: 0}, absent=set())
@example(operation="chat", session=_Text("s"), counts={}, absent=set())
@given(operation=_FACT_VALUES, session=_FACT_VALUES,
       counts=st.dictionaries(st.sampled_from(sorted(otlp.COUNT_KEYS)), _COUNT_VALUES, max_size=3),
       absent=st.sets(st.sampled_from(["operation", "session"])))
def test_the_kind_counts_and_session_read_in_c_are_what_the_python_helpers_read(operation, session, counts, absent):
    # The compiled reader decides the usual cases of step_kind, counts_in_range and session_facts
    # itself; whatever the values, it must come to what the helpers say.
    read_span = _typed_otlp._compiled_span_reader()
    skip_unless_built(read_span is not None, "otel_agentguard.replay._typed_attributes", "spans are read in Python")
    span = _typed_otlp._decode(SPAN_LINES[0]).resourceSpans[0].scopeSpans[0].spans[0]
    attributes: dict[str, Any] = dict(counts)
    if "operation" not in absent:
        attributes[A.GEN_AI_OPERATION_NAME] = operation
    if "session" not in absent:
        attributes[A.SESSION_ID] = session
    assert _span_outcome(read_span, span, attributes) == _span_outcome(_typed_otlp._read_span, span, attributes)


def test_a_count_limit_beyond_64_bits_is_refused_and_the_configuration_kept():
    from otel_agentguard.replay import _typed_attributes

    read_span = _typed_otlp._compiled_span_reader()
    skip_unless_built(read_span is not None, "otel_agentguard.replay._typed_attributes", "spans are read in Python")
    span = _typed_otlp._decode(SPAN_LINES[0]).resourceSpans[0].scopeSpans[0].spans[0]
    attributes = {A.GEN_AI_OPERATION_NAME: "chat", A.SEQUENCE: 2**63}
    with pytest.raises(TypeError, match="max_count"):  # as any refused argument: the package reads in Python then
        _typed_attributes.configure_spans(
            _typed_otlp._Span, _typed_otlp._Status, otlp.step_kind, {}, A.GEN_AI_OPERATION_NAME, (A.SEQUENCE,), 2**64,
            otlp.session_facts, A.SESSION_ID, A.OP_INVOKE_AGENT, otlp.ERROR_CODES, A.NESTED_STEP, 2**64 - 1,
            _typed_otlp._Unusual)
    assert _span_outcome(read_span, span, attributes) == _span_outcome(_typed_otlp._read_span, span, attributes)
