"""AnthropicInstrumentor against the real ``anthropic`` SDK talking to a loopback scripted model server.

Every way of calling the model (``messages.create`` plain and ``stream=True``,
``messages.stream`` read through ``text_stream`` or ``get_final_message()``,
sync and async) runs through one parametrized suite; agent-loop tests drive a
hand-written tool loop and read the guard's verdict.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest
import wrapt
from anthropic.lib.streaming import AsyncMessageStream, MessageStream
from anthropic.resources.messages import AsyncMessages, Messages
from anthropic.types import Message
from opentelemetry import context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

import otel_agentguard
from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.exporters import encode_request
from otel_agentguard.instrumentation.anthropic import AnthropicInstrumentor, _extract
from otel_agentguard.instrumentation.anthropic import _stream as _anthropic_stream
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

MODEL = "claude-test"
SDK_DIR = os.path.dirname(anthropic.__file__) + os.sep
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
REFUND_CLAIM = "Your refund has been submitted."
STATE_STATEMENT = "Your order A1 is in transit."
TOOL_SCHEMAS = [{
    "name": "get_order",
    "description": "Look an order up.",
    "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
}]


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _content_capture_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE, raising=False)


@pytest.fixture
def tracing() -> Iterator[GuardedTracing]:
    with GuardedTracing() as guarded:
        yield guarded


@pytest.fixture
def instrumented(tracing: GuardedTracing) -> Iterator[GuardedTracing]:
    AnthropicInstrumentor().instrument(tracer_provider=tracing.tracer_provider)
    try:
        yield tracing
    finally:
        AnthropicInstrumentor().uninstrument()


@pytest.fixture
def serve() -> Iterator[Callable[..., ScriptedModelServer]]:
    servers: list[ScriptedModelServer] = []

    def start(*script: Turn) -> ScriptedModelServer:
        server = ScriptedModelServer(turns(*script), model=MODEL).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def sync_client(server: ScriptedModelServer | str, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=_url(server), api_key="test", max_retries=0, **options)


def async_client(server: ScriptedModelServer | str, **options: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=_url(server), api_key="test", max_retries=0, **options)


def _url(server: ScriptedModelServer | str) -> str:
    return server if isinstance(server, str) else server.anthropic_url


def request(prompt: str = "Where is order A1?", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 256, "messages": [{"role": "user", "content": prompt}], **extra}


def chat_spans(tracing: GuardedTracing) -> list[ReadableSpan]:
    return [s for s in tracing.spans() if (s.attributes or {}).get(A.GEN_AI_OPERATION_NAME) == "chat"]


def only_chat_span(tracing: GuardedTracing) -> ReadableSpan:
    spans = chat_spans(tracing)
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def message_text(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


# --- every way of calling the model ------------------------------------------------------------------
# Each returns the text the application saw, after checking it got the SDK's own types.


def call_create(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    with sync_client(server) as client:
        message = client.messages.create(**kwargs)
        assert type(message) is Message
        return message_text(message)


def call_create_stream(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    with sync_client(server) as client:
        stream = client.messages.create(stream=True, **kwargs)
        assert isinstance(stream, anthropic.Stream)
        return "".join(e.delta.text for e in stream if e.type == "content_block_delta" and e.delta.type == "text_delta")


def call_stream_text(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    with sync_client(server) as client, client.messages.stream(**kwargs) as stream:
        assert type(stream) is MessageStream
        return "".join(stream.text_stream)


def call_stream_final(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    with sync_client(server) as client, client.messages.stream(**kwargs) as stream:
        return message_text(stream.get_final_message())


def call_stream_events(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    with sync_client(server) as client, client.messages.stream(**kwargs) as stream:
        return "".join(e.text for e in stream if e.type == "text")  # the helper's own "text" events


def call_async_create(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    async def main() -> str:
        async with async_client(server) as client:
            message = await client.messages.create(**kwargs)
            assert type(message) is Message
            return message_text(message)

    return asyncio.run(main())


def call_async_create_stream(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    async def main() -> str:
        async with async_client(server) as client:
            stream = await client.messages.create(stream=True, **kwargs)
            assert isinstance(stream, anthropic.AsyncStream)
            return "".join([e.delta.text async for e in stream
                            if e.type == "content_block_delta" and e.delta.type == "text_delta"])

    return asyncio.run(main())


def call_async_stream_text(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    async def main() -> str:
        async with async_client(server) as client, client.messages.stream(**kwargs) as stream:
            assert type(stream) is AsyncMessageStream
            return "".join([text async for text in stream.text_stream])

    return asyncio.run(main())


def call_async_stream_final(server: ScriptedModelServer | str, **kwargs: Any) -> str:
    async def main() -> str:
        async with async_client(server) as client, client.messages.stream(**kwargs) as stream:
            return message_text(await stream.get_final_message())

    return asyncio.run(main())


CALLS = {
    "create": call_create,
    "create_stream": call_create_stream,
    "stream_text": call_stream_text,
    "stream_final": call_stream_final,
    "stream_events": call_stream_events,
    "async_create": call_async_create,
    "async_create_stream": call_async_create_stream,
    "async_stream_text": call_async_stream_text,
    "async_stream_final": call_async_stream_final,
}
call_ways = pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())


# --- span attributes ---------------------------------------------------------------------------------


@call_ways
def test_final_answer_span(instrumented: GuardedTracing, serve: Any, call: Callable[..., str]) -> None:
    server = serve(Turn.answer(REFUND_CLAIM, input_tokens=11, output_tokens=7))

    assert call(server, **request()) == REFUND_CLAIM  # the application's view is unchanged

    span = only_chat_span(instrumented)
    attrs = span.attributes or {}
    assert span.name == f"chat {MODEL}"
    assert span.kind is SpanKind.CLIENT
    assert span.status.status_code is StatusCode.UNSET
    assert attrs[A.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert attrs[A.GEN_AI_REQUEST_MODEL] == MODEL
    assert attrs[A.GEN_AI_RESPONSE_MODEL] == MODEL
    assert str(attrs["gen_ai.response.id"]).startswith("msg_")
    assert attrs["gen_ai.request.max_tokens"] == 256
    assert attrs[A.GEN_AI_USAGE_INPUT_TOKENS] == 11
    assert attrs[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 7
    assert tuple(attrs[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("end_turn",)
    assert attrs[A.RESPONSE_TOOL_CALLS] == 0
    assert tuple(attrs[A.FINAL_CLAIMS]) == ("write",)
    assert isinstance(attrs[A.SEQUENCE], int) and A.SESSION_ID in attrs


@call_ways
def test_tool_use_span(instrumented: GuardedTracing, serve: Any, call: Callable[..., str]) -> None:
    server = serve(Turn.calls(("get_order", {"order": "A1"}), ("get_order", {"order": "B2"})))

    assert call(server, **request(tools=TOOL_SCHEMAS)) == ""

    attrs = only_chat_span(instrumented).attributes or {}
    assert tuple(attrs[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("tool_use",)
    assert attrs[A.RESPONSE_TOOL_CALLS] == 2
    assert A.FINAL_CLAIMS not in attrs  # not a final answer: nothing to claim
    assert attrs[A.GEN_AI_USAGE_INPUT_TOKENS] == 120 and attrs[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 30


@pytest.mark.parametrize("call", [call_create, call_stream_text, call_async_create_stream],
                         ids=["create", "stream_text", "async_create_stream"])
def test_state_statement_claims_nothing(instrumented: GuardedTracing, serve: Any, call: Callable[..., str]) -> None:
    call(serve(Turn.answer(STATE_STATEMENT)), **request())

    assert tuple(only_chat_span(instrumented).attributes[A.FINAL_CLAIMS]) == ()


def test_input_tokens_include_cache_reads_and_writes() -> None:
    # The scripted server has no prompt cache: read the SDK's own models directly.
    usage = {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5}
    message = Message.model_validate({"id": "msg_1", "type": "message", "role": "assistant", "model": MODEL,
                                      "content": [], "stop_reason": "end_turn", "usage": usage})
    result = _extract.message_result(message)
    assert (result.input_tokens, result.output_tokens) == (115, 4)

    events = _extract.MessageEvents()
    events.add(anthropic.types.RawMessageStartEvent.model_validate(
        {"type": "message_start", "message": {**message.model_dump(), "usage": {**usage, "output_tokens": 1}}}))
    assert (events.result.input_tokens, events.result.output_tokens) == (115, None)  # 1 is only a placeholder
    events.add(anthropic.types.RawMessageDeltaEvent.model_validate(
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}))
    assert (events.result.input_tokens, events.result.output_tokens) == (115, 4)


def test_raw_response_is_returned_as_is(instrumented: GuardedTracing, serve: Any) -> None:
    server = serve(Turn.answer(REFUND_CLAIM), Turn.answer(STATE_STATEMENT))
    with sync_client(server) as client:
        raw = client.messages.with_raw_response.create(**request())
        assert type(raw) is anthropic._response.APIResponse
        assert message_text(raw.parse()) == REFUND_CLAIM
        with client.messages.with_streaming_response.create(**request()) as streamed:
            assert json.loads(streamed.read())["content"][0]["text"] == STATE_STATEMENT  # body still unread

    first, second = chat_spans(instrumented)
    assert tuple(first.attributes[A.FINAL_CLAIMS]) == ("write",)
    assert first.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 30
    assert A.GEN_AI_RESPONSE_FINISH_REASONS not in second.attributes  # its body was not ours to read


# --- an agent loop, judged ----------------------------------------------------------------------------


def send_create(client: anthropic.Anthropic, **kwargs: Any) -> Message:
    return client.messages.create(**kwargs)


def send_stream(client: anthropic.Anthropic, **kwargs: Any) -> Message:
    with client.messages.stream(**kwargs) as stream:
        return stream.get_final_message()


SENDS = pytest.mark.parametrize("send", [send_create, send_stream], ids=["create", "stream"])


def make_tools(tracing: GuardedTracing) -> dict[str, Callable[..., Any]]:
    @otel_agentguard.tool(effect="read", tracer_provider=tracing.tracer_provider)
    def get_order(order: str) -> dict[str, Any]:
        return {"order": order, "status": "in transit"}

    return {"get_order": get_order}


def run_agent(
    client: anthropic.Anthropic,
    send: Callable[..., Message],
    tools: dict[str, Callable[..., Any]],
    *,
    prompt: str = "Where is my order A1? Refund it if it is late.",
    system: str = "You are a support agent.",
    max_turns: int = 6,
) -> Message:
    """A hand-written tool loop: run the tools the model asks for, feed their results back."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(max_turns):
        message = send(client, model=MODEL, max_tokens=256, system=system, messages=messages, tools=TOOL_SCHEMAS)
        messages.append({"role": "assistant", "content": message.content})
        uses = [block for block in message.content if block.type == "tool_use"]
        if not uses:
            break
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": json.dumps(tools[use.name](**use.input))}
            for use in uses
        ]})
    return message


