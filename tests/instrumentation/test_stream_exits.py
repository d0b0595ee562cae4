"""Every way a stream ends, for OpenAI, Anthropic and LangChain streams, sync and async, with the
real SDKs against the scripted model server:

* read to its end: completed, a final answer;
* closed early (``close()``, ``aclose()``, ``break`` then close, leaving its ``with`` block, a
  generator's ``GeneratorExit``): no error, and a partial answer is no final answer;
* dropped half read and garbage-collected: no error, marked ``agentguard.stream.abandoned``;
* broken by the transport mid-stream: an error.

The HTTP transport here hands the server's answer over one SSE event per read and starts a
span on each request and each read, as an HTTP instrumentation would: those spans must nest
under the model span, and the span current after each read is the one before it.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import importlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_agentguard import attributes as A
from otel_agentguard.instrumentation.anthropic import AnthropicInstrumentor
from otel_agentguard.instrumentation.langchain import LangChainInstrumentor
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

ChatOpenAI = pytest.importorskip("langchain_openai").ChatOpenAI

MODEL = "gpt-4o"
# Long enough for many streamed pieces; a claim, so a final answer carries agentguard.final.claims.
ANSWER = "Your refund has been submitted and the courier has been told to pick the parcel up."
READ = "transport.read"
REQUEST = "transport.request"


# --- the transport --------------------------------------------------------------------------------


def _events(body: bytes) -> list[bytes]:
    return [event + b"\n\n" for event in body.split(b"\n\n") if event.strip()]


def _headers(response: Any) -> list[tuple[str, str]]:
    return [(k, v) for k, v in response.headers.items() if k.lower() not in ("content-length", "transfer-encoding")]


@dataclass(frozen=True)
class Http:
    """HTTP clients whose transport is the real one, handing the body over one SSE event per read
    (a span on each) and failing with a ReadError before event ``fail_after`` when it is given.
    Built on the httpx package the SDK uses (the Anthropic SDK has its own, httpx2)."""

    client: Callable[[trace.Tracer, int | None], Any]
    async_client: Callable[[trace.Tracer, int | None], Any]


@functools.cache
def http(module_name: str) -> Http:
    module: Any = importlib.import_module(module_name)

    class SyncEvents(module.SyncByteStream):  # type: ignore[misc]
        def __init__(self, body: bytes, tracer: trace.Tracer, fail_after: int | None):
            self._events, self._tracer, self._fail_after = _events(body), tracer, fail_after

        def __iter__(self) -> Iterator[bytes]:
            for n, event in enumerate(self._events):
                if n == self._fail_after:
                    raise module.ReadError("connection reset mid-stream")
                with self._tracer.start_as_current_span(READ):
                    pass
                yield event

    class AsyncEvents(module.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, body: bytes, tracer: trace.Tracer, fail_after: int | None):
            self._events, self._tracer, self._fail_after = _events(body), tracer, fail_after

        async def __aiter__(self) -> AsyncIterator[bytes]:
            for n, event in enumerate(self._events):
                if n == self._fail_after:
                    raise module.ReadError("connection reset mid-stream")
                with self._tracer.start_as_current_span(READ):
                    pass
                yield event

    class Transport(module.BaseTransport):  # type: ignore[misc]
        def __init__(self, tracer: trace.Tracer, fail_after: int | None):
            self._inner, self._tracer, self._fail_after = module.HTTPTransport(), tracer, fail_after

        def handle_request(self, request: Any) -> Any:
            with self._tracer.start_as_current_span(REQUEST):
                response = self._inner.handle_request(request)
                body = response.read()
                response.close()
            return module.Response(response.status_code, headers=_headers(response),
                                   stream=SyncEvents(body, self._tracer, self._fail_after))

    class AsyncTransport(module.AsyncBaseTransport):  # type: ignore[misc]
        def __init__(self, tracer: trace.Tracer, fail_after: int | None):
            self._inner, self._tracer, self._fail_after = module.AsyncHTTPTransport(), tracer, fail_after

        async def handle_async_request(self, request: Any) -> Any:
            with self._tracer.start_as_current_span(REQUEST):
                response = await self._inner.handle_async_request(request)
                body = await response.aread()
                await response.aclose()
            return module.Response(response.status_code, headers=_headers(response),
                                   stream=AsyncEvents(body, self._tracer, self._fail_after))

    return Http(lambda tracer, fail_after: module.Client(transport=Transport(tracer, fail_after)),
                lambda tracer, fail_after: module.AsyncClient(transport=AsyncTransport(tracer, fail_after)))


def _http_of(sdk: Any) -> str:
    """The httpx package an SDK was built on (``httpx``, or its successor ``httpx2``)."""
    return "httpx2" if hasattr(sdk._base_client, "httpx2") else "httpx"


OPENAI_HTTP = _http_of(openai)
ANTHROPIC_HTTP = _http_of(anthropic)


# --- the frameworks ---------------------------------------------------------------------------------
# Each opens a stream of one answer: ``open(server, tracer, fail_after)`` returns the stream (sync),
# or a coroutine that does (async). A stream is what the application iterates and closes.


def _openai(server: ScriptedModelServer, tracer: trace.Tracer, fail_after: int | None) -> Any:
    client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0,
                           http_client=http(OPENAI_HTTP).client(tracer, fail_after))
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Refund?"}], stream=True)


async def _aopenai(server: ScriptedModelServer, tracer: trace.Tracer, fail_after: int | None) -> Any:
    client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0,
                                http_client=http(OPENAI_HTTP).async_client(tracer, fail_after))
    return await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Refund?"}],
                                                stream=True)


ANTHROPIC_REQUEST = {"model": MODEL, "max_tokens": 256, "messages": [{"role": "user", "content": "Refund?"}]}


def _anthropic(server: ScriptedModelServer, tracer: trace.Tracer, fail_after: int | None) -> Any:
    client = anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0,
                                 http_client=http(ANTHROPIC_HTTP).client(tracer, fail_after))
    return client.messages.create(stream=True, **ANTHROPIC_REQUEST)


async def _aanthropic(server: ScriptedModelServer, tracer: trace.Tracer, fail_after: int | None) -> Any:
    client = anthropic.AsyncAnthropic(base_url=server.anthropic_url, api_key="test", max_retries=0,
                                      http_client=http(ANTHROPIC_HTTP).async_client(tracer, fail_after))
    return await client.messages.create(stream=True, **ANTHROPIC_REQUEST)


def _chat_model(server: ScriptedModelServer, tracer: trace.Tracer, fail_after: int | None) -> Any:
    return ChatOpenAI(model=MODEL, base_url=server.openai_url, api_key="test", max_retries=0, stream_usage=True,
                      http_client=http(OPENAI_HTTP).client(tracer, fail_after),
                      http_async_client=http(OPENAI_HTTP).async_client(tracer, fail_after))


def _langchain(server: ScriptedModelServer, tracer: trace.Tracer, fail_after: int | None) -> Any:
    return _chat_model(server, tracer, fail_after).stream("Refund?")


async def _alangchain(server: ScriptedModelServer, tracer: trace.Tracer, fail_after: int | None) -> Any:
    return _chat_model(server, tracer, fail_after).astream("Refund?")


@dataclass(frozen=True)
class Framework:
    instrumentor: Callable[[], Any]
    open: Callable[..., Any]
    asynchronous: bool


FRAMEWORKS = {
    "openai": Framework(OpenAIInstrumentor, _openai, False),
    "openai-async": Framework(OpenAIInstrumentor, _aopenai, True),
    "anthropic": Framework(AnthropicInstrumentor, _anthropic, False),
    "anthropic-async": Framework(AnthropicInstrumentor, _aanthropic, True),
    "langchain": Framework(LangChainInstrumentor, _langchain, False),
    "langchain-async": Framework(LangChainInstrumentor, _alangchain, True),
}


@pytest.fixture(params=list(FRAMEWORKS))
def framework(request: pytest.FixtureRequest) -> Framework:
    return FRAMEWORKS[request.param]


@pytest.fixture
def tracing(framework: Framework, instrumented_tracing: Any) -> Iterator[GuardedTracing]:
    with instrumented_tracing(framework.instrumentor()) as guarded:
        yield guarded


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(turns(Turn.answer(ANSWER)), model=MODEL) as scripted:
        yield scripted


def model_span(tracing: GuardedTracing) -> ReadableSpan:
    spans = [s for s in tracing.spans() if (s.attributes or {}).get(A.GEN_AI_OPERATION_NAME) == "chat"]
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


# --- the exits ----------------------------------------------------------------------------------------
# Each reads the stream some way and leaves it; sync and async twins side by side.


def read_to_the_end(stream: Any) -> None:
    for _ in stream:
        pass


async def aread_to_the_end(stream: Any) -> None:
    async for _ in stream:
        pass


def closed_after_one(stream: Any) -> None:
    next(iter(stream))
    stream.close()


async def aclosed_after_one(stream: Any) -> None:
    await stream.__aiter__().__anext__()
    if hasattr(stream, "aclose"):
        await stream.aclose()
    else:
        await stream.close()


def break_then_close(stream: Any) -> None:
    for _ in stream:
        break
    stream.close()


async def abreak_then_close(stream: Any) -> None:
    async for _ in stream:
        break
    await (stream.aclose() if hasattr(stream, "aclose") else stream.close())


def dropped_after_one(stream: Any) -> None:
    next(iter(stream))
    del stream
    gc.collect()


async def adropped_after_one(stream: Any) -> None:
    await stream.__aiter__().__anext__()
    del stream
    gc.collect()
    for _ in range(3):  # an async generator is closed by a task the event loop runs
        await asyncio.sleep(0.01)


def _reset_mid_stream(error: BaseException) -> bool:
    """The transport's ReadError, as raised or as the connection error an SDK made from it."""
    seen: BaseException | None = error
    while seen is not None:
        if type(seen).__name__ == "ReadError" and "connection reset mid-stream" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def broken_mid_stream(stream: Any) -> BaseException:
    with pytest.raises(Exception) as raised:
        read_to_the_end(stream)
    assert _reset_mid_stream(raised.value)
    return raised.value


