"""DerivedTools on its own: calls wait for a tool span or the next model call, one step per call.

The shapes of real instrumentations are tested in tests/foreign (recorded by the real
packages); these tests pin the bookkeeping: who answers a call, what a released
step knows, and what a session end does with calls still waiting.
"""

from __future__ import annotations

import json
from itertools import count

from otel_agentguard import attributes as A
from otel_agentguard.judge.derived import DerivedTools
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.steps import MODEL, TOOL
from otel_agentguard.judge.tool_calls import REQUESTED_CALL_ATTRIBUTES, records_requested_calls, requested_calls


def _asks(*calls: tuple[str, str, dict]) -> dict:
    parts = [{"type": "tool_call", "id": call_id, "name": name, "arguments": args} for call_id, name, args in calls]
    return {A.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": parts}])}


def _answers(*responses: tuple[str, object]) -> dict:
    parts = [{"type": "tool_call_response", "id": call_id, "response": result} for call_id, result in responses]
    return {A.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "tool", "parts": parts}])}


def _model_end(derived: DerivedTools, attrs: dict, numbers, start_ns: int = 0, end_ns: int = 0):
    return derived.on_step(MODEL, attrs, span_name="chat", start_ns=start_ns, end_ns=end_ns,
                           next_sequence=lambda: next(numbers))


def test_calls_become_steps_when_the_next_model_call_ends_with_their_results():
    derived, numbers = DerivedTools("s", Policy()), count(2)
    assert _model_end(derived, _asks(("c1", "get_status", {"order_id": "A1"}), ("c2", "lookup", {"q": "x"})),
                      numbers, end_ns=10) == ([], [])

    steps, unused = _model_end(derived, _answers(("c1", '{"status": "late"}'), ("c2", "")), numbers, start_ns=20)

    assert unused == []
    assert [(s.kind, s.name, s.sequence, s.start_ns, s.end_ns) for s in steps] == [
        (TOOL, "get_status", 2, 10, 20), (TOOL, "lookup", 3, 10, 20)]
    assert all(s.args_fingerprint and s.result_fingerprint for s in steps)
    assert [s.empty for s in steps] == [False, True]
    assert not derived


def test_a_tool_span_answers_its_call_by_id_else_by_name():
    derived, numbers = DerivedTools("s", Policy()), count(2)
    _model_end(derived, _asks(("c1", "get_status", {"order_id": "A1"}), ("c2", "get_status", {"order_id": "B2"}),
                              ("c3", "lookup", {"q": "x"})), numbers)

    by_id = derived.on_step(TOOL, {A.GEN_AI_TOOL_NAME: "get_status", A.GEN_AI_TOOL_CALL_ID: "c2"}, span_name="",
                            start_ns=0, end_ns=0, next_sequence=lambda: next(numbers))
    by_name = derived.on_step(TOOL, {}, span_name="execute_tool lookup", start_ns=0, end_ns=0,
                              next_sequence=lambda: next(numbers))
    steps, _ = _model_end(derived, {}, numbers)

    assert by_id == ([], [3]) and by_name == ([], [4])  # the reserved numbers no step will fill
    assert [(s.name, s.sequence) for s in steps] == [("get_status", 2)]


def test_calls_still_waiting_when_the_session_ends_have_no_known_result():
    derived, numbers = DerivedTools("s", Policy()), count(5)
    _model_end(derived, _asks(("c1", "get_status", {"order_id": "A1"})), numbers, end_ns=7)

    (step,) = derived.flush()

    assert (step.sequence, step.end_ns, step.result_fingerprint, step.empty) == (5, 7, None, None)
    assert step.args_fingerprint is not None
    assert derived.flush() == []


def test_an_error_response_makes_a_failed_step():
    derived, numbers = DerivedTools("s", Policy()), count(1)
    _model_end(derived, _asks(("c1", "get_status", {"order_id": "A1"})), numbers)
    error = {A.GEN_AI_INPUT_MESSAGES: json.dumps([{"role": "user", "parts": [
        {"type": "tool_call_response", "id": "c1", "response": "no such order", "is_error": True}]}])}

    (step,) = _model_end(derived, error, numbers)[0]

    assert step.failed


def test_a_model_span_without_recorded_messages_asks_for_nothing():
    derived, numbers = DerivedTools("s", Policy()), count(1)
    _model_end(derived, {A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",)}, numbers)
    assert not derived and derived.flush() == []


def test_every_shape_that_records_requested_calls_is_seen_by_the_cheap_test():
    # The live processor skips the derivation when records_requested_calls says a span has none.
    shapes = [
        _asks(("c1", "lookup", {"order": "A1"})),
        {"llm.output_messages.0.message.role": "assistant",
         "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup"},
        {"llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup"},
        {"gen_ai.completion.0.tool_calls.0.name": "lookup", "gen_ai.completion.0.tool_calls.0.id": "c1"},
    ]
    for attrs in shapes:
        assert records_requested_calls(attrs), attrs
        assert [call.name for call in requested_calls(attrs)] == ["lookup"], attrs
    bare = {A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",), A.RESPONSE_TOOL_CALLS: 2}
    assert not records_requested_calls(bare) and requested_calls(bare) == []
    # The compiled end tests the same attributes, as the tuple names them.
    for key in REQUESTED_CALL_ATTRIBUTES:
        assert records_requested_calls({**bare, key: "x"}), key
    assert all(any(key in shape for key in REQUESTED_CALL_ATTRIBUTES) for shape in shapes)