@SENDS
def test_looping_agent_gets_tool_loop(instrumented: GuardedTracing, serve: Any, send: Callable[..., Message]) -> None:
    server = serve(Turn.call("get_order", order="A1"))  # the same call, forever
    with sync_client(server) as client, instrumented.session("looping"):
        run_agent(client, send, make_tools(instrumented), max_turns=4)

    verdict = instrumented.verdict("looping")
    assert verdict.stop_reason == "tool_loop"
    loop = next(alert for alert in verdict.alerts if alert.probe == "tool_loop")
    # model 1, tool 2, model 3, tool 4, model 5, tool 6: the third identical call is step 6
    assert loop.sequence == 6
    assert loop.evidence == (2, 4, 6)
    sequences = sorted(s.attributes[A.SEQUENCE] for s in chat_spans(instrumented))
    assert sequences == [1, 3, 5, 7]


@SENDS
def test_normal_run_completes(instrumented: GuardedTracing, serve: Any, send: Callable[..., Message]) -> None:
    server = serve(Turn.call("get_order", order="A1"), Turn.answer(STATE_STATEMENT))
    with sync_client(server) as client, instrumented.session("normal"):
        final = run_agent(client, send, make_tools(instrumented))

    assert message_text(final) == STATE_STATEMENT
    verdict = instrumented.verdict("normal")
    assert verdict.stop_reason == "completed"
    assert verdict.alerts == ()
    assert (verdict.steps, verdict.model_calls, verdict.tokens) == (2, 2, 300)  # steps: tools + the answer
    # the tool result went back to the model as a tool_result block
    assert server.requests[1].body["messages"][-1]["content"][0]["type"] == "tool_result"