async def abroken_mid_stream(stream: Any) -> BaseException:
    with pytest.raises(Exception) as raised:
        await aread_to_the_end(stream)
    assert _reset_mid_stream(raised.value)
    return raised.value


@dataclass(frozen=True)
class Exit:
    read: Callable[[Any], Any]
    aread: Callable[[Any], Any]
    fail_after: int | None = None


EXITS = {
    "completed": Exit(read_to_the_end, aread_to_the_end),
    "closed_early": Exit(closed_after_one, aclosed_after_one),
    "break_then_close": Exit(break_then_close, abreak_then_close),
    "abandoned": Exit(dropped_after_one, adropped_after_one),
    "failed": Exit(broken_mid_stream, abroken_mid_stream, fail_after=3),
}


def run_exit(framework: Framework, exit: Exit, server: ScriptedModelServer, tracer: trace.Tracer) -> Any:
    """What the exit's read returned (the exception of a broken stream)."""
    if not framework.asynchronous:
        return exit.read(framework.open(server, tracer, exit.fail_after))

    async def run() -> Any:
        return await exit.aread(await framework.open(server, tracer, exit.fail_after))

    return asyncio.run(run())


@pytest.mark.parametrize("way", ["completed", "closed_early", "break_then_close"])
def test_a_stream_read_to_its_end_or_closed_is_no_error_and_not_abandoned(
    framework: Framework, tracing: GuardedTracing, server: ScriptedModelServer, way: str
) -> None:
    run_exit(framework, EXITS[way], server, tracing.tracer)

    span = model_span(tracing)
    assert span.status.status_code is StatusCode.UNSET
    assert A.STREAM_ABANDONED not in span.attributes
    if way == "completed":
        assert tuple(span.attributes[A.FINAL_CLAIMS]) == ("write",)
    else:  # a partial answer: the model's finish reason never arrived, so no final answer to judge
        assert A.FINAL_CLAIMS not in span.attributes
        assert not span.attributes.get(A.GEN_AI_RESPONSE_FINISH_REASONS)


