"""The OpenAI instrumentor with the real ``openai`` SDK against the scripted model server."""

from __future__ import annotations

import asyncio
import gc
import json

import openai
import pytest
import wrapt
from opentelemetry import context
from opentelemetry.trace import StatusCode

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.exporters import encode_request
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

POLICY = parse_policy('[tools.refund]\neffect = "write"\n')
MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]


@pytest.fixture
def tracing(instrumented_tracing):
    with instrumented_tracing(OpenAIInstrumentor(), policy=POLICY) as tracing:
        yield tracing


def model_spans(tracing: GuardedTracing):
    return [s for s in tracing.spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == "chat"]


def client(server: ScriptedModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)


def async_client(server: ScriptedModelServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)


TOOL_TURN = Turn.calls(("get_order", {"order": "A1"}), ("query_logistics", {"order": "A1"}),
                       input_tokens=200, output_tokens=20)
CLAIM = Turn.answer("Your refund has been submitted.", input_tokens=300, output_tokens=12)


def assert_tool_then_final(spans):
    tool_span, final_span = spans
    assert tool_span.name == "chat gpt-4o"
    assert tool_span.attributes[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert tool_span.attributes[A.GEN_AI_REQUEST_MODEL] == "gpt-4o"
    assert tool_span.attributes[A.RESPONSE_TOOL_CALLS] == 2
    assert tuple(tool_span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("tool_calls",)
    assert A.FINAL_CLAIMS not in tool_span.attributes
    assert final_span.attributes[A.RESPONSE_TOOL_CALLS] == 0
    assert tuple(final_span.attributes[A.FINAL_CLAIMS]) == ("write",)
    assert tuple(final_span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)


def test_chat_completions_sync(tracing):
    with ScriptedModelServer(turns(TOOL_TURN, CLAIM)) as server:
        openai_client = client(server)
        first = openai_client.chat.completions.create(model="gpt-4o", messages=MESSAGES, temperature=0.2)
        second = openai_client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert [c.function.name for c in first.choices[0].message.tool_calls] == ["get_order", "query_logistics"]
    assert second.choices[0].message.content == "Your refund has been submitted."
    spans = model_spans(tracing)
    assert_tool_then_final(spans)
    assert spans[0].attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 200
    assert spans[0].attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 20
    assert spans[0].attributes["gen_ai.request.temperature"] == 0.2


def test_chat_completions_async(tracing):
    async def run():
        async_openai = async_client(server)
        await async_openai.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        await async_openai.chat.completions.create(model="gpt-4o", messages=MESSAGES)

    with ScriptedModelServer(turns(TOOL_TURN, CLAIM)) as server:
        asyncio.run(run())
    assert_tool_then_final(model_spans(tracing))


def test_chat_completions_streaming_sync_and_async(tracing):
    async def run_async():
        stream = await async_client(server).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
        return [chunk async for chunk in stream]

    with ScriptedModelServer(turns(TOOL_TURN, CLAIM)) as server:
        stream = client(server).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True})
        chunks = list(stream)
        async_chunks = asyncio.run(run_async())
    assert any(c.choices and c.choices[0].delta.tool_calls for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in async_chunks if c.choices) == CLAIM.text
    spans = model_spans(tracing)
    assert_tool_then_final(spans)
    assert spans[1].attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 12


def test_stream_helper_and_raw_response(tracing):
    with ScriptedModelServer(turns(TOOL_TURN, CLAIM)) as server:
        openai_client = client(server)
        with openai_client.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream:
            events = list(stream)
        raw = openai_client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
        assert raw.parse().choices[0].message.content == CLAIM.text
    assert events
    assert_tool_then_final(model_spans(tracing))


def test_responses_api_sync_async_and_streaming(tracing):
    async def run_async():
        return await async_client(server).responses.create(model="gpt-4o", input="hi")

    with ScriptedModelServer(turns(TOOL_TURN, CLAIM, TOOL_TURN, CLAIM)) as server:
        openai_client = client(server)
        openai_client.responses.create(model="gpt-4o", input="hi", max_output_tokens=50)
        final = asyncio.run(run_async())
        with openai_client.responses.stream(model="gpt-4o", input="hi") as stream:
            for _ in stream:
                pass
        events = list(openai_client.responses.create(model="gpt-4o", input="hi", stream=True))
    assert final.output_text == CLAIM.text
    assert events[-1].type == "response.completed"
    spans = model_spans(tracing)
    assert len(spans) == 4
    assert_tool_then_final(spans[:2])
    assert_tool_then_final(spans[2:])
    assert spans[0].attributes["gen_ai.request.max_tokens"] == 50


