"""The compiled parser of a span's attributes' JSON text makes what reading their records makes.

Where the package was built with its C module, the typed reader of OTLP JSON lines leaves each
span's attributes as JSON text (``msgspec.Raw``) and parses the usual shapes in C
(``_typed_attributes.parse``); any other shape raises ``_Unparsed`` and the line is decoded into
records, read by the compiled decoder that test_replay_typed_attributes holds to the Python one.
Here the parser and the record reader run on the same text, spelled several ways: the parser
gives the same dict (values, key order, shared strings) or leaves the text to the records, and
never takes text that msgspec would refuse to decode into records.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("msgspec")  # the fast extra; `make test` installs it

import msgspec
from compiled_modules import assert_frees_what_it_takes, skip_unless_built
from test_replay_typed_attributes import ANY_KEY, ANY_VALUE, INT64_EDGES, NUMBER_TEXTS, RECORDS, _outcome

from otel_agentguard import attributes as A
from otel_agentguard.replay import _typed_otlp, otlp

COMPILED = _typed_otlp.read_attributes
PARSE = _typed_otlp.parse_attributes
FOREIGN = Path(__file__).parent / "data" / "foreign"

UNPARSED = "left to the records"


@pytest.fixture(autouse=True)
def compiled() -> None:
    skip_unless_built(PARSE is not None, "otel_agentguard.replay._typed_attributes",
                      "attributes are decoded into records")


def _spellings(attributes: Any, ascii_only: bool = True) -> list[bytes]:
    """The same JSON written compactly, with spaces, and indented."""
    return [json.dumps(attributes, separators=(",", ":"), ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"),
            json.dumps(attributes, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"),
            json.dumps(attributes, indent=1, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")]


def _parsed(text: bytes) -> tuple[str, Any]:
    try:
        return _outcome(lambda _, shared, kept: PARSE(text, shared, kept), None)
    except _typed_otlp._Unparsed:
        return UNPARSED, None


def _read(text: bytes) -> tuple[str, Any] | None:
    """What the records of ``text`` read to; None when msgspec would not decode them."""
    try:
        records = RECORDS.decode(text)
    except msgspec.MsgspecError:
        return None
    return _outcome(COMPILED, records)


def _parsed_as_read(text: bytes) -> tuple[str, Any]:
    parsed, read = _parsed(text), _read(text)
    if read is None:
        assert parsed[0] == UNPARSED, text  # never taken where the records could not be
    elif parsed[0] != UNPARSED:
        assert parsed == read, text
    return parsed


@settings(max_examples=500, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.fixed_dictionaries({"key": ANY_KEY}, optional={"value": ANY_VALUE}), max_size=8), st.booleans())
def test_any_attributes_are_parsed_as_their_records_are_read(attributes, ascii_only):
    for text in _spellings(attributes, ascii_only):
        _parsed_as_read(text)


USUAL = [
    {"key": A.GEN_AI_OPERATION_NAME, "value": {"stringValue": "chat"}},
    {"key": A.SESSION_ID, "value": {"stringValue": "s-1"}},
    {"key": A.GEN_AI_USAGE_INPUT_TOKENS, "value": {"intValue": "618"}},
    {"key": A.GEN_AI_USAGE_OUTPUT_TOKENS, "value": {"intValue": 19}},
    {"key": A.SEQUENCE, "value": {"intValue": "-3"}},
    {"key": A.TOOL_ARGS_FINGERPRINT, "value": {"stringValue": "ebc9fab181955013af2779427b89ba05"}},
    {"key": A.GEN_AI_RESPONSE_FINISH_REASONS, "value": {"arrayValue": {"values": [{"stringValue": "stop"}]}}},
    {"key": A.TOOL_ARGS_KEYS, "value": {"arrayValue": {"values": []}}},
    {"key": "gen_ai.request.temperature", "value": {"doubleValue": 0.25}},
    {"key": "gen_ai.request.top_p", "value": {"doubleValue": 1}},
    {"key": A.TOOL_RESULT_EMPTY, "value": {"boolValue": False}},
    {"key": "http.route", "value": {"stringValue": "/orders/{id}"}},
    {"key": "gen_ai.tool.call.arguments", "value": {"stringValue": "{\"q\": \"caf\u00e9 \\\\ \\n \u20ac\"}"}},
    {"key": "empty", "value": {}},
    {"key": "null", "value": None},
    {"key": "absent"},
]


@pytest.mark.parametrize("ascii_only", [True, False])
def test_the_usual_shapes_are_parsed_not_left_to_the_records(ascii_only):
    for text in _spellings(USUAL, ascii_only):
        assert _parsed_as_read(text)[0] != UNPARSED, text
    assert _parsed(b"null") == _parsed(b"[]") == _parsed(b" [ ] ") == ("[]", [])


def test_recorded_lines_are_parsed_whole():
    for path in sorted(FOREIGN.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            if not line.startswith(_typed_otlp._LINE_START):
                continue
            for resource in _typed_otlp._decode_text(line).resourceSpans or ():
                for scope in resource.scopeSpans or ():
                    for span in scope.spans or ():
                        assert _parsed_as_read(bytes(span.attributes))[0] != UNPARSED, path.name


@pytest.mark.parametrize("member", ["intValue", "doubleValue", "boolValue", "stringValue"])
@pytest.mark.parametrize("value", [*INT64_EDGES, *map(str, INT64_EDGES), *NUMBER_TEXTS, True, None, [], {},
                                   0.1, -0.0, 1e-320, 1.7976931348623157e308, 2**53 + 1, 10**18 - 1, -(10**17)],
                         ids=lambda v: repr(v)[:24])
def test_numbers_at_their_limits_and_in_odd_spellings_are_parsed_alike(member, value):
    for text in _spellings([{"key": A.GEN_AI_USAGE_INPUT_TOKENS, "value": {member: value}}]):
        _parsed_as_read(text)


@pytest.mark.parametrize("number", [
    "0", "-0", "-0.0", "1E5", "1e+5", "2.5e-3", "1e-400", "1e400", "-1e400", "01", "1.", ".5", "1e", "+1", "0x1",
    "123456789012345678", "1234567890123456789", "-123456789012345678", "9007199254740993", "4.9e-324",
    "0.1000000000000000055511151231257827", "1" * 70 + ".5",
])
@pytest.mark.parametrize("member", ["intValue", "doubleValue"])
def test_json_numbers_as_written_are_parsed_as_msgspec_decodes_them(member, number):
    text = b'[{"key":"gen_ai.request.temperature","value":{"%s":%s}}]' % (member.encode(), number.encode())
    _parsed_as_read(text)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.floats(allow_nan=False, allow_infinity=False), st.sampled_from(["{!r}", "{:.17e}", "{:.3E}", "{:f}"]))
def test_any_double_is_parsed_as_msgspec_decodes_it(value, spelling):
    number = spelling.format(value)
    text = b'[{"key":"gen_ai.request.temperature","value":{"doubleValue":%s}}]' % number.encode()
    _parsed_as_read(text)


STRINGS = st.text(st.characters(codec=None), max_size=12)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(STRINGS, st.sampled_from([A.GEN_AI_TOOL_NAME, A.GEN_AI_OPERATION_NAME, "x.unread"]), st.booleans())
def test_any_string_is_parsed_as_msgspec_decodes_it(value, key, as_key):
    attribute = {"key": value, "value": {"stringValue": "v"}} if as_key else {"key": key, "value": {"stringValue": value}}
    for text in _spellings([attribute], ascii_only=False) + _spellings([attribute]):
        _parsed_as_read(text)


@pytest.mark.parametrize("raw", [
    b'"caf\xc3\xa9"', b'"\xe9"', b'"\xed\xa0\x80"', b'"a\x01b"', b'"a\x7fb"', b'"\\ud83d\\ude00"', b'"\\ud83d"',
    b'"\\u00e9\\/\\b\\f\\n\\r\\t\\"\\\\"', b'"\\x"', b'"\\u12"', b'"\\u12g4"', b'"abc', b'"abc\\"',
])
def test_string_bytes_and_escapes_are_parsed_as_msgspec_decodes_them(raw):
    for key in (A.GEN_AI_TOOL_NAME, "x.unread"):
        _parsed_as_read(b'[{"key":"%s","value":{"stringValue":%s}}]' % (key.encode(), raw))
        _parsed_as_read(b'[{"key":%s,"value":{"stringValue":"v"}}]' % raw)


@pytest.mark.parametrize("text", [
    b"", b"[", b"]", b"{}", b"[{}]", b"[1]", b'[{"key":"a"},]', b'[{"key":"a"}', b'[{"key":"a"}] x',
    b'[{"value":{"stringValue":"v"},"key":"a"}]', b'[{"key":"a","value":{"stringValue":"v"},"x":1}]',
    b'[{"key":"a","key":"b"}]', b'[{"key":1}]', b'[{"key":"a","value":1}]', b'[{"key":"a","value":[]}]',
    b'[{"key":"a","value":{"stringValue":"v","intValue":"1"}}]', b'[{"key":"a","value":{"x":1}}]',
    b'[{"key":"a","value":{"kvlistValue":{"values":[]}}}]', b'[{"key":"a","value":{"bytesValue":"AA=="}}]',
    b'[{"key":"a","value":{"boolValue":"true"}}]', b'[{"key":"a","value":{"boolValue":tru}}]',
    b'[{"key":"a","value":{"arrayValue":{"values":[{"intValue":"1"}]}}}]',
    b'[{"key":"a","value":{"arrayValue":{"values":[{"stringValue":"s"},]}}}]',
    b'[{"key":"a","value":{"arrayValue":{}}}]', b'[{"key":"a","value":{"arrayValue":{"values":[]},"x":1}}]',
    b'[{"key" : "a" , "value" : { "stringValue" : "v" } } ]', b'\t[\r\n{"key":"a"}\n]\n',
])
def test_text_out_of_the_usual_shape_is_parsed_alike_or_left_to_the_records(text):
    _parsed_as_read(text)


def test_more_keys_than_the_table_of_known_keys_holds_are_all_read():
    attributes = [{"key": f"gen_ai.prompt.{i}.content", "value": {"stringValue": str(i)}} for i in range(1500)]
    attributes += [{"key": f"x.unread.{i}", "value": {"intValue": str(i)}} for i in range(1500)]
    text = json.dumps(attributes).encode()
    for _ in range(2):  # the second time, the first keys are known and the others not
        assert _parsed_as_read(text)[0] != UNPARSED


def test_another_memory_of_unlisted_keys_is_asked_afresh(monkeypatch):
    text = b'[{"key":"gen_ai.prompt.0.content","value":{"stringValue":"hi"}},{"key":"x.y","value":{"stringValue":"z"}}]'
    assert PARSE(text, {}, otlp._KEPT) == {"gen_ai.prompt.0.content": "hi"}
    # A memory that says otherwise (as only a test would make one): the table follows it, not its past.
    assert PARSE(text, {}, {"gen_ai.prompt.0.content": False, "x.y": True}) == {"x.y": "z"}
    assert PARSE(text, {}, otlp._KEPT) == {"gen_ai.prompt.0.content": "hi"}


def test_repeated_values_are_kept_once_and_others_not():
    text = json.dumps([{"key": A.GEN_AI_TOOL_NAME, "value": {"stringValue": "get_order"}},
                       {"key": A.TOOL_ARGS_FINGERPRINT, "value": {"stringValue": "ab12"}}]).encode()
    shared = {"get_order": "get_order", "ab12": "ab12"}
    for _ in range(2):  # once deciding each key, once from the table
        attrs = PARSE(text, shared, otlp._KEPT)
        assert attrs == {A.GEN_AI_TOOL_NAME: "get_order", A.TOOL_ARGS_FINGERPRINT: "ab12"}
        assert attrs[A.GEN_AI_TOOL_NAME] is shared["get_order"]
        assert attrs[A.TOOL_ARGS_FINGERPRINT] is not shared["ab12"]


def test_a_helper_that_configures_the_module_anew_midway_crashes_nothing(monkeypatch):
    from otel_agentguard.replay import _typed_attributes

    is_read_key = otlp.is_read_key

    def reconfiguring(key: Any) -> bool:
        _typed_otlp._compiled()  # drops the table of known keys, and the keys it held
        _ = ["x" * 40 + str(i) for i in range(1000)]  # takes the memory freed, were anything freed
        return is_read_key(key)

    monkeypatch.setattr(otlp, "is_read_key", reconfiguring)
    try:
        _typed_otlp._compiled()
        text = json.dumps([{"key": "".join(["gen_ai.prompt.", str(i), ".role"]), "value": {"stringValue": "user"}}
                           for i in range(40)]).encode()
        assert len(_typed_attributes.parse(text, {}, {})) == 40
    finally:
        monkeypatch.undo()
        _typed_otlp._compiled()


@pytest.mark.parametrize("text", [json.dumps(USUAL).encode(), b'[{"key":"a","value":{"intValue":"99999999999999999999"}}]',
                                  b'[{"key":"a","value":{"stringValue":"\\ud800"}}]', b'[{"key":"a","value":{"x":1}}]',
                                  b'[{"key":"gen_ai.prompt.0.content","value":{"stringValue":"\\u00e9"}}] x'])
def test_parsing_holds_on_to_nothing(text):
    # Every allocation a parse makes, on every path (errors included), it gives back.
    def parse_often() -> None:
        for _ in range(300):
            try:
                PARSE(text, {}, otlp._KEPT)
            except (_typed_otlp._Unparsed, ValueError):
                pass

    assert_frees_what_it_takes(parse_often)


def _configure_with(is_read_key: Any) -> None:
    from otel_agentguard.replay import _typed_attributes

    _typed_attributes.configure(_typed_otlp._KeyValue, _typed_otlp._AnyValue, otlp.SHARED_READ_KEYS,
                                otlp.REPEATED_VALUE_KEYS, is_read_key, otlp.decode_array, otlp.decode_value,
                                msgspec.UNSET, _typed_otlp._Unparsed)


def test_a_failing_helper_leaves_nothing_behind_and_an_interrupt_goes_through():
    def failing(key: str) -> bool:
        raise ValueError("no")

    def interrupted(key: str) -> bool:
        raise KeyboardInterrupt

    def parse_often() -> None:
        unparsed = 0
        for i in range(300):  # keys never met: each asks the helper
            try:
                PARSE(b'[{"key":"some.unread.key.%d","value":{"stringValue":"x"}}]' % i, {}, {})
            except _typed_otlp._Unparsed:  # the records are read instead, and raise it there
                unparsed += 1
        assert unparsed == 300

    try:
        _configure_with(failing)
        assert_frees_what_it_takes(parse_often)  # each key made was freed
        _configure_with(interrupted)
        with pytest.raises(KeyboardInterrupt):
            PARSE(b'[{"key":"other.unread.key","value":{"stringValue":"x"}}]', {}, {})
    finally:
        _typed_otlp._compiled()


_NESTED_FILL = """
import signal, sys
from otel_agentguard.replay import _typed_attributes as T, _typed_otlp as TO, otlp
signal.alarm(60)  # a table filled past its bound made a new key's lookup loop forever