def test_a_stream_dropped_half_read_is_marked_abandoned(
    framework: Framework, tracing: GuardedTracing, server: ScriptedModelServer
) -> None:
    run_exit(framework, EXITS["abandoned"], server, tracing.tracer)

    span = model_span(tracing)
    assert span.attributes[A.STREAM_ABANDONED] is True
    assert span.status.status_code is StatusCode.UNSET  # not an error either
    assert A.FINAL_CLAIMS not in span.attributes


def test_a_transport_error_mid_stream_is_an_error(
    framework: Framework, tracing: GuardedTracing, server: ScriptedModelServer
) -> None:
    error = run_exit(framework, EXITS["failed"], server, tracing.tracer)

    span = model_span(tracing)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == type(error).__qualname__  # what the application got
    assert A.STREAM_ABANDONED not in span.attributes


@pytest.mark.parametrize("way", ["completed", "closed_early", "abandoned"])
def test_only_a_stream_read_to_its_end_is_judged_as_a_final_answer(
    framework: Framework, tracing: GuardedTracing, server: ScriptedModelServer, way: str
) -> None:
    with tracing.session("s"):
        run_exit(framework, EXITS[way], server, tracing.tracer)

    # Read to its end, the answer claims a refund nobody made; cut short, the same words are no
    # final answer, and the session just stopped.
    expected = A.FAKE_COMPLETION if way == "completed" else A.ABANDONED
    assert tracing.verdict("s").stop_reason == expected


