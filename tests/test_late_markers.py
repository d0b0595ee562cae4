"""Spans whose GenAI markers arrive after ``start_span``, and verdicts at a normal exit.

Several agent frameworks (Strands Agents, Google ADK, Microsoft Agent Framework, LlamaIndex
through OpenInference) open their spans with no attributes and set ``gen_ai.operation.name`` or
``openinference.span.kind`` afterwards. Here the spans are made that way with the SDK's own
tracer, as those frameworks make them; ``tests/frameworks/`` runs the frameworks themselves.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import parse_policy

POLICY = parse_policy('[tools.get_status]\neffect = "read"\n[tools.cancel_order]\neffect = "write"\n')


@pytest.fixture
def app() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """A provider as an application sets it up: its exporter first, then ``ag.install()``."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ag.install(tracer_provider=provider, policy=POLICY)
    yield provider, exporter
    provider.shutdown()


def tool_call(tracer, name: str, arguments: dict, result: dict) -> None:
    span = tracer.start_span(f"execute_tool {name}")  # no attributes at start
    span.set_attributes({A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: name,
                         A.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps(arguments),
                         A.GEN_AI_TOOL_CALL_RESULT: json.dumps(result)})
    span.end()


def model_call(tracer, finish: str, tool_calls: int = 0) -> None:
    span = tracer.start_span("chat")
    span.set_attributes({A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_REQUEST_MODEL: "gpt-4o",
                         A.GEN_AI_RESPONSE_FINISH_REASONS: [finish],
                         A.GEN_AI_USAGE_INPUT_TOKENS: 100, A.GEN_AI_USAGE_OUTPUT_TOKENS: 10})
    span.end()


def loop(tracer, times: int = 6) -> None:
    for _ in range(times):
        model_call(tracer, "tool_calls")
        tool_call(tracer, "get_status", {"order_id": "A1"}, {"status": "processing"})
    model_call(tracer, "stop")


def verdicts(exporter: InMemorySpanExporter) -> list[dict]:
    return [dict(span.attributes) for span in exporter.get_finished_spans()
            if (span.attributes or {}).get(A.STOP_REASON) is not None]


def test_steps_marked_after_start_are_judged_when_the_run_ends(app):
    provider, exporter = app
    tracer = provider.get_tracer("a.framework")
    with tracer.start_as_current_span("handle request"):  # the app's own span; no marker anywhere at start
        loop(tracer)
        assert verdicts(exporter) == []  # not before the run is over, final answer included
    (verdict,) = verdicts(exporter)  # when the trace's root ended, not at shutdown
    assert verdict[A.STOP_REASON] == "tool_loop"
    assert verdict[A.STEPS] == 7
    assert verdict[A.TOKENS] == 7 * 110


def test_a_run_that_stops_without_an_answer_is_judged_when_its_trace_ends(app):
    provider, exporter = app
    tracer = provider.get_tracer("a.framework")
    with tracer.start_as_current_span("handle request"):
        for _ in range(3):
            model_call(tracer, "tool_calls")
            tool_call(tracer, "get_status", {"order_id": "A1"}, {"status": "processing"})
    (verdict,) = verdicts(exporter)
    assert (verdict[A.STOP_REASON], verdict[A.STEPS]) == ("tool_loop", 3)


def test_a_late_marked_agent_span_ends_its_run_under_the_name_it_gives(app):
    provider, exporter = app
    tracer = provider.get_tracer("a.framework")
    with tracer.start_as_current_span("invoke_agent") as agent:
        loop(tracer, 3)
        agent.set_attributes({A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.GEN_AI_AGENT_NAME: "support",
                              "gen_ai.conversation.id": "conversation-7"})
    (verdict,) = verdicts(exporter)
    assert (verdict[A.SESSION_ID], verdict[A.STOP_REASON]) == ("conversation-7", "tool_loop")
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "agentguard.verdict"]
    assert span.parent.span_id == agent.get_span_context().span_id  # it hangs off the run's span


def test_late_numbers_follow_the_order_the_steps_ended_in(app):
    provider, exporter = app
    tracer = provider.get_tracer("a.framework")
    with tracer.start_as_current_span("handle request"):
        model_call(tracer, "tool_calls")
        tool_call(tracer, "get_status", {"order_id": "A1"}, {"status": "processing"})
        tool_call(tracer, "cancel_order", {"order_id": "A1"}, {"cancelled": True})
        model_call(tracer, "stop")
    (verdict,) = verdicts(exporter)
    assert (verdict[A.STOP_REASON], verdict[A.STEPS]) == ("completed", 3)


def test_a_named_run_of_late_steps_ends_with_its_root_span(app):
    """The app named the session on its own span; the steps said what they were only at their
    end: the run is judged when that span ends, as a run marked at its start is at its answer."""
    provider, exporter = app
    tracer = provider.get_tracer("a.framework")
    with tracer.start_as_current_span("handle request", attributes={A.SESSION_ID: "turn-1"}):
        loop(tracer)
        assert verdicts(exporter) == []  # a late-marked "stop" may be a turn that calls tools
    (verdict,) = verdicts(exporter)
    assert (verdict[A.SESSION_ID], verdict[A.STOP_REASON]) == ("turn-1", "tool_loop")


def test_pending_verdicts_are_exported_when_the_app_shuts_its_provider_down():
    """A named session that never ended: its verdict is written at shutdown, while the exporter
    added before the guard still exports (the guard runs first)."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ag.install(tracer_provider=provider, policy=POLICY)
    tracer = provider.get_tracer("a.framework")
    with tracer.start_as_current_span("handle request", attributes={A.SESSION_ID: "kept-open"}):
        for _ in range(4):  # marked at their start, no final answer: the session may go on later
            tracer.start_span("chat", attributes={A.GEN_AI_OPERATION_NAME: "chat",
                                                  A.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls"]}).end()
            tracer.start_span("execute_tool get_status", attributes={
                A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "get_status",
                A.GEN_AI_TOOL_CALL_ARGUMENTS: '{"order_id": "A1"}'}).end()
    assert verdicts(exporter) == []
    provider.shutdown()
    (verdict,) = verdicts(exporter)
    assert (verdict[A.SESSION_ID], verdict[A.STOP_REASON]) == ("kept-open", "tool_loop")


def test_tool_calls_without_arguments_are_said_once_in_the_log(app, caplog):
    """Content capture off: no two calls can be told the same, and the log says so, once."""
    provider, exporter = app
    tracer = provider.get_tracer("a.framework")
    with tracer.start_as_current_span("handle request"):
        for _ in range(3):
            model_call(tracer, "tool_calls")
            span = tracer.start_span("execute_tool get_status")
            span.set_attributes({A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "get_status"})
            span.end()
        model_call(tracer, "stop")
    told = [r for r in caplog.records if "without their arguments" in r.getMessage()]
    assert len(told) == 1 and "execute_tool get_status" in told[0].getMessage()
    (verdict,) = verdicts(exporter)
    assert verdict[A.STOP_REASON] == "completed"  # names alone are no loop