def test_a_stream_abandoned_and_collected_ends_its_span_exactly_once(tracing):
    ended = []
    tracing.tracer_provider.add_span_processor(_EndCounter(ended))
    with ScriptedModelServer(turns(CLAIM)) as server:
        stream = client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        next(iter(stream))
        del stream
        gc.collect()
    assert len(model_spans(tracing)) == 1
    assert ended.count("chat gpt-4o") == 1


def test_a_stream_closed_early_ends_its_span_once(tracing):
    with ScriptedModelServer(turns(CLAIM)) as server:
        stream = client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        next(iter(stream))
        stream.close()
        stream.close()
    assert len(model_spans(tracing)) == 1


def test_api_error_marks_the_span_and_reraises_the_sdk_exception(tracing):
    with ScriptedModelServer(turns(CLAIM)) as server:
        broken = openai.OpenAI(base_url=server.base_url + "/no-such-api", api_key="test", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            broken.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    (span,) = model_spans(tracing)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == "NotFoundError"


def test_suppressed_instrumentation_makes_no_span(tracing):
    with ScriptedModelServer(turns(CLAIM)) as server:
        token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        finally:
            context.detach(token)
    assert model_spans(tracing) == []


def test_uninstrument_restores_the_sdk():
    with GuardedTracing() as tracing:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        instrumentor.uninstrument()
        with ScriptedModelServer(turns(CLAIM)) as server:
            client(server).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert model_spans(tracing) == []
        from openai.resources.chat.completions.completions import Completions

        assert not isinstance(Completions.__dict__["create"], wrapt.ObjectProxy)


# --- a hand-written agent loop on the real SDK -------------------------------------------------


def run_agent(tracing: GuardedTracing, server: ScriptedModelServer, session_id: str, prompt: str = "hi") -> None:
    provider = tracing.tracer_provider

    @ag.tool(tracer_provider=provider)
    def query_logistics(order: str) -> dict:
        return {"order": order, "state": "stalled"}

    @ag.tool(tracer_provider=provider)
    def refund(order: str) -> dict:
        return {"refunded": order}

    tools = {"query_logistics": query_logistics, "refund": refund}
    openai_client = client(server)
    messages: list[dict] = [{"role": "user", "content": prompt}]
    with tracing.session(session_id):
        for _ in range(8):
            response = openai_client.chat.completions.create(model="gpt-4o", messages=messages)
            message = response.choices[0].message
            if not message.tool_calls:
                return
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = tools[call.function.name](**json.loads(call.function.arguments))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})


def test_looping_agent_gets_tool_loop_at_the_right_sequence(tracing):
    script = turns(*[Turn.call("query_logistics", order="A1") for _ in range(4)],
                   Turn.answer("Your parcel is still in transit."))
    with ScriptedModelServer(script) as server:
        run_agent(tracing, server, "loop")
    verdict = tracing.verdict("loop")
    assert verdict.stop_reason == "tool_loop"
    # model 1, tool 2, model 3, tool 4, model 5, tool 6: the third identical lookup raises it
    assert verdict.alerts[0].evidence == (2, 4, 6)
    assert verdict.alerts[0].sequence == 6


def test_working_agent_completes_and_a_claimed_refund_without_a_write_is_fake(tracing):
    with ScriptedModelServer(turns(Turn.call("refund", order="A1"), CLAIM)) as server:
        run_agent(tracing, server, "honest")
    with ScriptedModelServer(turns(Turn.call("query_logistics", order="A1"), CLAIM)) as server:
        run_agent(tracing, server, "liar")
    assert tracing.verdict("honest").stop_reason == "completed"
    assert tracing.verdict("liar").stop_reason == "fake_completion"
    assert tracing.verdict("liar").alerts[-1].evidence == (3,)


@pytest.mark.parametrize("capture", [False, True])
def test_raw_content_leaves_only_with_capture(tracing, monkeypatch, capture):
    if capture:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    else:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    script = turns(Turn.call("query_logistics", order="SECRET-ORDER-991"),
                   Turn.answer("SECRET-ANSWER-117: your parcel is on its way."))
    with ScriptedModelServer(script) as server:
        run_agent(tracing, server, "private", prompt="SECRET-PROMPT-552 where is it?")
    payload = json.dumps(encode_request(tracing.spans()))
    for secret in ("SECRET-ORDER-991", "SECRET-ANSWER-117", "SECRET-PROMPT-552"):
        assert (secret in payload) is capture, secret


class _EndCounter:
    """A span processor that records span names as they end (to count ends)."""

    def __init__(self, ended: list[str]):
        self.ended = ended

    def on_start(self, span, parent_context=None):
        pass

    def _on_ending(self, span):
        pass

    def on_end(self, span):
        self.ended.append(span.name)

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True
