"""Every OpenAI call form, alone and next to openai-v2 or OpenLLMetry in either wrap order:
exactly one model span per call, and the current span after the call is the one before it."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openai.resources.chat.completions.completions import AsyncCompletions, Completions
from openai.resources.responses.responses import AsyncResponses, Responses
from opentelemetry import trace

from otel_agentguard import attributes as A
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

MESSAGES = [{"role": "user", "content": "Where is my parcel?"}]
ANSWER = Turn.answer("It is on its way.", input_tokens=50, output_tokens=7)


# --- the other instrumentations -----------------------------------------------------------------
def _openai_v2(latest: bool) -> Callable[[], Any]:
    def make() -> Any:
        module = pytest.importorskip("opentelemetry.instrumentation.openai_v2")
        from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability

        # openai-v2 reads its semconv mode once per process: reset it as its own tests do.
        _OpenTelemetrySemanticConventionStability._initialized = False
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental" if latest else ""
        return module.OpenAIInstrumentor()

    return make


def _openllmetry() -> Any:
    module = pytest.importorskip("opentelemetry.instrumentation.openai")
    return module.OpenAIInstrumentor()


COMPANIONS: dict[str, Callable[[], Any] | None] = {
    "alone": None,
    "openai-v2": _openai_v2(latest=False),
    "openai-v2-latest": _openai_v2(latest=True),
    "openllmetry": _openllmetry,
}


@pytest.fixture(params=["ours-inside", "ours-outside"])
def order(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=list(COMPANIONS))
def companion(request: pytest.FixtureRequest, order: str, monkeypatch: pytest.MonkeyPatch) -> str:
    if COMPANIONS[request.param] is None and order == "ours-outside":
        pytest.skip("no other instrumentation: one order only")
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    return request.param


PATCHED_CLASSES = (Completions, AsyncCompletions, Responses, AsyncResponses)


@contextmanager
def restored_sdk() -> Iterator[None]:
    """OpenLLMetry 0.62's uninstrument leaves its wrappers on the SDK (bound to a provider that
    is shut down): put the SDK's methods back, so that each run starts from the plain SDK."""
    saved = [(cls, dict(vars(cls))) for cls in PATCHED_CLASSES]
    try:
        yield
    finally:
        for cls, attributes in saved:
            for name, value in attributes.items():
                if vars(cls).get(name) is not value:
                    setattr(cls, name, value)


@contextmanager
def instrumented(companion: str, order: str | None) -> Iterator[GuardedTracing]:
    """``order`` None: the other instrumentation alone, without ours."""
    make = COMPANIONS[companion]
    with restored_sdk(), GuardedTracing() as tracing:
        instrumentors = [] if order is None else [OpenAIInstrumentor()]
        if make is not None:
            instrumentors.append(make())
        # wrapt stacks wrappers: the instrumentor that patches last runs outside.
        if order == "ours-outside":
            instrumentors.reverse()
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            yield tracing
        finally:
            for instrumentor in reversed(instrumentors):
                instrumentor.uninstrument()


def model_spans(tracing: GuardedTracing) -> list[Any]:
    return [s for s in tracing.spans()
            if (s.attributes or {}).get(A.GEN_AI_OPERATION_NAME) in A.INFERENCE_OPERATIONS]


# --- the call forms ------------------------------------------------------------------------------
# Each takes a client and returns after the call is over (consumed, closed or collected).
def chat_create(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES)


def chat_stream_consumed(client: openai.OpenAI) -> None:
    for _ in client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
        pass


