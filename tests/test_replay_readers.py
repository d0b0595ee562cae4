"""Replay readers: OTLP JSON lines (hand-built and from real SDK spans), foreign GenAI
instrumentations, an agent's own agent-trace.jsonl event log and JSON trajectory files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from otel_agentguard.exporters import encode_request
from otel_agentguard.judge.policy import Policy, parse_policy
from otel_agentguard.judge.steps import MODEL, TOOL, step_from_attributes, step_kind
from otel_agentguard.replay import InputError, read_files, replay_files
from otel_agentguard.replay.cli import EXAMPLES, run
from otel_agentguard.replay.otlp import OTLPCollector

DATA = Path(__file__).parent / "data"
SEARCH_LOOP_TRACE = DATA / "agent_trace_search_loop.jsonl"  # an agent's event log, default limits
SEARCH_BUDGET_TRACE = DATA / "agent_trace_search_budget.jsonl"  # LOOP_LIMIT=99 BUDGET_USD=0.005
SEARCH_LOOP_SESSION = "581d1f68-545f-42b7-8fea-f991a1dd0146"
SEARCH_FINGERPRINT = "search:8678fea0623ec647"

TRACE_1 = "0af7651916cd43dd8448eb211c80319c"
TRACE_2 = "4bf92f3577b34da6a3ce929d0e0e4736"


# --- building OTLP JSON by hand ---------------------------------------------------------------


def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": _any_value(v)} for k, v in value.items()]}}
    return {"arrayValue": {"values": [_any_value(v) for v in value]}}


def _span(
    span_id: int,
    attrs: dict[str, Any] | None = None,
    *,
    trace_id: str = TRACE_1,
    parent: int | None = None,
    start: int = 0,
    end: int | None = None,
    name: str = "span",
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": f"{span_id:016x}",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end if end is not None else start + 10),
        "attributes": [{"key": k, "value": _any_value(v)} for k, v in (attrs or {}).items()],
    }
    if parent is not None:
        data["parentSpanId"] = f"{parent:016x}"
    if status is not None:
        data["status"] = status
    return data


def _request(*spans: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]},
        "scopeSpans": [{"scope": {"name": "tests"}, "spans": list(spans)}],
    }]}


def _write_lines(path: Path, *requests: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in requests), encoding="utf-8")
    return path


def _agent(session: str, key: str = "agentguard.session.id") -> dict[str, Any]:
    return {"gen_ai.operation.name": "invoke_agent", key: session}


def _tool(name: str, args: Any, result: Any, **extra: Any) -> dict[str, Any]:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.arguments": args if isinstance(args, str) else json.dumps(args),
        "gen_ai.tool.call.result": result if isinstance(result, str) else json.dumps(result),
    }
    attrs.update(extra)
    return attrs


def _sessions(path: Path, policy: Policy) -> dict[str, Any]:
    return {session.session_id: session for session in read_files([path], policy)}


@pytest.fixture
def policy() -> Policy:
    return Policy.builtin()


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    monkeypatch.delenv("OTEL_AGENTGUARD_POLICY", raising=False)
    monkeypatch.delenv("OTEL_AGENTGUARD_PROFILE", raising=False)


# --- sessions and sequence ------------------------------------------------------------------


@pytest.mark.parametrize("children_tagged", [True, False], ids=["tagged-children", "parent-chain"])
@pytest.mark.parametrize("same_trace", [False, True], ids=["two-traces", "one-trace"])
def test_interleaved_sessions_in_one_file_stay_apart(tmp_path, policy, children_tagged, same_trace):
    # Two sessions, each calling the same lookup twice: apart, neither loops (threshold 3);
    # merged, the four identical calls would.
    trace_b = TRACE_1 if same_trace else TRACE_2
    spans_a = [_span(1, _agent("sess-A"), start=0, end=1000)]
    spans_b = [_span(2, _agent("sess-B"), trace_id=trace_b, start=5, end=1000)]
    for i in range(2):
        tag_a = {"agentguard.session.id": "sess-A"} if children_tagged else {}
        tag_b = {"agentguard.session.id": "sess-B"} if children_tagged else {}
        spans_a.append(_span(10 + i, _tool("lookup", {"order": 1}, "stalled", **tag_a), parent=1, start=100 + 20 * i))
        spans_b.append(_span(20 + i, _tool("lookup", {"order": 1}, "stalled", **tag_b), trace_id=trace_b, parent=2,
                             start=110 + 20 * i))
    path = _write_lines(
        tmp_path / "mixed.jsonl",
        _request(spans_a[1], spans_b[1]),
        _request(spans_b[2], spans_a[2]),
        _request(spans_a[0], spans_b[0]),
    )

    judged = {session.session_id: verdict for session, verdict in replay_files([path], policy)}
    assert set(judged) == {"sess-A", "sess-B"}
    for verdict in judged.values():
        assert verdict.steps == 2
        assert verdict.alerts == ()
    sessions = _sessions(path, policy)
    assert [s.sequence for s in sessions["sess-A"].steps] == [1, 2]
    assert [s.start_ns for s in sessions["sess-A"].steps] == [100, 120]
    assert [s.start_ns for s in sessions["sess-B"].steps] == [110, 130]


def test_the_collector_hands_its_spans_over_to_the_sessions_it_makes(policy):
    # A replay of millions of spans frees each session's spans as its steps are built: the
    # collector keeps none of them once it has made the sessions.
    collector = OTLPCollector(policy)
    spans = [_span(1, _agent("sess-A"), start=0, end=1000)]
    spans += [_span(10 + i, _tool("lookup", {"order": i}, "ok"), parent=1, start=100 + 10 * i) for i in range(2)]
    collector.add_document(_request(*spans), "one.jsonl", 1)
    [session] = collector.sessions()
    assert (session.session_id, [step.sequence for step in session.steps]) == ("sess-A", [1, 2])
    assert collector.sessions() == []


def test_merged_sessions_would_loop(tmp_path, policy):
    # The control for the test above: the same four calls in one session do loop.
    spans = [_span(1, _agent("sess-A"), start=0, end=1000)]
    spans += [_span(10 + i, _tool("lookup", {"order": 1}, "stalled"), parent=1, start=100 + 10 * i) for i in range(4)]
    path = _write_lines(tmp_path / "one.jsonl", _request(*spans))
    [(session, verdict)] = replay_files([path], policy)
    assert session.session_id == "sess-A"
    assert [a.probe for a in verdict.alerts][:1] == ["tool_loop"]


@pytest.mark.parametrize("key", ["agentguard.session.id", "gen_ai.conversation.id", "session.id"])
def test_tool_span_without_session_takes_its_parent_chains_session(tmp_path, policy, key):
    root = _span(1, {key: "sess-P", "gen_ai.operation.name": "invoke_agent"}, start=0, end=900)
    middle = _span(2, {}, parent=1, start=10, end=800, name="agent turn")  # no session, not a step
    tool = _span(3, _tool("lookup", {"q": 1}, "x"), parent=2, start=20)
    model = _span(4, {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 5}, parent=1, start=30)
    # Children are written before their parents, as exporters do.
    path = _write_lines(tmp_path / "chain.jsonl", _request(tool, model), _request(middle), _request(root))

    sessions = _sessions(path, policy)
    assert list(sessions) == ["sess-P"]
    assert [(s.kind, s.name) for s in sessions["sess-P"].steps] == [(TOOL, "lookup"), (MODEL, "")]


def test_session_span_and_its_children_pooled_across_two_files(tmp_path, policy):
    first = _write_lines(tmp_path / "a.jsonl", _request(_span(1, _agent("sess-X"), start=0, end=500)))
    second = _write_lines(tmp_path / "b.jsonl", _request(_span(2, _tool("t", {}, 1), parent=1, start=10)))
    sessions = {s.session_id: s for s in read_files([first, second], policy)}
    assert list(sessions) == ["sess-X"]
    assert len(sessions["sess-X"].steps) == 1


def test_spans_without_any_session_fall_back_to_their_trace_id(tmp_path, policy):
    path = _write_lines(
        tmp_path / "traces.jsonl",
        _request(
            _span(1, _tool("a", {}, 1), trace_id=TRACE_1, start=10),
            _span(2, _tool("b", {}, 1), trace_id=TRACE_2, start=20),
            _span(3, _tool("c", {}, 1), trace_id=TRACE_1, start=30),
        ),
    )
    sessions = _sessions(path, policy)
    assert set(sessions) == {TRACE_1, TRACE_2}
    assert [s.name for s in sessions[TRACE_1].steps] == ["a", "c"]
    assert [s.name for s in sessions[TRACE_2].steps] == ["b"]


def test_own_session_attribute_beats_parent_chain(tmp_path, policy):
    path = _write_lines(
        tmp_path / "own.jsonl",
        _request(
            _span(1, _agent("outer"), start=0, end=100),
            _span(2, _tool("t", {}, 1, **{"session.id": "inner"}), parent=1, start=10),
        ),
    )
    assert set(_sessions(path, policy)) == {"outer", "inner"}
    assert len(_sessions(path, policy)["inner"].steps) == 1


def test_sequence_comes_from_agentguard_sequence(tmp_path, policy):
    # Start times say c, b, a; the recorded sequence says a, b, c.
    spans = [
        _span(1, _tool("a", {}, 1, **{"agentguard.sequence": 1}), start=300),
        _span(2, _tool("b", {}, 1, **{"agentguard.sequence": 2}), start=200),
        _span(3, _tool("c", {}, 1, **{"agentguard.sequence": 5}), start=100),
    ]
    path = _write_lines(tmp_path / "seq.jsonl", _request(*spans))
    [session] = read_files([path], policy)
    assert [(s.name, s.sequence) for s in session.steps] == [("a", 1), ("b", 2), ("c", 5)]


def test_sequence_falls_back_to_start_time_order_one_based(tmp_path, policy):
    # Written in end order (as exporters write); a starts first but ends last.
    spans = [
        _span(2, _tool("b", {}, 1), start=200, end=300),
        _span(3, _tool("c", {}, 1), start=400, end=450),
        _span(1, _tool("a", {}, 1), start=100, end=900),
    ]
    path = _write_lines(tmp_path / "order.jsonl", _request(*spans))
    [session] = read_files([path], policy)
    assert [(s.name, s.sequence) for s in session.steps] == [("a", 1), ("b", 2), ("c", 3)]


def test_verdict_span_is_not_read_as_input(tmp_path, policy):
    verdict = _span(9, {"agentguard.verdict": True, "gen_ai.operation.name": "execute_tool"}, start=5)
    path = _write_lines(tmp_path / "v.jsonl", _request(verdict, _span(1, _tool("t", {}, 1), start=10)))
    [session] = read_files([path], policy)
    assert [s.name for s in session.steps] == ["t"]


# --- foreign spans: official GenAI semantic conventions ---------------------------------------


def test_official_genai_tool_span_fingerprints_its_arguments_and_result(tmp_path, policy):
    attrs = _tool("get_order", '{"order": "A1", "verbose": true}', '{"state": "paid"}')
    path = _write_lines(tmp_path / "t.jsonl", _request(_span(1, attrs, name="execute_tool get_order")))
    [session] = read_files([path], policy)
    [step] = session.steps
    fingerprinter = policy.fingerprinter("get_order")
    assert step.kind == TOOL and step.name == "get_order"
    assert step.args_fingerprint == fingerprinter.arguments({"order": "A1", "verbose": True}).fingerprint
    assert step.result_fingerprint == fingerprinter.result({"state": "paid"})
    assert step.failed is False and step.empty is False


def test_argument_key_order_in_the_json_string_does_not_matter(policy):
    one = step_from_attributes(_tool("t", '{"a": 1, "b": [1, 2]}', "r"), kind=TOOL, session_id="s", sequence=1,
                               policy=policy)
    two = step_from_attributes(_tool("t", '{"b": [1, 2], "a": 1}', "r"), kind=TOOL, session_id="s", sequence=2,
                               policy=policy)
    three = step_from_attributes(_tool("t", '{"b": [2, 1], "a": 1}', "r"), kind=TOOL, session_id="s", sequence=3,
                                 policy=policy)
    assert one.args_fingerprint == two.args_fingerprint
    assert one.args_fingerprint != three.args_fingerprint


def test_arguments_as_otlp_mapping_equal_the_same_arguments_as_json_string(tmp_path, policy):
    as_mapping = _tool("t", "{}", "r")
    as_mapping["gen_ai.tool.call.arguments"] = {"b": 1, "a": "x"}  # a kvlistValue
    as_string = _tool("t", '{"a": "x", "b": 1}', "r")
    path = _write_lines(tmp_path / "map.jsonl", _request(_span(1, as_mapping, start=1), _span(2, as_string, start=2)))
    [session] = read_files([path], policy)
    first, second = session.steps
    assert first.args_fingerprint == second.args_fingerprint
    assert first.args_fingerprint == policy.fingerprinter("t").arguments({"a": "x", "b": 1}).fingerprint


def test_recorded_fingerprints_win_over_computed_ones(policy):
    attrs = _tool("t", {"a": 1}, "r", **{"agentguard.tool.args.fingerprint": "abc123",
                                           "agentguard.tool.result.fingerprint": "def456"})
    step = step_from_attributes(attrs, kind=TOOL, session_id="s", sequence=1, policy=policy)
    assert (step.args_fingerprint, step.result_fingerprint) == ("abc123", "def456")


def test_same_span_exported_twice_is_one_step(tmp_path, policy):
    # At-least-once delivery (or the same file given twice) repeats spans; a span is
    # identified by its trace and span id, so a repeat must not invent a tool loop.
    request = _request(*(_span(i, _tool("t", {"x": 1}, "r"), start=10 * i) for i in (1, 2)))
    path = _write_lines(tmp_path / "dup.jsonl", request, request)
    [(session, verdict)] = replay_files([path], policy)
    assert len(session.steps) == 2
    assert verdict.alerts == ()


def test_tool_name_from_span_name_when_attribute_missing(policy):
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.call.arguments": "{}"}
    step = step_from_attributes(attrs, kind=TOOL, session_id="s", sequence=1, policy=policy,
                                span_name="execute_tool refund")
    assert step.name == "refund"


CLAIM_MESSAGES = json.dumps([{
    "role": "assistant",
    "parts": [{"type": "text", "content": "Done. Your refund has been submitted."}],
    "finish_reason": "stop",
}])
STATE_MESSAGES = json.dumps([{
    "role": "assistant",
    "parts": [{"type": "text", "content": "Your order is in transit."}],
    "finish_reason": "stop",
}])


def _chat(messages: str, finish: tuple[str, ...] = ("stop",)) -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.usage.output_tokens": 20,
        "gen_ai.response.finish_reasons": list(finish),
        "gen_ai.output.messages": messages,
    }


def test_official_genai_chat_span_with_claim_is_a_final_answer(tmp_path, policy):
    path = _write_lines(tmp_path / "chat.jsonl", _request(_span(1, _chat(CLAIM_MESSAGES))))
    [session] = read_files([path], policy)
    [step] = session.steps
    assert step.kind == MODEL
    assert step.final is True
    assert step.claims == ("write",)
    assert (step.input_tokens, step.output_tokens, step.tokens) == (100, 20, 120)
    assert step.model == "gpt-4o"


def test_official_genai_chat_span_stating_state_has_no_claim(policy):
    step = step_from_attributes(_chat(STATE_MESSAGES), kind=MODEL, session_id="s", sequence=1, policy=policy)
    assert step.final is True
    assert step.claims == ()


def test_end_turn_finish_reason_is_a_final_answer(policy):
    step = step_from_attributes(_chat(STATE_MESSAGES, finish=("end_turn",)), kind=MODEL, session_id="s",
                                sequence=1, policy=policy)
    assert step.final is True


def test_recorded_final_claims_win_over_the_answer_text(policy):
    attrs = _chat(STATE_MESSAGES)
    attrs["agentguard.final.claims"] = ["write"]
    step = step_from_attributes(attrs, kind=MODEL, session_id="s", sequence=1, policy=policy)
    assert step.claims == ("write",)


def test_chat_span_asking_for_tools_is_not_a_final_answer(policy):
    step = step_from_attributes(_chat(CLAIM_MESSAGES, finish=("tool_calls",)), kind=MODEL, session_id="s",
                                sequence=1, policy=policy)
    assert step.final is False
    assert step.claims == ()


def test_foreign_session_claiming_a_write_without_one_is_fake_completion(tmp_path, example_policy):
    spans = [
        _span(1, _tool("get_order", {"order": "A1"}, "paid"), start=10),
        _span(2, _chat(CLAIM_MESSAGES), start=20),
    ]
    path = _write_lines(tmp_path / "fake.jsonl", _request(*spans))
    [(_, verdict)] = replay_files([path], example_policy)
    assert verdict.stop_reason == "fake_completion"
    assert [(a.probe, a.evidence) for a in verdict.alerts] == [("fake_completion", (2,))]


def test_foreign_session_with_a_real_write_completes(tmp_path, example_policy):
    # `refund` is a write tool in the example policy's contracts.
    spans = [
        _span(1, _tool("refund", {"order": "A1"}, "refunded"), start=10),
        _span(2, _chat(CLAIM_MESSAGES), start=20),
    ]
    path = _write_lines(tmp_path / "real.jsonl", _request(*spans))
    [(_, verdict)] = replay_files([path], example_policy)
    assert verdict.stop_reason == "completed"
    assert verdict.alerts == ()
    assert verdict.tokens == 120


# --- foreign spans: OpenLLMetry and OpenInference --------------------------------------------


def test_openllmetry_tool_span(tmp_path, policy):
    args = {"args": [], "kwargs": {"order": "A1"}}
    attrs = {
        "traceloop.span.kind": "tool",
        "traceloop.entity.name": "lookup_order",
        "traceloop.entity.input": json.dumps(args),
        "traceloop.entity.output": json.dumps({"state": "paid"}),
    }
    path = _write_lines(tmp_path / "ollm.jsonl", _request(_span(1, attrs, name="lookup_order.tool")))
    [session] = read_files([path], policy)
    [step] = session.steps
    fingerprinter = policy.fingerprinter("lookup_order")
    assert (step.kind, step.name) == (TOOL, "lookup_order")
    assert step.args_fingerprint == fingerprinter.arguments(args).fingerprint
    assert step.result_fingerprint == fingerprinter.result({"state": "paid"})


def test_openllmetry_chat_span_is_a_final_answer_with_claims(tmp_path, policy):
    attrs = {
        "llm.request.type": "chat",
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.prompt_tokens": 50,
        "gen_ai.usage.completion_tokens": 7,
        "gen_ai.completion.0.finish_reason": "stop",
        "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.content": "I have cancelled your booking.",
    }
    path = _write_lines(tmp_path / "ollm_chat.jsonl", _request(_span(1, attrs, name="openai.chat")))
    [session] = read_files([path], policy)
    [step] = session.steps
    assert step.kind == MODEL
    assert (step.input_tokens, step.output_tokens) == (50, 7)
    assert step.final is True
    assert step.claims == ("write",)


def test_openinference_tool_and_llm_spans(tmp_path, policy):
    tool = {
        "openinference.span.kind": "TOOL",
        "tool.name": "get_weather",
        "input.value": json.dumps({"city": "Paris"}),
        "output.value": json.dumps({"temp": 21}),
        "session.id": "oi-session",
    }
    llm = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "gpt-4o",
        "llm.token_count.prompt": 30,
        "llm.token_count.completion": 12,
        "session.id": "oi-session",
    }
    path = _write_lines(tmp_path / "oi.jsonl", _request(_span(1, tool, start=10), _span(2, llm, start=20)))
    sessions = _sessions(path, policy)
    assert list(sessions) == ["oi-session"]
    tool_step, llm_step = sessions["oi-session"].steps
    fingerprinter = policy.fingerprinter("get_weather")
    assert (tool_step.kind, tool_step.name) == (TOOL, "get_weather")
    assert tool_step.args_fingerprint == fingerprinter.arguments({"city": "Paris"}).fingerprint
    assert tool_step.result_fingerprint == fingerprinter.result({"temp": 21})
    assert llm_step.kind == MODEL
    assert llm_step.model == "gpt-4o"
    assert (llm_step.input_tokens, llm_step.output_tokens) == (30, 12)


@pytest.mark.parametrize(
    ("attrs", "kind"),
    [
        ({"gen_ai.operation.name": "execute_tool"}, TOOL),
        ({"gen_ai.operation.name": "chat"}, MODEL),
        ({"gen_ai.operation.name": "text_completion"}, MODEL),
        ({"gen_ai.operation.name": "generate_content"}, MODEL),
        ({"gen_ai.operation.name": "invoke_agent"}, None),
        ({"gen_ai.operation.name": "embeddings"}, None),
        ({"traceloop.span.kind": "tool"}, TOOL),
        ({"traceloop.span.kind": "workflow"}, None),
        ({"llm.request.type": "chat"}, MODEL),
        ({"openinference.span.kind": "TOOL"}, TOOL),
        ({"openinference.span.kind": "LLM"}, MODEL),
        ({"openinference.span.kind": "CHAIN"}, None),
        ({"http.method": "GET"}, None),
    ],
)
def test_step_kind(attrs, kind):
    assert step_kind(attrs) == kind


# --- payload edge cases -------------------------------------------------------------------------


def test_invalid_json_arguments_are_fingerprinted_as_text(tmp_path, policy):
    spans = [
        _span(1, _tool("search", '{"q": "refund"', "r"), start=10),  # truncated JSON
        _span(2, _tool("search", '{"q": "refund"', "r"), start=20),
        _span(3, _tool("search", '{"q": "refunds"', "r"), start=30),
    ]
    path = _write_lines(tmp_path / "badargs.jsonl", _request(*spans))
    [session] = read_files([path], policy)
    first, second, third = session.steps
    assert first.args_fingerprint == policy.fingerprinter("search").arguments('{"q": "refund"').fingerprint
    assert first.args_fingerprint == second.args_fingerprint
    assert first.args_fingerprint != third.args_fingerprint
    assert not first.failed


@pytest.mark.parametrize(
    ("status", "extra", "failed"),
    [
        ({"code": 2, "message": "boom"}, {}, True),
        ({"code": "STATUS_CODE_ERROR"}, {}, True),
        (None, {"error.type": "TimeoutError"}, True),
        ({"code": 1}, {}, False),
        ({"code": 0}, {}, False),
        (None, {}, False),
    ],
    ids=["status-2", "status-name", "error-type", "ok", "unset", "no-status"],
)
def test_error_status_or_error_type_marks_a_tool_step_failed(tmp_path, policy, status, extra, failed):
    span = _span(1, _tool("t", {"x": 1}, "r", **extra), status=status)
    path = _write_lines(tmp_path / "err.jsonl", _request(span))
    [session] = read_files([path], policy)
    assert session.steps[0].failed is failed


def _official_tool(i: int, result: str = "stalled") -> dict[str, Any]:
    return _tool("query_logistics", {"order": "A1001"}, result)


def _openllmetry_tool(i: int, result: str = "stalled") -> dict[str, Any]:
    return {"traceloop.span.kind": "tool", "traceloop.entity.name": "query_logistics",
            "traceloop.entity.input": json.dumps({"order": "A1001"}), "traceloop.entity.output": result}


def _openinference_tool(i: int, result: str = "stalled") -> dict[str, Any]:
    return {"openinference.span.kind": "TOOL", "tool.name": "query_logistics",
            "input.value": json.dumps({"order": "A1001"}), "output.value": result}


FLAVOURS = [_official_tool, _openllmetry_tool, _openinference_tool]


@pytest.mark.parametrize("flavour", FLAVOURS, ids=["official", "openllmetry", "openinference"])
def test_repeated_identical_foreign_tool_spans_raise_tool_loop(tmp_path, policy, flavour):
    spans = [_span(10 + i, flavour(i), start=100 * (i + 1)) for i in range(3)]
    path = _write_lines(tmp_path / "loop.jsonl", _request(*reversed(spans)))
    [(session, verdict)] = replay_files([path], policy)
    assert session.session_id == TRACE_1
    assert verdict.stop_reason == "tool_loop"
    assert [(a.probe, a.evidence) for a in verdict.alerts] == [("tool_loop", (1, 2, 3))]


@pytest.mark.parametrize("flavour", FLAVOURS, ids=["official", "openllmetry", "openinference"])
def test_foreign_poll_with_changing_result_is_not_a_loop(tmp_path, policy, flavour):
    spans = [_span(10 + i, flavour(i, result=f"state-{i}"), start=100 * (i + 1)) for i in range(3)]
    path = _write_lines(tmp_path / "poll.jsonl", _request(*spans))
    [(_, verdict)] = replay_files([path], policy)
    assert [a.probe for a in verdict.alerts if a.probe == "tool_loop"] == []


# --- real SDK spans through exporters.encode_request -------------------------------------------


def test_sdk_spans_encoded_as_otlp_json_replay_per_session(tmp_path, tracer_provider, span_exporter, policy):
    tracer = tracer_provider.get_tracer("agent-under-test")
    root_a = tracer.start_span("invoke_agent A", attributes=_agent("conv-A", "gen_ai.conversation.id"))
    root_b = tracer.start_span("invoke_agent B", attributes=_agent("conv-B", "gen_ai.conversation.id"))
    ctx_a = trace.set_span_in_context(root_a)
    ctx_b = trace.set_span_in_context(root_b)
    for i in range(3):  # the two sessions alternate, span by span
        with tracer.start_as_current_span("execute_tool lookup", context=ctx_a,
                                          attributes=_tool("lookup", {"order": "A1"}, "stalled")):
            pass
        with tracer.start_as_current_span("execute_tool search", context=ctx_b,
                                          attributes=_tool("search", {"q": f"query {i}"}, f"hits {i}")) as span:
            if i == 1:
                span.set_status(Status(StatusCode.ERROR, "backend down"))
    with tracer.start_as_current_span("chat gpt-4o", context=ctx_a, attributes=_chat(STATE_MESSAGES)):
        pass
    root_b.end()
    root_a.end()

    finished = span_exporter.get_finished_spans()
    assert len(finished) == 9
    path = tmp_path / "sdk.jsonl"
    # One export request per span, in end order: children before their session spans.
    path.write_text("".join(json.dumps(encode_request([s])) + "\n" for s in finished), encoding="utf-8")

    judged = {session.session_id: (session, verdict) for session, verdict in replay_files([path], policy)}
    assert set(judged) == {"conv-A", "conv-B"}
    session_a, verdict_a = judged["conv-A"]
    session_b, verdict_b = judged["conv-B"]
    assert [s.name for s in session_a.steps] == ["lookup", "lookup", "lookup", "gpt-4o"]
    assert [s.sequence for s in session_a.steps] == [1, 2, 3, 4]
    assert [(a.probe, a.evidence) for a in verdict_a.alerts] == [("tool_loop", (1, 2, 3))]
    assert verdict_a.tokens == 120
    assert [s.name for s in session_b.steps] == ["search"] * 3
    assert [s.failed for s in session_b.steps] == [False, True, False]
    assert len({s.args_fingerprint for s in session_b.steps}) == 3
    assert verdict_b.alerts == ()


def test_sdk_batch_in_one_request_equals_one_request_per_span(tmp_path, tracer_provider, span_exporter, policy):
    tracer = tracer_provider.get_tracer("agent-under-test")
    with tracer.start_as_current_span("invoke_agent", attributes=_agent("sess-1")):
        for _ in range(3):
            with tracer.start_as_current_span("execute_tool t", attributes=_tool("t", {"x": 1}, "same")):
                pass
    finished = span_exporter.get_finished_spans()
    batch = _write_lines(tmp_path / "batch.jsonl", encode_request(finished))
    single = tmp_path / "single.jsonl"
    single.write_text("".join(json.dumps(encode_request([s])) + "\n" for s in finished), encoding="utf-8")

    def summary(path: Path) -> list[tuple[str, str, tuple]]:
        return [(s.session_id, v.stop_reason, tuple((a.probe, a.evidence) for a in v.alerts))
                for s, v in replay_files([path], policy)]

    assert summary(batch) == summary(single) == [("sess-1", "tool_loop", (("tool_loop", (1, 2, 3)),))]


# --- an agent's own agent-trace.jsonl event log ---------------------------------------------------------------


def test_agent_trace_planned_calls_become_tool_steps(policy):
    [session] = read_files([SEARCH_LOOP_TRACE], policy)
    assert session.session_id == SEARCH_LOOP_SESSION
    assert [(s.kind, s.name, s.sequence) for s in session.steps] == [(TOOL, "search", n) for n in (2, 4, 6)]
    assert {s.args_fingerprint for s in session.steps} == {SEARCH_FINGERPRINT}
    assert all(s.result_fingerprint is None for s in session.steps)  # the log keeps no results
    assert [s.cost_usd for s in session.steps] == pytest.approx([0.002, 0.002, 0.002])


def test_agent_trace_three_identical_planned_calls_raise_tool_loop(policy):
    [(_, verdict)] = replay_files([SEARCH_LOOP_TRACE], policy)
    assert verdict.stop_reason == "tool_loop"
    assert [(a.probe, a.evidence) for a in verdict.alerts] == [("tool_loop", (2, 4, 6))]
    assert verdict.cost_usd == pytest.approx(0.006)


def test_agent_trace_two_identical_planned_calls_do_not_loop(tmp_path, policy):
    # Only the first five events: two planned calls, two completions.
    lines = SEARCH_LOOP_TRACE.read_text(encoding="utf-8").splitlines(keepends=True)[:5]
    path = tmp_path / "agent-trace.jsonl"
    path.write_text("".join(lines), encoding="utf-8")
    [(session, verdict)] = replay_files([path], policy)
    assert len(session.steps) == 2
    assert verdict.alerts == ()


def test_agent_trace_projected_spend_drives_the_cost_budget():
    policy = parse_policy("[profiles.default]\nmax_cost_usd = 0.005\nrepeat_threshold = 5\n", source="p.toml")
    [(_, verdict)] = replay_files([SEARCH_BUDGET_TRACE], policy)
    assert verdict.stop_reason == "budget_exceeded"
    [alert] = verdict.alerts
    assert (alert.probe, alert.budget_kind, alert.sequence) == ("budget_exceeded", "cost", 6)


def test_agent_trace_sessions_interleaved_in_one_file_stay_apart(tmp_path, policy):
    one = SEARCH_LOOP_TRACE.read_text(encoding="utf-8").splitlines(keepends=True)
    two = SEARCH_BUDGET_TRACE.read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / "agent-trace.jsonl"
    path.write_text("".join(a + b for a, b in zip(one, two, strict=False)), encoding="utf-8")
    sessions = _sessions(path, policy)
    assert len(sessions) == 2
    assert [len(s.steps) for s in sessions.values()] == [3, 3]
    assert all([step.sequence for step in s.steps] == [2, 4, 6] for s in sessions.values())


# --- JSON trajectory files ----------------------------------------------------------------------


def _support_sessions_as_json(tmp_path: Path, indent: int | None) -> Path:
    document = yaml.safe_load((EXAMPLES / "support_sessions.yaml").read_text(encoding="utf-8"))
    document["policy"] = os.path.relpath(EXAMPLES / "policy.toml", tmp_path)  # relative to the file
    path = tmp_path / "support_sessions.json"
    path.write_text(json.dumps(document, ensure_ascii=False, indent=indent) + "\n", encoding="utf-8")
    return path


def _verdict_summary(paths: list[Path], policy: Policy) -> list[tuple]:
    return [
        (v.session_id, v.stop_reason, v.profile, v.steps, v.tokens, [(a.probe, a.evidence) for a in v.alerts],
         v.labels)
        for _, v in replay_files(paths, policy)
    ]


@pytest.mark.parametrize("indent", [2, None], ids=["pretty-printed", "one-line"])
def test_json_trajectory_reads_like_the_yaml_one(tmp_path, example_policy, indent):
    path = _support_sessions_as_json(tmp_path, indent)
    if indent:
        assert path.read_text(encoding="utf-8").count("\n") > 50
    from_json = _verdict_summary([path], example_policy)
    from_yaml = _verdict_summary([EXAMPLES / "support_sessions.yaml"], example_policy)
    assert from_json == from_yaml
    assert [row[1] for row in from_json] == ["fake_completion", "fake_completion", "completed", "completed"]


def test_pretty_json_trajectory_through_the_cli_uses_its_named_policy(tmp_path, capsys):
    path = _support_sessions_as_json(tmp_path, 2)
    assert run(["replay", str(path), "--format", "json"]) == 0
    sessions = {s["session_id"]: s for s in json.loads(capsys.readouterr().out)["sessions"]}
    assert sessions["D"]["profile"] == "long_chain"  # from the policy's task_types
    assert sessions["A"]["alerts"][0]["evidence_ids"] == ["s03", "s04", "s05"]


def test_pretty_json_trajectory_syntax_error_names_its_line(tmp_path, policy):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "steps": [\n    {"tool": "t", "args": {}},\n    {"tool": "t",, "args": {}}\n  ]\n}\n',
                    encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_files([path], policy)
    assert info.value.line == 4
    assert str(info.value).startswith(f"{path}:4: ")


def test_single_session_trajectory_with_only_steps(tmp_path, policy):
    path = tmp_path / "one.yaml"
    path.write_text(
        "steps:\n"
        "  - {tool: t, args: {x: 1}, result: r}\n"
        "  - {tool: t, args: {x: '1'}, result: r}\n"
        "  - {tool: t, args: {x: 1, request_id: q}, result: r}\n"
        "  - {answer: The parcel is on its way.}\n",
        encoding="utf-8",
    )
    [(session, verdict)] = replay_files([path], policy)
    assert [s.sequence for s in session.steps] == [1, 2, 3, 4]
    assert [(a.probe, a.evidence) for a in verdict.alerts] == [("tool_loop", (1, 2, 3))]