# --- reads run under the model span ---------------------------------------------------------------------


def _reads_nest(tracing: GuardedTracing) -> None:
    span = model_span(tracing)
    transport = [s for s in tracing.spans() if s.name in (READ, REQUEST)]
    reads = [s for s in transport if s.name == READ]
    assert len(reads) > 3  # one per SSE event, read while the application iterates
    assert {s.parent.span_id for s in transport if s.parent} == {span.context.span_id}
    assert all(s.parent is not None for s in transport)


def test_each_read_runs_under_the_model_span_and_restores_the_context(
    framework: Framework, tracing: GuardedTracing, server: ScriptedModelServer
) -> None:
    contexts: list[bool] = []

    def run() -> None:
        with tracing.tracer.start_as_current_span("caller") as caller:
            stream = framework.open(server, tracing.tracer, None)
            for _ in stream:
                contexts.append(trace.get_current_span() is caller)

    async def arun() -> None:
        with tracing.tracer.start_as_current_span("caller") as caller:
            stream = await framework.open(server, tracing.tracer, None)
            async for _ in stream:
                contexts.append(trace.get_current_span() is caller)

    run() if not framework.asynchronous else asyncio.run(arun())

    assert len(contexts) > 3 and all(contexts)
    _reads_nest(tracing)


HELPERS = ["openai-chat", "openai-responses", "anthropic", "openai-chat-async", "anthropic-async"]


@pytest.mark.parametrize("helper", HELPERS)
def test_the_stream_helpers_read_under_the_model_span(server: ScriptedModelServer, helper: str) -> None:
    instrumentor = OpenAIInstrumentor() if helper.startswith("openai") else AnthropicInstrumentor()
    with GuardedTracing() as tracing:
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            _run_helper(helper, server, tracing.tracer)
        finally:
            instrumentor.uninstrument()
        _reads_nest(tracing)
        assert model_span(tracing).status.status_code is StatusCode.UNSET


def _run_helper(helper: str, server: ScriptedModelServer, tracer: trace.Tracer) -> None:
    messages = [{"role": "user", "content": "Refund?"}]
    if helper == "openai-chat":
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0,
                               http_client=http(OPENAI_HTTP).client(tracer, None))
        with client.chat.completions.stream(model=MODEL, messages=messages) as stream:
            read_to_the_end(stream)
    elif helper == "openai-responses":
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0,
                               http_client=http(OPENAI_HTTP).client(tracer, None))
        with client.responses.stream(model=MODEL, input="Refund?") as stream:
            read_to_the_end(stream)
    elif helper == "anthropic":
        aclient = anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0,
                                      http_client=http(ANTHROPIC_HTTP).client(tracer, None))
        with aclient.messages.stream(**ANTHROPIC_REQUEST) as stream:
            read_to_the_end(stream)
    else:
        asyncio.run(_run_async_helper(helper, server, tracer))


