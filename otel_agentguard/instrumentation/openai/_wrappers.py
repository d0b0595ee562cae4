"""Wrapper factories for the OpenAI SDK, one per API (sync and async twins side by side).

Inside a wrapper, in order: suppressed? call straight through; read the
request (a failure only loses the span); start or enrich the model span;
call the SDK with our span current; on an exception record it and re-raise
the SDK's own; for a stream return a proxy that ends the span itself.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import wrapt

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.config import repair_history_enabled
from otel_agentguard.history import repair_history
from otel_agentguard.instrumentation._base import InstrumentationContext
from otel_agentguard.instrumentation._model_call import ModelCall, ModelResult
from otel_agentguard.instrumentation._stream import StreamEnd, StreamProxy, end_model_call
from otel_agentguard.instrumentation.openai import _extract

PROVIDER = "openai"
_REQUEST_NUMBERS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "max_completion_tokens": "gen_ai.request.max_tokens",
    "max_output_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
}


class _Api:
    """What differs between chat completions and responses: where the prompt is, how to read results."""

    def __init__(self, prompt_key: str, read: Callable[[Any], ModelResult], accumulator: Callable[[], Any]):
        self.prompt_key = prompt_key
        self.read = read
        self.accumulator = accumulator


CHAT = _Api("messages", _extract.chat_completion, _extract.ChatChunks)
RESPONSES = _Api("input", _extract.response, _extract.ResponseEvents)


def _start(context: InstrumentationContext, kwargs: dict[str, Any], api: _Api, repaired: int = 0) -> ModelCall | None:
    attributes: dict[str, Any] = {A.HISTORY_REPAIRED: repaired} if repaired else {}
    if not kwargs.keys().isdisjoint(_REQUEST_NUMBERS):  # one test when the call sets none of them
        for key, name in _REQUEST_NUMBERS.items():
            value = kwargs.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attributes[name] = value
    model = kwargs.get("model")
    return ModelCall.start(
        context.tracer,
        guard=context.guard,
        provider=PROVIDER,
        request_model=model if isinstance(model, str) else None,
        attributes=attributes,
        input_messages=kwargs.get(api.prompt_key),
    )


def _guard_before(context: InstrumentationContext, kwargs: dict[str, Any], api: _Api) -> tuple[dict[str, Any], int]:
    """Before a model call: repair the history when asked to (``repair_history=True``),
    then, in enforce mode, stop at this cut point (raises AgentStopped) or add the
    remaining-budget note to a copy of the prompt when the policy asks for it."""
    repaired = 0
    prompt = kwargs.get(api.prompt_key)
    if api is CHAT and repair_history_enabled(context.options) and isinstance(prompt, list):
        try:
            fixed, report = repair_history(prompt, "openai")
        except Exception as exc:  # deliberate: an unrepairable history goes as the user sent it
            _internal_errors.report("openai.repair_history", exc)
        else:
            if report.changed:
                kwargs, prompt, repaired = {**kwargs, api.prompt_key: fixed}, fixed, report.total
    note = context.guard.before_model_call(history=prompt)
    if note is None:
        return kwargs, repaired
    if isinstance(prompt, list):
        return {**kwargs, api.prompt_key: [*prompt, {"role": "system", "content": note}]}, repaired
    if api is RESPONSES and isinstance(prompt, str):
        return {**kwargs, "input": [{"role": "user", "content": prompt}, {"role": "system", "content": note}]}, repaired
    return kwargs, repaired


def _result_of(returned: Any, api: _Api) -> ModelResult | None:
    """The ModelResult of a plain (non-stream) return, also through ``with_raw_response``."""
    if hasattr(returned, "choices") or hasattr(returned, "output"):
        return api.read(returned)  # the usual case: the parsed response
    if not _is_legacy_response(returned):
        return None  # with_streaming_response: the body is not read yet, and is not ours to read
    try:
        returned = returned.parse()  # cached: the user's own parse() gets the same object
    except Exception:  # deliberate: the user sees the problem when they parse
        return None
    return api.read(returned)


def _is_legacy_response(returned: Any) -> bool:
    try:
        from openai._legacy_response import LegacyAPIResponse
    except ImportError:  # pragma: no cover - an SDK without it has no with_raw_response either
        return False
    return isinstance(returned, LegacyAPIResponse)


def _stream_of(returned: Any, call: ModelCall, api: _Api) -> Any:
    if callable(getattr(returned, "parse", None)):
        return _RawStream(returned, call, api)  # with_raw_response / with_streaming_response
    accumulator = api.accumulator()
    return StreamProxy.for_call(returned, call, accumulator.add, lambda: accumulator.result)


class _RawStream(wrapt.ObjectProxy):  # type: ignore[type-arg]  # wrapt 1.x proxies take no subscript at runtime
    """A streamed call through ``with_raw_response`` (or ``with_streaming_response``): the
    stream is what ``.parse()`` returns, so that is what is proxied and ends the call. Parsed
    by whoever calls ``.parse()`` first: the application, or another instrumentation outside us."""

    def __init__(self, raw: Any, call: ModelCall, api: _Api):
        super().__init__(raw)
        self._self_call = call
        self._self_api = api
        self._self_parsed: Any = None

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        if self._self_parsed is not None:
            return self._self_parsed
        parsed = self.__wrapped__.parse(*args, **kwargs)
        if inspect.isawaitable(parsed):  # the async API response parses with await
            return self._self_parse_later(parsed)
        self._self_parsed = _stream_of(parsed, self._self_call, self._self_api)
        return self._self_parsed

    async def _self_parse_later(self, parsing: Any) -> Any:
        if self._self_parsed is None:
            self._self_parsed = _stream_of(await parsing, self._self_call, self._self_api)
        return self._self_parsed

    def __del__(self) -> None:
        if self._self_parsed is None:  # never parsed: nothing more to learn about this call
            # A body the application read (or closed) itself was not abandoned.
            read = getattr(getattr(self.__wrapped__, "http_response", None), "is_closed", None) is True
            end = StreamEnd.CLOSED_EARLY if read else StreamEnd.ABANDONED
            end_model_call(self._self_call, None, end, collected=True)


def create_wrapper(api: _Api) -> Callable[[InstrumentationContext], Callable[..., Any]]:
    def factory(context: InstrumentationContext) -> Callable[..., Any]:
        def create(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
            kwargs, repaired = _guard_before(context, kwargs, api)
            call = _start(context, kwargs, api, repaired)
            if call is None:
                return wrapped(*args, **kwargs)
            returned = call.run(wrapped, args, kwargs)
            returned = _finish(call, returned, kwargs, api)
            if kwargs.get("stream") is not True:
                call.after()
            return returned

        return create

    return factory


def async_create_wrapper(api: _Api) -> Callable[[InstrumentationContext], Callable[..., Any]]:
    def factory(context: InstrumentationContext) -> Callable[..., Any]:
        async def create(
            wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
        ) -> Any:
            kwargs, repaired = _guard_before(context, kwargs, api)
            call = _start(context, kwargs, api, repaired)
            if call is None:
                return await wrapped(*args, **kwargs)
            returned = await call.run_async(wrapped, args, kwargs)
            returned = _finish(call, returned, kwargs, api)
            if kwargs.get("stream") is not True:
                call.after()
            return returned

        return create

    return factory


def _finish(call: ModelCall, returned: Any, kwargs: dict[str, Any], api: _Api) -> Any:
    if kwargs.get("stream") is True:
        try:
            return _stream_of(returned, call, api)
        except Exception as exc:  # deliberate: give the user the raw stream rather than nothing
            _internal_errors.report("openai.stream", exc)
            call.finish(None)
            return returned
    try:
        result = _result_of(returned, api)
    except Exception as exc:  # deliberate: the span loses its response attributes, nothing else
        _internal_errors.report("openai.response", exc)
        result = None
    call.finish(result)
    return returned