@SENDS
def test_claimed_refund_without_a_write_is_fake_completion(
    instrumented: GuardedTracing, serve: Any, send: Callable[..., Message]
) -> None:
    server = serve(Turn.call("get_order", order="A1"), Turn.answer(REFUND_CLAIM))
    with sync_client(server) as client, instrumented.session("fake"):
        run_agent(client, send, make_tools(instrumented))

    verdict = instrumented.verdict("fake")
    assert verdict.stop_reason == "fake_completion"
    assert [alert.evidence for alert in verdict.alerts if alert.probe == "fake_completion"] == [(3,)]


async def asend_create(client: anthropic.AsyncAnthropic, **kwargs: Any) -> Message:
    return await client.messages.create(**kwargs)


async def asend_stream(client: anthropic.AsyncAnthropic, **kwargs: Any) -> Message:
    async with client.messages.stream(**kwargs) as stream:
        return await stream.get_final_message()


ASYNC_SENDS = pytest.mark.parametrize("asend", [asend_create, asend_stream], ids=["create", "stream"])


def run_agent_async(
    tracing: GuardedTracing, client_of: Callable[[], anthropic.AsyncAnthropic], asend: Callable[..., Any],
    session_id: str,
) -> None:
    """The same tool loop on the async client, in an ``async with`` session."""
    tools = make_tools(tracing)

    async def main() -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Where is A1?"}]
        async with client_of() as client, tracing.session(session_id):
            for _ in range(6):
                message = await asend(client, model=MODEL, max_tokens=64, messages=messages, tools=TOOL_SCHEMAS)
                messages.append({"role": "assistant", "content": message.content})
                uses = [block for block in message.content if block.type == "tool_use"]
                if not uses:
                    return
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": u.id, "content": json.dumps(tools[u.name](**u.input))}
                    for u in uses
                ]})

    asyncio.run(main())