async def _run_async_helper(helper: str, server: ScriptedModelServer, tracer: trace.Tracer) -> None:
    if helper == "openai-chat-async":
        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0,
                                    http_client=http(OPENAI_HTTP).async_client(tracer, None))
        async with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": "Refund?"}]) as s:
            await aread_to_the_end(s)
    else:
        aclient = anthropic.AsyncAnthropic(base_url=server.anthropic_url, api_key="test", max_retries=0,
                                           http_client=http(ANTHROPIC_HTTP).async_client(tracer, None))
        async with aclient.messages.stream(**ANTHROPIC_REQUEST) as stream:
            await aread_to_the_end(stream)


# --- leaving a with block ----------------------------------------------------------------------------------


def _left_with_block(helper: str, server: ScriptedModelServer, tracer: trace.Tracer) -> None:
    if helper == "openai":
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0,
                               http_client=http(OPENAI_HTTP).client(tracer, None))
        with client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Refund?"}],
                                            stream=True) as stream:
            next(iter(stream))
    elif helper == "openai-helper":
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0,
                               http_client=http(OPENAI_HTTP).client(tracer, None))
        with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": "Refund?"}]) as helped:
            next(iter(helped))
        del helped
        gc.collect()  # the helper closes the response, not the stream: the end is noticed when it goes
    else:
        aclient = anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0,
                                      http_client=http(ANTHROPIC_HTTP).client(tracer, None))
        with aclient.messages.stream(**ANTHROPIC_REQUEST) as message_stream:
            next(iter(message_stream))


@pytest.mark.parametrize("helper", ["openai", "openai-helper", "anthropic"])
def test_leaving_the_with_block_of_a_partly_read_stream_closes_it_early(
    server: ScriptedModelServer, helper: str
) -> None:
    instrumentor = OpenAIInstrumentor() if helper.startswith("openai") else AnthropicInstrumentor()
    with GuardedTracing() as tracing:
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            _left_with_block(helper, server, tracing.tracer)
        finally:
            instrumentor.uninstrument()
        span = model_span(tracing)
    assert span.status.status_code is StatusCode.UNSET
    assert A.STREAM_ABANDONED not in span.attributes
    assert A.FINAL_CLAIMS not in span.attributes


def test_a_stream_closed_after_the_finish_reason_holds_a_whole_answer(server: ScriptedModelServer) -> None:
    with GuardedTracing() as tracing:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            stream = _openai(server, tracing.tracer, None)
            for chunk in stream:
                if chunk.choices and chunk.choices[0].finish_reason:
                    break
            stream.close()  # before the usage chunk and the end of the stream
        finally:
            instrumentor.uninstrument()
        span = model_span(tracing)
    assert A.STREAM_ABANDONED not in span.attributes
    assert tuple(span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)
    assert tuple(span.attributes[A.FINAL_CLAIMS]) == ("write",)


@pytest.mark.parametrize("application", ["reads_the_body_itself", "drops_it_unread"])
def test_a_raw_streamed_response_never_parsed_is_abandoned_only_when_unread(
    server: ScriptedModelServer, application: str
) -> None:
    with GuardedTracing() as tracing:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=[{"role": "user", "content": "Refund?"}], stream=True)
            if application == "reads_the_body_itself":
                assert any(line.startswith("data:") for line in raw.http_response.iter_lines())
            del raw
            gc.collect()
        finally:
            instrumentor.uninstrument()
        span = model_span(tracing)
    assert span.status.status_code is StatusCode.UNSET
    assert span.attributes.get(A.STREAM_ABANDONED) is (True if application == "drops_it_unread" else None)