def slot(key):  # the table's FNV-1a hash of a key's text, and its slot in 512
    h = 0xcbf29ce484222325
    for b in key.encode():
        h = ((h ^ b) * 0x100000001b3) % 2**64
    return h % 512

def text(key):
    return b'[{"key":"%s","value":{"stringValue":"x"}}]' % key.encode()

taken, fillers, free_keys = set(), [], {}
for i in range(100000):  # 383 keys in 383 slots, then one key for each slot left
    key, where = f"f{i}", slot(f"f{i}")
    if len(fillers) < 383:
        if where not in taken:
            taken.add(where); fillers.append(key)
    elif where not in taken and where not in free_keys:
        free_keys[where] = f"n{i}"
chain, depth, kept = list(free_keys.values()), [0], {}

def nesting(key):  # each undecided key parses the next before it answers
    if armed and depth[0] + 1 < len(chain):
        depth[0] += 1
        T.parse(text(chain[depth[0]]), {}, kept)
    return False

T.configure(TO._KeyValue, TO._AnyValue, otlp.SHARED_READ_KEYS, otlp.REPEATED_VALUE_KEYS, nesting,
            otlp.decode_array, otlp.decode_value, TO.UNSET, TO._Unparsed)
armed = False
for key in fillers:
    T.parse(text(key), {}, kept)