@ASYNC_SENDS
def test_async_agent_loop_completes(instrumented: GuardedTracing, serve: Any, asend: Callable[..., Any]) -> None:
    server = serve(Turn.call("get_order", order="A1"), Turn.answer(STATE_STATEMENT))
    run_agent_async(instrumented, lambda: async_client(server), asend, "async")

    verdict = instrumented.verdict("async")
    assert (verdict.stop_reason, verdict.steps, verdict.model_calls) == ("completed", 2, 2)
    assert sorted(s.attributes[A.SEQUENCE] for s in chat_spans(instrumented)) == [1, 3]


@pytest.mark.parametrize("way", ["create", "stream", "async_create", "async_stream"])
def test_sdk_own_spans_are_counted_once(instrumented: GuardedTracing, serve: Any, way: str) -> None:
    # Recent SDKs emit their own "anthropic.messages.create" chat span: here into the guarded provider.
    server = serve(Turn.call("get_order", order="A1"), Turn.answer(STATE_STATEMENT))
    sdk_spans = {"tracer_provider": instrumented.tracer_provider}
    if way.startswith("async_"):
        asend = asend_create if way == "async_create" else asend_stream
        run_agent_async(instrumented, lambda: async_client(server, open_telemetry=sdk_spans), asend, "both")
    else:
        with sync_client(server, open_telemetry=sdk_spans) as client, instrumented.session("both"):
            run_agent(client, send_create if way == "create" else send_stream, make_tools(instrumented))

    ours = {s.context.span_id: s for s in chat_spans(instrumented) if s.name == f"chat {MODEL}"}
    theirs = [s for s in chat_spans(instrumented) if s.name == "anthropic.messages.create"]
    assert len(ours) == len(theirs) == 2
    for span in theirs:
        assert span.parent is not None and span.parent.span_id in ours  # theirs runs inside ours
        assert span.attributes.get(A.NESTED_STEP) is True
    verdict = instrumented.verdict("both")
    assert (verdict.stop_reason, verdict.model_calls, verdict.steps) == ("completed", 2, 2)