def chat_stream_partly_then_closed(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    next(iter(stream))
    stream.close()


def chat_stream_partly_then_collected(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    next(iter(stream))
    del stream
    gc.collect()


def chat_stream_unread_then_collected(client: openai.OpenAI) -> None:
    client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    gc.collect()


def chat_stream_in_with_block(client: openai.OpenAI) -> None:
    with client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True) as stream:
        next(iter(stream))


def chat_raw(client: openai.OpenAI) -> None:
    client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    gc.collect()


def chat_raw_parsed(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content == ANSWER.text


def chat_raw_stream_parsed(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES, stream=True)
    for _ in raw.parse():
        pass


def chat_streaming_response(client: openai.OpenAI) -> None:
    with client.chat.completions.with_streaming_response.create(model="gpt-4o", messages=MESSAGES) as response:
        assert response.parse().choices[0].message.content == ANSWER.text


def chat_stream_helper(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream:
        assert stream.get_final_completion().choices[0].message.content == ANSWER.text


def chat_stream_helper_left_early(client: openai.OpenAI) -> None:
    with client.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream:
        next(iter(stream))
    gc.collect()


def responses_create(client: openai.OpenAI) -> None:
    client.responses.create(model="gpt-4o", input="Where is my parcel?")


def responses_stream_consumed(client: openai.OpenAI) -> None:
    for _ in client.responses.create(model="gpt-4o", input="Where is my parcel?", stream=True):
        pass


def responses_stream_partly_then_closed(client: openai.OpenAI) -> None:
    stream = client.responses.create(model="gpt-4o", input="Where is my parcel?", stream=True)
    next(iter(stream))
    stream.close()


def responses_raw_parsed(client: openai.OpenAI) -> None:
    client.responses.with_raw_response.create(model="gpt-4o", input="Where is my parcel?").parse()


def responses_stream_helper(client: openai.OpenAI) -> None:
    with client.responses.stream(model="gpt-4o", input="Where is my parcel?") as stream:
        stream.until_done()


SYNC_FORMS = [
    chat_create, chat_stream_consumed, chat_stream_partly_then_closed, chat_stream_partly_then_collected,
    chat_stream_unread_then_collected, chat_stream_in_with_block, chat_raw, chat_raw_parsed,
    chat_raw_stream_parsed, chat_streaming_response, chat_stream_helper, chat_stream_helper_left_early,
    responses_create, responses_stream_consumed, responses_stream_partly_then_closed, responses_raw_parsed,
    responses_stream_helper,
]


async def achat_create(client: openai.AsyncOpenAI) -> None:
    await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)


async def achat_stream_consumed(client: openai.AsyncOpenAI) -> None:
    async for _ in await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
        pass


async def achat_stream_partly_then_closed(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    await stream.__aiter__().__anext__()
    await stream.close()


async def achat_stream_partly_then_collected(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    await stream.__aiter__().__anext__()
    del stream
    gc.collect()


async def achat_stream_in_with_block(client: openai.AsyncOpenAI) -> None:
    async with await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True) as stream:
        await stream.__aiter__().__anext__()


async def achat_raw(client: openai.AsyncOpenAI) -> None:
    await client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    gc.collect()


async def achat_raw_parsed(client: openai.AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
    assert raw.parse().choices[0].message.content == ANSWER.text


async def achat_raw_stream_parsed(client: openai.AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES, stream=True)
    async for _ in raw.parse():
        pass


async def achat_stream_helper(client: openai.AsyncOpenAI) -> None:
    async with client.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream:
        completion = await stream.get_final_completion()
    assert completion.choices[0].message.content == ANSWER.text


async def aresponses_create(client: openai.AsyncOpenAI) -> None:
    await client.responses.create(model="gpt-4o", input="Where is my parcel?")


async def aresponses_stream_consumed(client: openai.AsyncOpenAI) -> None:
    async for _ in await client.responses.create(model="gpt-4o", input="Where is my parcel?", stream=True):
        pass


async def aresponses_stream_helper(client: openai.AsyncOpenAI) -> None:
    async with client.responses.stream(model="gpt-4o", input="Where is my parcel?") as stream:
        await stream.until_done()


ASYNC_FORMS = [
    achat_create, achat_stream_consumed, achat_stream_partly_then_closed, achat_stream_partly_then_collected,
    achat_stream_in_with_block, achat_raw, achat_raw_parsed, achat_raw_stream_parsed, achat_stream_helper,
    aresponses_create, aresponses_stream_consumed, aresponses_stream_helper,
]


def _name(form: Callable[..., Any]) -> str:
    return form.__name__


@dataclass
class Outcome:
    model_spans: int
    judged: int  # model spans that carry what the judge reads (ours, or the other one enriched)
    context_restored: bool


def run_sync(companion: str, order: str | None, form: Callable[[openai.OpenAI], None]) -> Outcome:
    def run(tracing: GuardedTracing, client: openai.OpenAI) -> bool:
        with tracing.tracer.start_as_current_span("caller") as caller:
            form(client)
            inside = trace.get_current_span() is caller
        form(client)  # and with no span around it
        return inside and trace.get_current_span() is trace.INVALID_SPAN

    with instrumented(companion, order) as tracing, ScriptedModelServer(turns(ANSWER)) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        # A context leaked by one run must not leak into the next: each runs in a copy.
        restored = contextvars.copy_context().run(run, tracing, client)
        gc.collect()
        spans = model_spans(tracing)
        return Outcome(len(spans), sum(A.RESPONSE_TOOL_CALLS in s.attributes for s in spans), restored)


def run_async(companion: str, order: str | None, form: Callable[[openai.AsyncOpenAI], Any]) -> Outcome:
    async def run(tracing: GuardedTracing, client: openai.AsyncOpenAI) -> bool:
        with tracing.tracer.start_as_current_span("caller") as caller:
            await form(client)
            inside = trace.get_current_span() is caller
        await form(client)
        return inside and trace.get_current_span() is trace.INVALID_SPAN

    with instrumented(companion, order) as tracing, ScriptedModelServer(turns(ANSWER)) as server:
        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        restored = asyncio.run(run(tracing, client))  # a task runs in a copy of the context
        gc.collect()
        spans = model_spans(tracing)
        return Outcome(len(spans), sum(A.RESPONSE_TOOL_CALLS in s.attributes for s in spans), restored)


# with_streaming_response hands the unread body to the application: the span ends without
# the response's attributes (one span still, and the model step still counts).
BODY_NOT_OURS_TO_READ = {"chat_streaming_response"}


# The other instrumentation's stream wrapper ends its span before the SDK stream inside it tells us
# the call is over: openai-v2's when its with-block is left (it never closes the stream inside),
# OpenLLMetry's in its own finaliser, which runs before ours. The span is one, and counted as the
# model step, but carries only what that instrumentation wrote.
ENDED_UNSEEN = {
    *((companion, form) for companion in ("openai-v2", "openai-v2-latest")
      for form in ("chat_stream_in_with_block", "achat_stream_in_with_block")),
    *(("openllmetry", form) for form in ("chat_stream_in_with_block", "chat_stream_partly_then_collected", "chat_stream_unread_then_collected",
                                         "chat_stream_helper_left_early", "achat_stream_partly_then_collected",
                                         "chat_raw_stream_parsed", "achat_raw_stream_parsed")),
}
# OpenLLMetry 0.62 opens its Responses API span only after the call has returned: no span is
# open for ours to enrich, so each such call has two model spans (judged as one step: see the
# last test of this module).
SPAN_OPENED_AFTER_THE_CALL = {("openllmetry", form) for form in (
    "responses_create", "responses_stream_consumed", "responses_stream_partly_then_closed", "responses_raw_parsed",
    "responses_stream_helper", "aresponses_create", "aresponses_stream_consumed", "aresponses_stream_helper")}


def check(outcome: Outcome, companion: str, baseline: Callable[[], Outcome], form: Callable[..., Any]) -> None:
    if (companion, form.__name__) in SPAN_OPENED_AFTER_THE_CALL:
        assert outcome.model_spans == 4  # a known limitation: say so if it ever changes
        return
    assert outcome.model_spans == 2  # one per call
    unread = form.__name__ in BODY_NOT_OURS_TO_READ or (companion, form.__name__) in ENDED_UNSEEN
    assert outcome.judged == (0 if unread else 2)
    if not outcome.context_restored:
        # Only where the other instrumentation alone leaves its span current too (openai-v2's
        # util-genai keeps its span attached while a stream is open): never because of us.
        assert COMPANIONS[companion] is not None and not baseline().context_restored


def outcome_or_skip(companion: str, run: Callable[[str | None], Outcome], order: str) -> Outcome:
    try:
        return run(order)
    except Exception as exc:
        if COMPANIONS[companion] is None:
            raise
        try:
            run(None)
        except type(exc):
            pytest.skip(f"{companion} alone fails this call form too: {type(exc).__name__}: {exc}")
        raise


@pytest.mark.parametrize("form", SYNC_FORMS, ids=_name)
def test_sync_call_makes_one_span_and_restores_the_context(companion, order, form):
    def run(chosen: str | None) -> Outcome:
        return run_sync(companion, chosen, form)

    check(outcome_or_skip(companion, run, order), companion, lambda: run(None), form)


@pytest.mark.parametrize("form", ASYNC_FORMS, ids=_name)
def test_async_call_makes_one_span_and_restores_the_context(companion, order, form):
    def run(chosen: str | None) -> Outcome:
        return run_async(companion, chosen, form)

    check(outcome_or_skip(companion, run, order), companion, lambda: run(None), form)


# --- one call, two spans, one step -------------------------------------------------------------
@pytest.mark.parametrize("call", [responses_create, responses_stream_consumed], ids=_name)
def test_a_call_the_other_instrumentation_traced_after_the_fact_is_one_model_step(order, call, tmp_path):
    """OpenLLMetry opens its Responses API span after the call returned, beside ours: two spans
    report the same response. The judge counts the call once, live and on replay."""
    from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
    from otel_agentguard.replay import replay_files

    script = turns(Turn.answer("Looking.", input_tokens=50, output_tokens=7), ANSWER)
    with instrumented("openllmetry", order) as tracing, ScriptedModelServer(script) as server:
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        with tracing.session("twice") as session:
            call(client)
            call(client)
        spans = tracing.spans()

    reported = [s.attributes.get(A.GEN_AI_RESPONSE_ID) for s in spans if s in model_spans_of(spans)]
    assert len(reported) == 4 and len(set(reported)) == 2  # each response reported by two spans
    assert session.verdict is not None
    assert session.verdict.model_calls == 2
    assert session.verdict.tokens == 2 * (50 + 7)

    exporter = OTLPJsonLinesSpanExporter(str(tmp_path / "trace.jsonl"))
    exporter.export(list(spans))
    exporter.shutdown()
    ((_, replayed),) = replay_files([tmp_path / "trace.jsonl"], tracing.processor.policy)
    assert (replayed.model_calls, replayed.tokens, replayed.stop_reason) == (
        2, session.verdict.tokens, session.verdict.stop_reason)


def model_spans_of(spans: Any) -> list[Any]:
    return [s for s in spans if (s.attributes or {}).get(A.GEN_AI_OPERATION_NAME) in A.INFERENCE_OPERATIONS]