armed = True
sys.setrecursionlimit(10000)
T.parse(text(chain[0]), {}, kept)
assert T.parse(text("brand.new.key"), {}, kept) == {}
print("returned")
"""


def test_a_new_key_is_parsed_after_parses_nested_in_a_helper_filled_the_table_of_keys():
    import subprocess

    done = subprocess.run([sys.executable, "-c", _NESTED_FILL], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "returned", done.stderr[-2000:]


def test_a_span_is_read_with_the_layout_it_was_checked_against_when_a_helper_reconfigures():
    from otel_agentguard.replay import _typed_attributes

    class Padded(msgspec.Struct, gc=False):  # the same fields, three slots further on
        pad0: Any = None
        pad1: Any = None
        pad2: Any = None
        traceId: Any = None
        spanId: Any = None
        parentSpanId: Any = None
        name: Any = None
        startTimeUnixNano: Any = None
        endTimeUnixNano: Any = None
        attributes: Any = None
        status: Any = None

    def configure(span_type: type) -> None:  # the helper called back: a span with no operation name calls it
        _typed_attributes.configure_spans(span_type, _typed_otlp._Status, configuring, {}, A.GEN_AI_OPERATION_NAME, (),
                                          2**63 - 1, otlp.session_facts, A.SESSION_ID, A.OP_INVOKE_AGENT,
                                          otlp.ERROR_CODES, A.NESTED_STEP, 2**64 - 1, _typed_otlp._Unusual)

    def configuring(attrs: dict[str, Any]) -> str | None:
        configure(Padded)
        return "model"

    span = _typed_otlp._Span(traceId="t", spanId="s", name="chat m", startTimeUnixNano="1", endTimeUnixNano="2")
    try:
        configure(_typed_otlp._Span)
        read = _typed_attributes.read_span(span, {}, "p", {})
        assert read[0] == "model" and read[2] == "chat m" and read[6:8] == (1, 2)
    finally:
        assert _typed_otlp._compiled_span_reader() is not None  # configured as the package does