def test_enriches_an_enclosing_model_span(instrumented: GuardedTracing, serve: Any) -> None:
    # e.g. a LangChain or OpenLLMetry span already covers this very call
    server = serve(Turn.call("get_order", order="A1"))
    with instrumented.tracer.start_as_current_span("outer chat", attributes={A.GEN_AI_OPERATION_NAME: "chat"}):
        call_create(server, **request())

    (span,) = chat_spans(instrumented)
    assert span.name == "outer chat"
    assert span.attributes[A.RESPONSE_TOOL_CALLS] == 1
    assert tuple(span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("tool_use",)


# --- privacy -----------------------------------------------------------------------------------------

SECRETS = ("PROMPT-SECRET-7f3a", "SYSTEM-SECRET-21c9", "ARG-SECRET-88d1", "ANSWER-SECRET-0b4e")


def run_with_secrets(tracing: GuardedTracing, serve: Any, send: Callable[..., Message]) -> str:
    prompt, system, argument, answer = SECRETS
    server = serve(Turn.call("get_order", order=argument), Turn.answer(f"Order is in transit, code {answer}."))
    with sync_client(server) as client, tracing.session("secrets"):
        run_agent(client, send, make_tools(tracing), prompt=f"Where is my order? {prompt}", system=system)
    return json.dumps(encode_request(tracing.spans()))


@SENDS
def test_no_raw_content_in_exported_bytes(instrumented: GuardedTracing, serve: Any, send: Callable[..., Message]) -> None:
    exported = run_with_secrets(instrumented, serve, send)

    assert [secret for secret in SECRETS if secret in exported] == []
    assert "agentguard.response.tool_calls" in exported  # the spans themselves are there


@SENDS
def test_content_exported_when_capture_is_on(
    instrumented: GuardedTracing, serve: Any, send: Callable[..., Message], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE, "true")
    exported = run_with_secrets(instrumented, serve, send)

    assert [secret for secret in SECRETS if secret not in exported] == []
    final = chat_spans(instrumented)[-1].attributes
    inputs = json.loads(final["gen_ai.input.messages"])
    assert [m["role"] for m in inputs] == ["user", "assistant", "user"]
    assert inputs[1]["parts"][0]["type"] == "tool_call" and inputs[1]["parts"][0]["arguments"] == {"order": SECRETS[2]}
    assert inputs[2]["parts"][0]["type"] == "tool_call_response"
    assert json.loads(final["gen_ai.system_instructions"]) == [{"type": "text", "content": SECRETS[1]}]


# --- stream endings ----------------------------------------------------------------------------------


def open_create_stream(client: anthropic.Anthropic) -> tuple[Any, Iterator[Any]]:
    stream = client.messages.create(stream=True, **request())
    return stream, stream


def open_message_stream(client: anthropic.Anthropic) -> tuple[Any, Iterator[Any]]:
    manager = client.messages.stream(**request())
    stream = manager.__enter__()  # entered by hand, never exited: abandoned
    return (manager, stream), stream.text_stream


@pytest.mark.parametrize("open_stream", [open_create_stream, open_message_stream], ids=["create_stream", "stream"])
def test_abandoned_stream_ends_its_span_once(
    instrumented: GuardedTracing, serve: Any, open_stream: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    server = serve(Turn.answer("Half of this answer is never read. " * 4))
    with sync_client(server) as client:
        held, events = open_stream(client)
        next(events)
        assert chat_spans(instrumented) == []  # still open: half read
        del held, events
        gc.collect()

        span = only_chat_span(instrumented)
        assert A.GEN_AI_RESPONSE_FINISH_REASONS not in span.attributes or \
            tuple(span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ()  # never reached message_delta
        assert span.status.status_code is StatusCode.UNSET
        gc.collect()
        assert len(chat_spans(instrumented)) == 1
    assert "ended span" not in caplog.text  # no second end()


def test_stream_left_early_ends_its_span_on_exit(instrumented: GuardedTracing, serve: Any) -> None:
    server = serve(Turn.answer(STATE_STATEMENT))
    with sync_client(server) as client:
        with client.messages.stream(**request()) as stream:
            for _event in stream:
                break
            assert chat_spans(instrumented) == []
        span = only_chat_span(instrumented)
        assert span.status.status_code is StatusCode.UNSET
        assert A.FINAL_CLAIMS not in span.attributes  # an unfinished answer is no final answer


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("way", ["stream", "create_stream", "async_stream"])
def test_exception_inside_the_with_block_ends_the_span_as_error(
    instrumented: GuardedTracing, serve: Any, way: str
) -> None:
    server = serve(Turn.answer(STATE_STATEMENT))
    error = Interrupted("the application gave up")

    def sync() -> None:
        with sync_client(server) as client:
            opened = client.messages.stream(**request()) if way == "stream" else \
                client.messages.create(stream=True, **request())
            with opened as stream:
                next(iter(stream))
                raise error

    async def asynchronous() -> None:
        async with async_client(server) as client, client.messages.stream(**request()) as stream:
            await stream.__anext__()
            raise error

    with pytest.raises(Interrupted) as raised:
        sync() if way != "async_stream" else asyncio.run(asynchronous())
    assert raised.value is error  # the application's own exception, untouched
    span = only_chat_span(instrumented)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == "Interrupted"


# --- errors ------------------------------------------------------------------------------------------

ERROR_CALLS = {name: CALLS[name] for name in ("create", "create_stream", "stream_text", "async_create",
                                               "async_create_stream", "async_stream_final")}


@pytest.mark.parametrize("call", ERROR_CALLS.values(), ids=ERROR_CALLS.keys())
def test_api_error_marks_the_span_and_reraises_the_sdk_exception(
    instrumented: GuardedTracing, serve: Any, call: Callable[..., str]
) -> None:
    server = serve(Turn.answer("never sent"))

    with pytest.raises(anthropic.NotFoundError) as raised:
        call(server.anthropic_url + "/nowhere", **request())  # a path the server does not route: 404
    assert raised.value.status_code == 404
    # raised inside the SDK, not made up by the wrapper
    assert traceback.extract_tb(raised.value.__traceback__)[-1].filename.startswith(SDK_DIR)
    span = only_chat_span(instrumented)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == "NotFoundError"
    assert A.GEN_AI_RESPONSE_FINISH_REASONS not in span.attributes


def test_connection_error_marks_the_span(instrumented: GuardedTracing, serve: Any) -> None:
    server = serve(Turn.answer("never sent"))
    base_url = server.base_url
    server.stop()  # nothing listens on that port any more
    with sync_client(base_url) as client, pytest.raises(anthropic.APIConnectionError):
        client.messages.create(**request())
    span = only_chat_span(instrumented)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == "APIConnectionError"


def test_guard_failures_are_contained(instrumented: GuardedTracing, serve: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("guard bug")

    server = serve(Turn.answer(STATE_STATEMENT))
    before = _internal_errors.counts()
    monkeypatch.setattr(_extract, "message_result", broken)
    monkeypatch.setattr(_extract.MessageEvents, "add", broken)
    assert call_create(server, **request()) == STATE_STATEMENT
    assert call_stream_text(server, **request()) == STATE_STATEMENT
    monkeypatch.setattr(_extract, "request_attributes", broken)
    assert call_create(server, **request()) == STATE_STATEMENT  # no span at all, the call goes on

    after = _internal_errors.counts()
    for kind in ("anthropic.response", "stream.chunk", "anthropic.request"):
        assert after.get(kind, 0) > before.get(kind, 0), kind
    assert len(chat_spans(instrumented)) == 2  # both ended, without response attributes


def test_stream_hook_failures_are_contained(
    instrumented: GuardedTracing, serve: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("guard bug")

    server = serve(Turn.answer(STATE_STATEMENT))
    before = _internal_errors.counts()
    monkeypatch.setattr(_anthropic_stream, "StreamProxy", broken)
    for call in (call_create_stream, call_stream_text, call_async_stream_final):
        assert call(server, **request()) == STATE_STATEMENT  # the SDK's own stream, unobserved

    after = _internal_errors.counts()
    for kind in ("anthropic.stream", "anthropic.message_stream"):
        assert after.get(kind, 0) > before.get(kind, 0), kind
    assert len(chat_spans(instrumented)) == 3  # each span ended at once rather than never


# --- suppression and uninstrument --------------------------------------------------------------------


@call_ways
def test_suppressed_calls_make_no_span(instrumented: GuardedTracing, serve: Any, call: Callable[..., str]) -> None:
    server = serve(Turn.answer(STATE_STATEMENT))
    token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        assert call(server, **request()) == STATE_STATEMENT
    finally:
        context.detach(token)
    assert instrumented.spans() == ()


PATCHED = [(Messages, "create"), (AsyncMessages, "create"), (Messages, "stream"), (AsyncMessages, "stream")]


def test_uninstrument_restores_the_original_methods(tracing: GuardedTracing, serve: Any) -> None:
    originals = [vars(owner)[name] for owner, name in PATCHED]
    assert not any(isinstance(method, wrapt.FunctionWrapper) for method in originals)
    server = serve(Turn.answer(STATE_STATEMENT))

    AnthropicInstrumentor().instrument(tracer_provider=tracing.tracer_provider)
    try:
        assert all(isinstance(vars(owner)[name], wrapt.FunctionWrapper) for owner, name in PATCHED)
        call_create(server, **request())
        call_stream_text(server, **request())
        assert len(chat_spans(tracing)) == 2
    finally:
        AnthropicInstrumentor().uninstrument()

    assert [vars(owner)[name] for owner, name in PATCHED] == originals
    for call in CALLS.values():
        assert call(server, **request()) == STATE_STATEMENT
    assert len(chat_spans(tracing)) == 2  # no more spans



def test_enforce_mode_nudges_then_stops_an_anthropic_tool_loop():
    import anthropic

    import otel_agentguard as ag
    from otel_agentguard.history import history_problems
    from otel_agentguard.scripted_model import Request

    def looping(request: Request) -> Turn:
        return Turn.call("track", order="A1")

    ran: list[str] = []
    with GuardedTracing(mode="enforce") as tracing:
        instrumentor = AnthropicInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)

        @ag.tool(tracer_provider=tracing.tracer_provider)
        def track(order: str) -> dict:
            ran.append(order)
            return {"order": order, "state": "stalled"}

        try:
            with ScriptedModelServer(looping) as server:
                client = anthropic.Anthropic(base_url=server.anthropic_url, api_key="t", max_retries=0)
                messages: list[dict] = [{"role": "user", "content": "Where is A1?"}]
                with pytest.raises(ag.AgentStopped) as stopped:
                    with tracing.session("claude-loop"):
                        for _ in range(10):
                            reply = client.messages.create(model="claude-sonnet-4", max_tokens=100, messages=messages)
                            messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
                            results = [{"type": "tool_result", "tool_use_id": b.id, "content": str(track(**b.input))}
                                       for b in reply.content if b.type == "tool_use"]
                            messages.append({"role": "user", "content": results})
        finally:
            instrumentor.uninstrument()
    assert stopped.value.stop_reason == "tool_loop"
    assert ran == ["A1"] * 3
    assert server.rejected == [] and history_problems(messages, "anthropic") == []
