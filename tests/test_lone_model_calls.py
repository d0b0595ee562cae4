"""A model call outside any session gets no verdict span of its own; agent runs keep theirs."""

from __future__ import annotations

import openai
import pytest
from opentelemetry import baggage, context

from otel_agentguard import attributes as A
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.live.processor import VERDICT_SPAN_NAME
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

MESSAGES = [{"role": "user", "content": "Summarise this ticket."}]


@pytest.fixture
def tracing(instrumented_tracing):
    policy = parse_policy("[profiles.default]\nmax_model_calls = 3\n")
    with instrumented_tracing(OpenAIInstrumentor(), policy=policy) as tracing:
        yield tracing


def verdict_spans(tracing: GuardedTracing):
    return [s for s in tracing.spans() if s.name == VERDICT_SPAN_NAME]


def sessions_counted(tracing: GuardedTracing) -> dict[str, int]:
    return {attrs[A.STOP_REASON]: point.value for attrs, point in tracing.metric_points(A.METRIC_SESSIONS)
            if point.value}


def test_a_lone_model_call_has_no_verdict_span_but_is_counted(tracing):
    with ScriptedModelServer(turns(Turn.answer("Customer wants a refund."))) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert [s.name for s in tracing.spans()] == ["chat gpt-4o"]
    assert sessions_counted(tracing) == {"completed": 1}


def test_lone_model_calls_that_never_answer_are_counted_at_shutdown_without_a_span(tracing):
    with ScriptedModelServer(turns(Turn.call("lookup", id=1))) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    tracing.processor.shutdown()
    assert verdict_spans(tracing) == []
    assert sessions_counted(tracing) == {"abandoned": 1}


def test_a_run_with_a_tool_step_keeps_its_verdict_span(tracing):
    with ScriptedModelServer(turns(Turn.answer("The ticket asks about a late parcel."))) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        with tracing.tracer.start_as_current_span("agent"):
            with tracing.tracer.start_as_current_span(
                "execute_tool lookup", attributes={A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
                                                   A.GEN_AI_TOOL_NAME: "lookup"}):
                pass
            client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    (verdict,) = verdict_spans(tracing)
    assert verdict.attributes[A.STOP_REASON] == "completed"
    assert verdict.attributes[A.STEPS] == 2


def test_a_session_id_in_baggage_keeps_the_verdict_span(tracing):
    token = context.attach(baggage.set_baggage(A.SESSION_ID_SEMCONV, "ticket-7"))
    try:
        with ScriptedModelServer(turns(Turn.answer("Customer wants a refund."))) as server:
            client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
            client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    finally:
        context.detach(token)
    (verdict,) = verdict_spans(tracing)
    assert verdict.attributes[A.SESSION_ID] == "ticket-7"


def test_model_calls_that_raise_an_alert_keep_the_verdict_span(tracing):
    with ScriptedModelServer(turns(Turn.call("lookup", id=1))) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        with tracing.tracer.start_as_current_span("batch"):
            for _ in range(4):  # one trace, over max_model_calls = 3
                client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    tracing.processor.shutdown()
    (verdict,) = verdict_spans(tracing)
    assert [e.attributes[A.PROBE] for e in verdict.events] == ["budget_exceeded"]
