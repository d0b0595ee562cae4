"""Wrapper factories for the Anthropic SDK, named after what they wrap (sync and async twins side by side).

Inside a wrapper, in order: suppressed? call straight through; read the
request (a failure only loses the span); start or enrich the model span;
call the SDK with our span current; on an exception end the span as an
error and re-raise the SDK's own exception; for a stream return a proxy that
ends the span itself. What the SDK returns is returned as it is, or behind a
transparent proxy.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any

from otel_agentguard import _internal_errors
from otel_agentguard.config import capture_content, instrumentation_suppressed
from otel_agentguard.instrumentation._base import InstrumentationContext
from otel_agentguard.instrumentation._model_call import ModelCall, ModelResult
from otel_agentguard.instrumentation.anthropic import _extract
from otel_agentguard.instrumentation.anthropic._stream import (
    AsyncMessageStreamManagerProxy,
    MessageStreamManagerProxy,
    observe_stream,
)

logger = logging.getLogger(__name__)

PROVIDER = "anthropic"

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


def _start(context: InstrumentationContext, kwargs: dict[str, Any]) -> ModelCall | None:
    """The model call of one request; None: call the SDK untouched (suppressed, or unreadable)."""
    if instrumentation_suppressed():
        return None
    try:
        model = kwargs.get("model")
        attributes = _extract.request_attributes(kwargs)
        messages = None
        if capture_content():
            messages = _extract.input_messages(kwargs.get("messages"))
            system = _extract.system_instructions(kwargs.get("system"))
            if system:
                attributes["gen_ai.system_instructions"] = system
    except Exception as exc:  # deliberate: no span for this call, the call itself goes on
        _internal_errors.report("anthropic.request", exc)
        return None
    return ModelCall.start(
        context.tracer,
        guard=context.guard,
        provider=PROVIDER,
        request_model=model if isinstance(model, str) else None,
        attributes=attributes,
        input_messages=messages,
    )


def _is_stream(returned: Any) -> bool:
    # A ``Stream`` / ``AsyncStream``; with_raw_response(stream=True) returns an unread response instead.
    return hasattr(type(returned), "__next__") or hasattr(type(returned), "__anext__")


def _read_raw_response(returned: Any) -> bool:
    """A with_raw_response return whose body is already in memory, so parse() reads nothing new.

    with_streaming_response's body is not read yet, and is not ours to read.
    """
    http_response = getattr(returned, "http_response", None)
    return bool(getattr(http_response, "is_closed", False)) and callable(getattr(returned, "parse", None))


def _streamed(call: ModelCall, returned: Any) -> Any:
    if not _is_stream(returned):
        call.finish(None)
        return returned
    try:
        return observe_stream(returned, call)
    except Exception as exc:  # deliberate: the user gets the SDK's stream; the span ends now
        _internal_errors.report("anthropic.stream", exc)
        call.finish(None)
        return returned


def _result(message: Any) -> ModelResult | None:
    try:
        return _extract.message_result(message) if message is not None else None
    except Exception as exc:  # deliberate: the span loses its response attributes, nothing else
        _internal_errors.report("anthropic.response", exc)
        return None


def _message(returned: Any) -> Any:
    """The ``Message`` of a plain return, also through ``with_raw_response``."""
    if _extract.is_message(returned):
        return returned
    if _read_raw_response(returned):
        try:
            return returned.parse()  # cached by type: the user's own parse() gets this very object
        except Exception:  # deliberate: the user meets the problem when they parse
            return None
    return None


async def _async_message(returned: Any) -> Any:
    if _extract.is_message(returned):
        return returned
    if _read_raw_response(returned):
        try:
            parsed = returned.parse()
            return await parsed if inspect.isawaitable(parsed) else parsed
        except Exception:  # deliberate
            return None
    return None


# --- Messages.create / AsyncMessages.create --------------------------------------------------------


def _guard_before(context: InstrumentationContext, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Enforce mode, at the cut point before a model call: stop (raises AgentStopped), or add
    the remaining-budget note to a copy of the system prompt when the policy asks for it."""
    note = context.guard.before_model_call(history=kwargs.get("messages"))
    if note is None:
        return kwargs
    system = kwargs.get("system")
    if isinstance(system, str) and system:
        return {**kwargs, "system": f"{system}\n\n{note}"}
    if isinstance(system, list):
        return {**kwargs, "system": [*system, {"type": "text", "text": note}]}
    return {**kwargs, "system": note}


def messages_create(context: InstrumentationContext) -> Wrapper:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        kwargs = _guard_before(context, kwargs)
        call = _start(context, kwargs)
        if call is None:
            return wrapped(*args, **kwargs)
        returned = call.run(wrapped, args, kwargs)
        if kwargs.get("stream") is True:
            return _streamed(call, returned)
        call.finish(_result(_message(returned)))
        call.after()  # enforce mode: a refused answer (fake completion) is not returned
        return returned

    return wrapper


def async_messages_create(context: InstrumentationContext) -> Wrapper:
    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        kwargs = _guard_before(context, kwargs)
        call = _start(context, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        returned = await call.run_async(wrapped, args, kwargs)
        if kwargs.get("stream") is True:
            return _streamed(call, returned)
        call.finish(_result(await _async_message(returned)))
        call.after()
        return returned

    return wrapper


# --- Messages.stream / AsyncMessages.stream --------------------------------------------------------


def messages_stream(context: InstrumentationContext) -> Wrapper:
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        kwargs = _guard_before(context, kwargs)  # the cut point: before the manager that will send the request
        manager = wrapped(*args, **kwargs)  # sends nothing: the request goes out on __enter__
        if instrumentation_suppressed():
            return manager
        try:
            return MessageStreamManagerProxy(manager, functools.partial(_start, context, kwargs))
        except Exception as exc:  # deliberate: the user gets the SDK's manager, untraced
            _internal_errors.report("anthropic.stream_manager", exc)
            return manager

    return wrapper


def async_messages_stream(context: InstrumentationContext) -> Wrapper:
    # AsyncMessages.stream is a plain function too: it returns a manager for ``async with``.
    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        kwargs = _guard_before(context, kwargs)
        manager = wrapped(*args, **kwargs)
        if instrumentation_suppressed():
            return manager
        try:
            return AsyncMessageStreamManagerProxy(manager, functools.partial(_start, context, kwargs))
        except Exception as exc:  # deliberate
            _internal_errors.report("anthropic.stream_manager", exc)
            return manager

    return wrapper
