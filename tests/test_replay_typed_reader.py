"""The msgspec reader of OTLP JSON lines gives what the reference reader gives, or leaves the line to it.

Every file is read twice, once with the typed reader and once with the reference reader alone
(orjson or the standard library, then the attribute decoder), and the sessions, their steps and
any error must be the same. Files come from real instrumentations' recordings, from this
package's own exporter on real SDK spans, from hand-picked odd values and from Hypothesis.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

pytest.importorskip("msgspec")  # the fast extra; `make test` installs it

from test_replay_fuzz import OTLP_DOCUMENT, VALUES

from otel_agentguard import attributes as A
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.judge.policy import coerce_policy
from otel_agentguard.replay import InputError, otlp, sources
from otel_agentguard.replay._typed_otlp import read_line
from otel_agentguard.replay.otlp import decode_read_attributes, decode_value
from otel_agentguard.replay.sources import read_files

FOREIGN = Path(__file__).parent / "data" / "foreign"
RECORDED = sorted(FOREIGN.glob("*.jsonl"))
TRACE = "0af7651916cd43dd8448eb211c80319c"
POLICY = coerce_policy(None)


def _read(path: Path, typed: bool, monkeypatch: pytest.MonkeyPatch) -> str:
    """The sessions read from ``path`` (or the error), as text: NaN compares equal to itself there."""
    with monkeypatch.context() as patch:
        if not typed:
            patch.setattr(sources, "_read_typed", None)
        try:
            return repr(read_files([path], POLICY))
        except InputError as exc:
            return f"InputError: {exc}"


def _same_either_way(path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    reference = _read(path, False, monkeypatch)
    assert _read(path, True, monkeypatch) == reference
    return reference


def _same_attributes(path: Path) -> None:
    """Each span the typed reader reads holds the attributes the reference decoder keeps."""
    for line in path.read_bytes().splitlines():
        read = read_line(line, str(path))
        if read is not None:
            spans = [span for resource in json.loads(line)["resourceSpans"] or ()
                     for scope in resource.get("scopeSpans") or () for span in scope.get("spans") or ()]
            assert [span[1] for span in read] == [decode_read_attributes(span.get("attributes")) for span in spans]


def _write_lines(path: Path, documents: list[Any], ascii_only: bool = True) -> Path:
    path.write_text("".join(json.dumps(d, allow_nan=True, separators=(",", ":"), ensure_ascii=ascii_only) + "\n"
                            for d in documents), encoding="utf-8", errors="surrogatepass")
    return path


def _document(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "t"},
                                                                                "spans": spans}]}]}


def _span(span_id: str, *attributes: tuple[str, dict[str, Any] | None], **fields: Any) -> dict[str, Any]:
    span = {"traceId": TRACE, "spanId": span_id, "name": "chat gpt-4o", "kind": 1,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
            "attributes": [{"key": key, "value": value} for key, value in attributes], "status": {"code": 0}}
    span.update(fields)
    return span


def _chat(span_id: str, *extra: tuple[str, dict[str, Any] | None], **fields: Any) -> dict[str, Any]:
    return _span(span_id, (A.GEN_AI_OPERATION_NAME, {"stringValue": "chat"}),
                 (A.GEN_AI_CONVERSATION_ID, {"stringValue": "s1"}),
                 (A.GEN_AI_REQUEST_MODEL, {"stringValue": "gpt-4o"}), *extra, **fields)


# --- the usual shape is read by the typed reader ----------------------------------------------------------


@pytest.mark.parametrize("path", RECORDED, ids=[p.name for p in RECORDED])
def test_traces_recorded_by_another_instrumentation_are_read_typed_and_alike(path, monkeypatch):
    lines = [line for line in path.read_bytes().splitlines() if line.strip()]
    assert lines
    assert all(read_line(line, str(path)) is not None for line in lines)  # none left to the reference reader
    assert "RecordedSession" in _same_either_way(path, monkeypatch)
    _same_attributes(path)


def test_our_exporters_lines_from_real_sdk_spans_are_read_typed_and_alike(tmp_path, monkeypatch):
    path = tmp_path / "trace.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(str(path))))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a", attributes={A.GEN_AI_OPERATION_NAME: "invoke_agent",
                                                                     A.SESSION_ID: "s1"}):
        for turn in range(3):
            with tracer.start_as_current_span("chat gpt-4o", attributes={
                A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_REQUEST_MODEL: "gpt-4o", A.SESSION_ID: "s1",
                A.SEQUENCE: 2 * turn + 1, A.GEN_AI_USAGE_INPUT_TOKENS: 100, A.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
                A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",), A.RESPONSE_TOOL_CALLS: 1,
            }):
                pass
            with tracer.start_as_current_span("execute_tool search", attributes={
                A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "search", A.SESSION_ID: "s1",
                A.SEQUENCE: 2 * turn + 2, A.GEN_AI_TOOL_CALL_ARGUMENTS: '{"q": "refund"}', "cost": 0.5,
                A.TOOL_RESULT_EMPTY: False,
            }):
                pass
    provider.shutdown()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 7 and all(read_line(line, str(path)) is not None for line in lines)
    read = _same_either_way(path, monkeypatch)
    assert read.count("Step(") == 6 and "tool_loop" not in read


# --- what only the reference reader may read --------------------------------------------------------------


ODD_VALUES = [
    {"intValue": "3", "stringValue": "b"},  # two members (not valid OTLP): read by precedence
    {"stringValue": "b", "intValue": "3"},
    {"intValue": "bad", "stringValue": "b"},
    {"boolValue": True, "intValue": "3"},
    {"doubleValue": 1.5, "arrayValue": {"values": []}},
    {"arrayValue": {"values": []}, "doubleValue": 1.5},
    {"kvlistValue": {"values": []}, "arrayValue": {"values": [{"stringValue": "a"}]}},
    {"bytesValue": "aGk=", "kvlistValue": {"values": [{"key": "a", "value": {"stringValue": "b"}}]}},
    {"doubleValue": 1.5, "boolValue": True},
    {},
    {"stringValue": None},
    {"intValue": None},
    {"intValue": "12345678901234567890"},
    {"intValue": 1.0},
    {"intValue": " 7 "},
    {"doubleValue": "x"},
    {"doubleValue": 1e308},
    {"bytesValue": "not base64!"},
    {"bytesValue": "aGk="},
    {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}},
    {"arrayValue": None},
    {"unknownValue": 1},
    {"stringValue": 5},
    None,
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=[json.dumps(v) for v in ODD_VALUES])
@pytest.mark.parametrize("key", [A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_RESPONSE_MODEL, A.GEN_AI_CONVERSATION_ID,
                                 "http.route"])
def test_odd_values_read_alike(tmp_path, monkeypatch, key, value):
    path = _write_lines(tmp_path / "t.jsonl", [_document([_chat("b7ad6b7169203331", (key, value))])])
    _same_either_way(path, monkeypatch)
    _same_attributes(path)


def test_a_value_with_two_members_is_read_by_precedence_whatever_their_order(tmp_path, monkeypatch):
    # Not valid OTLP (a value is a oneof): both readers take the member first in a fixed order
    # (string, int, bool, double, array, kvlist, bytes), not the one first in the text.
    assert decode_value({"intValue": "3", "stringValue": "x"}) == decode_value({"stringValue": "x", "intValue": "3"})
    assert decode_value({"doubleValue": 1.5, "boolValue": False}) is False
    assert decode_value({"bytesValue": "aGk=", "arrayValue": {"values": []}}) == ()
    documents = [_document([_chat("b7ad6b7169203331", (A.GEN_AI_RESPONSE_MODEL, {"intValue": "3",
                                                                                   "stringValue": "gpt-x"}))]),
                 _document([_chat("00f067aa0ba902b7", (A.GEN_AI_RESPONSE_MODEL, {"stringValue": "gpt-y",
                                                                                   "intValue": "4"}))])]
    path = _write_lines(tmp_path / "t.jsonl", documents)
    assert None not in [read_line(line, "t") for line in path.read_bytes().splitlines()]
    read = _same_either_way(path, monkeypatch)
    assert "model='gpt-x'" in read and "model='gpt-y'" in read


ODD_SPANS = [
    {"spanId": ""}, {"spanId": None}, {"spanId": 5}, {"traceId": ""}, {"parentSpanId": 7},
    {"startTimeUnixNano": "-1"}, {"startTimeUnixNano": str(2**64)}, {"startTimeUnixNano": "1_700"},
    {"startTimeUnixNano": 1.5}, {"startTimeUnixNano": True}, {"endTimeUnixNano": "soon"},
    {"status": {"code": 2}}, {"status": {"code": "STATUS_CODE_ERROR"}}, {"status": []}, {"status": "bad"},
    {"status": {}}, {"status": {"code": 1}}, {"name": 42}, {"name": None}, {"attributes": None}, {"attributes": {}},
    {"spanId": 0}, {"parentSpanId": 0}, {"parentSpanId": []}, {"parentSpanId": ""}, {"traceId": False},
    {"startTimeUnixNano": 0}, {"startTimeUnixNano": "0"}, {"startTimeUnixNano": 1e30}, {"endTimeUnixNano": None},
    {"endTimeUnixNano": str(2**64 - 1)}, {"startTimeUnixNano": " 17 "}, {"status": None}, {"status": {"code": 2.0}},
    {"status": {"code": [2]}}, {"status": {"code": "2"}}, {"status": {"code": 0}}, {"name": ""}, {"name": ["x"]},
]


def _tool(span_id: str, **fields: Any) -> dict[str, Any]:
    return _span(span_id, (A.GEN_AI_OPERATION_NAME, {"stringValue": "execute_tool"}),
                 (A.GEN_AI_CONVERSATION_ID, {"stringValue": "s1"}), (A.GEN_AI_TOOL_NAME, {"stringValue": "search"}),
                 **fields)


def _bare_tool(span_id: str, **fields: Any) -> dict[str, Any]:
    """A tool span naming its tool only in the span name."""
    return _span(span_id, (A.GEN_AI_OPERATION_NAME, {"stringValue": "execute_tool"}),
                 (A.GEN_AI_CONVERSATION_ID, {"stringValue": "s1"}), **{"name": "execute_tool search", **fields})


@pytest.mark.parametrize("fields", ODD_SPANS, ids=[json.dumps(f) for f in ODD_SPANS])
@pytest.mark.parametrize("make", [_chat, _tool, _bare_tool])
def test_odd_span_fields_read_alike(tmp_path, monkeypatch, make, fields):
    path = _write_lines(tmp_path / "t.jsonl", [_document([make("b7ad6b7169203331", **fields)])])
    _same_either_way(path, monkeypatch)


def test_keys_under_a_read_prefix_are_kept_before_any_reader_has_met_them(monkeypatch):
    monkeypatch.setattr(otlp, "_KEPT", {})  # the readers' memory of which unlisted keys they read
    span = _chat("b7ad6b7169203331", ("llm.output_messages.0.message.content", {"stringValue": "Done."}),
                 ("http.route", {"stringValue": "/chat"}))
    read = read_line(json.dumps(_document([span])).encode(), "t")
    assert read is not None and "llm.output_messages.0.message.content" in read[0][1]
    assert "http.route" not in read[0][1]
    assert read[0][1] == decode_read_attributes(span["attributes"])


ODD_LINES = [
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"\\ud800","spanId":"a"}]}]}]}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"t","spanId":"a","startTimeUnixNano":NaN}]}]}]}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"t","spanId":"a","attributes":[{"key":"x",'
    b'"value":{"doubleValue":1e400}}]}]}]}]}',
    b'{"resourceSpans":5}',
    b'{"resourceSpans":[],"resourceSpans":7}',
    b'{"resourceSpans":null}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":["a span"]}]}]}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"t","spanId":"a","attributes":[{"value":{}}]}]}]}]}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"t","spanId":"a","attributes":[{"key":1,"value":null}]}]}]}]}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"t","spanId":"a"}]}]}]} trailing',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"t","spanId":"a","attributes":[{"key":"gen_ai.'
    b'operation.name","value":{"stringValue":"chat"}},{"key":"gen_ai.usage.input_tokens","value":{"intValue":'
    b'123456789012345678901234567890}}]}]}]}]}',
]


_USUAL_SPAN = (b'{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","name":"chat m",'
               b'"startTimeUnixNano":"1","endTimeUnixNano":"2","attributes":[{"key":"gen_ai.operation.name",'
               b'"value":{"stringValue":"chat"}},{"key":"gen_ai.conversation.id","value":{"stringValue":"s1"}}')
ODD_LINES += [
    # Not UTF-8 (or cut off) where the typed reader reads nothing: the standard library refuses the line.
    b'{"resourceSpans":[{"scopeSpans":[{"scope":{"name":"\xff"},"spans":[' + _USUAL_SPAN + b']}]}]}]}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + _USUAL_SPAN + b'],"status":{"code":2,"message":"cut\xe2\x80"}}]}]}]}',
    b'{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"stringValue":"\xc0\x80"}}]},"scopeSpans":'
    b'[{"spans":[' + _USUAL_SPAN + b']}]}]}]}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + _USUAL_SPAN + b'],"k\xff":1}]}]}]}',
    # UTF-8 everywhere, raw: read alike.
    b'{"resourceSpans":[{"scopeSpans":[{"scope":{"name":"\xc3\xa9"},"spans":[' + _USUAL_SPAN
    + b',{"key":"gen_ai.response.model","value":{"stringValue":"mod\xc3\xa8le \xe2\x9c\x93"}}]}]}]}]}',
    # Integers beyond 64 bits as array items and after whitespace, where orjson would read floats.
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + _USUAL_SPAN
    + b',{"key":"gen_ai.response.model","value":{"stringValue":[12345678901234567890123]}}]}]}]}]}',
    b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + _USUAL_SPAN
    + b',{"key":"gen_ai.response.model","value":{"stringValue":\t18446744073709551616}}]}]}]}]}',
]


@pytest.mark.parametrize("line", ODD_LINES)
def test_odd_lines_read_alike(tmp_path, monkeypatch, line):
    path = tmp_path / "t.jsonl"
    path.write_bytes(line + b"\n")
    _same_either_way(path, monkeypatch)


def test_a_duplicated_span_and_a_verdict_span_read_alike(tmp_path, monkeypatch):
    chat = _chat("b7ad6b7169203331", (A.SEQUENCE, {"intValue": "1"}), parentSpanId="00f067aa0ba902b7")
    # A verdict span the guard wrote is no input: admitted, this one would be a second model step.
    verdict = _chat("1111111111111111", (A.VERDICT, {"stringValue": "completed"}), parentSpanId="2222222222222222")
    session = _span("00f067aa0ba902b7", (A.GEN_AI_OPERATION_NAME, {"stringValue": "invoke_agent"}),
                    (A.GEN_AI_CONVERSATION_ID, {"stringValue": "s1"}), parentSpanId="2222222222222222")
    path = _write_lines(tmp_path / "t.jsonl", [_document([chat, verdict]), _document([chat, session, chat])])
    read = _same_either_way(path, monkeypatch)
    assert read.count("Step(") == 1


# --- anything at all --------------------------------------------------------------------------------------

USUAL_VALUE = st.one_of(
    st.builds(lambda v: {"stringValue": v}, st.text(max_size=6)),
    st.builds(lambda v: {"intValue": v}, st.integers(-(2**63), 2**63).map(str)),
    st.builds(lambda v: {"boolValue": v}, st.booleans()),
    st.builds(lambda v: {"doubleValue": v}, st.floats(allow_nan=False)),
    st.builds(lambda v: {"arrayValue": {"values": v}}, st.lists(st.builds(lambda s: {"stringValue": s},
                                                                          st.text(max_size=4)), max_size=3)),
)
ODD_VALUE = st.one_of(
    st.builds(lambda v: {"stringValue": v}, st.one_of(st.none(), st.integers(), st.lists(st.integers(), max_size=2))),
    st.builds(lambda v: {"intValue": v}, st.one_of(st.integers(-(2**64), 2**64).map(str), st.integers(-5, 5),
                                                  st.none(), st.floats())),
    st.builds(lambda v: {"boolValue": v}, st.one_of(st.none(), st.integers(0, 1))),
    st.builds(lambda v: {"doubleValue": v}, st.text(max_size=4)),
    st.dictionaries(st.sampled_from(["stringValue", "intValue", "boolValue", "doubleValue", "other"]),
                    st.one_of(st.text(max_size=3), st.integers(0, 9).map(str), st.booleans()), max_size=3),
    st.none(),
)
# Mostly usual: one odd value sends its whole line to the reference reader.
NEAR_USUAL_VALUE = st.one_of(*[USUAL_VALUE] * 9, ODD_VALUE)
NEAR_USUAL_KEYS = st.sampled_from([
    A.GEN_AI_OPERATION_NAME, A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, A.GEN_AI_TOOL_NAME, A.SEQUENCE,
    A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_RESPONSE_FINISH_REASONS, A.GEN_AI_TOOL_CALL_ARGUMENTS, A.VERDICT,
    A.NESTED_STEP, A.STOP_REASON, A.TOOL_RESULT_EMPTY, "llm.output_messages.0.message.content", "http.route",
])
OPERATIONS = st.sampled_from(["chat", "execute_tool", "invoke_agent"]).map(
    lambda op: {"key": A.GEN_AI_OPERATION_NAME, "value": {"stringValue": op}})
NEAR_USUAL_SPAN = st.fixed_dictionaries(
    {
        "traceId": st.sampled_from([TRACE] * 6 + ["4bf92f3577b34da6a3ce929d0e0e4736", ""]),
        "spanId": st.sampled_from(["b7ad6b7169203331", "00f067aa0ba902b7", "53995c3f42cd8ad8", "e457b5a2e4d86bd1"]),
        "startTimeUnixNano": st.one_of(st.integers(0, 2**64).map(str), st.integers(0, 2**64).map(str),
                                       st.integers(-1, 2**65)),
        "endTimeUnixNano": st.integers(0, 2**64).map(str),
        "attributes": st.tuples(OPERATIONS, st.lists(st.fixed_dictionaries({"key": NEAR_USUAL_KEYS,
                                                                            "value": NEAR_USUAL_VALUE}),
                                                     max_size=5)).map(lambda pair: [pair[0], *pair[1]]),
    },
    optional={"parentSpanId": st.sampled_from(["b7ad6b7169203331", "00f067aa0ba902b7", ""]),
              "name": st.one_of(st.text(max_size=5), st.integers()),
              "status": st.one_of(*[st.fixed_dictionaries({"code": st.sampled_from([0, 1, 2, "2", "ERROR", None])})] * 5,
                                  VALUES)},
)
NEAR_USUAL_DOCUMENT = st.lists(NEAR_USUAL_SPAN, min_size=1, max_size=4).map(_document)
FILES = st.lists(st.one_of(NEAR_USUAL_DOCUMENT, NEAR_USUAL_DOCUMENT, NEAR_USUAL_DOCUMENT, OTLP_DOCUMENT),
                 min_size=1, max_size=3)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(FILES, st.booleans())
def test_any_file_reads_alike(tmp_path, monkeypatch, documents, ascii_only):
    path = _write_lines(tmp_path / "t.jsonl", documents, ascii_only)
    _same_either_way(path, monkeypatch)
    _same_attributes(path)


def test_a_lines_repeated_strings_are_kept_once():
    # A replay keeps every step's attributes to the end: the ids, names and keys its spans repeat are
    # one string each, not one per span (the decoder makes a new string at every occurrence).
    spans = [_tool(f"b7ad6b716920333{i}", parentSpanId="a1b2c3d4e5f60718") for i in range(3)]
    read = read_line(json.dumps(_document(spans)).encode(), "t")
    assert read is not None and len(read) == 3
    first, *others = read
    for other in others:
        for index in (2, 3, 5):  # name, trace id, parent span id
            assert other[index] == first[index] and other[index] is first[index]
        for key in (A.GEN_AI_OPERATION_NAME, A.GEN_AI_CONVERSATION_ID, A.GEN_AI_TOOL_NAME):
            assert other[1][key] is first[1][key]
    for key in first[1]:
        assert key is otlp.SHARED_READ_KEYS[key]
    assert first[1] == decode_read_attributes(spans[0]["attributes"])
    shared_keys = [key for key in decode_read_attributes(spans[0]["attributes"]) if key in otlp.READ_KEYS]
    assert shared_keys and all(key is otlp.SHARED_READ_KEYS[key] for key in shared_keys)
