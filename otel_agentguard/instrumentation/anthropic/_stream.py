"""``messages.stream(...)``: the stream managers, whose request goes out on ``__enter__``.

``messages.stream`` returns a manager and sends nothing; ``with`` (or
``async with``) sends the request and hands out a ``MessageStream``. So the
model span starts in ``__enter__``, current while the request goes out (the
SDK's own span and HTTP spans nest under it).

The span must see every event however the application reads the stream:
iterating it, ``text_stream``, ``get_final_message()``, ``until_done()``. All
of these read the ``MessageStream``'s raw event stream, so that raw stream is
what gets the :class:`StreamProxy`; the application keeps the SDK's own
``MessageStream`` object. The span ends exactly once: when the raw stream is
exhausted, closed (leaving the ``with`` block closes it), fails, or is
garbage-collected (see :class:`~otel_agentguard.instrumentation._stream.StreamEnd`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import wrapt

from otel_agentguard import _internal_errors
from otel_agentguard.instrumentation._model_call import ModelCall
from otel_agentguard.instrumentation._stream import StreamEnd, StreamProxy, end_model_call
from otel_agentguard.instrumentation.anthropic._extract import MessageEvents

StartCall = Callable[[], "ModelCall | None"]


def observe_stream(stream: Any, call: ModelCall) -> Any:
    """Proxy a ``stream=True`` return (``Stream`` / ``AsyncStream``) so it ends ``call`` itself."""
    events = MessageEvents()
    return StreamProxy.for_call(stream, call, events.add, lambda: events.result)


def _observe_message_stream(message_stream: Any, call: ModelCall) -> MessageEvents:
    """Put the proxy between the ``MessageStream`` and its raw events (read lazily, on first use)."""
    events = MessageEvents()
    try:
        raw = message_stream._raw_stream
        message_stream._raw_stream = StreamProxy.for_call(raw, call, events.add, lambda: events.result)
    except Exception as exc:  # deliberate: an SDK whose MessageStream keeps its events elsewhere
        # End the span now rather than never; the application's stream is untouched.
        _internal_errors.report("anthropic.message_stream", exc)
        call.finish(None)
    return events


class MessageStreamManagerProxy(wrapt.ObjectProxy):  # type: ignore[type-arg]  # wrapt 1.x: no subscript at runtime
    """The ``MessageStreamManager`` of ``Messages.stream``, with the model span started on ``__enter__``."""

    def __init__(self, manager: Any, start: StartCall):
        super().__init__(manager)
        self._self_start = start
        self._self_call: ModelCall | None = None
        self._self_events: MessageEvents | None = None

    def __enter__(self) -> Any:
        call = self._self_start()
        if call is None:
            return self.__wrapped__.__enter__()
        try:
            with call.activated():
                message_stream = self.__wrapped__.__enter__()
        except BaseException as exc:
            call.finish(None, exc)
            raise
        self._self_call = call
        self._self_events = _observe_message_stream(message_stream, call)
        return message_stream

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        _fail(self._self_call, self._self_events, exc)  # before the manager closes the stream "cleanly"
        return self.__wrapped__.__exit__(exc_type, exc, traceback)


class AsyncMessageStreamManagerProxy(wrapt.ObjectProxy):  # type: ignore[type-arg]  # wrapt 1.x: no subscript at runtime
    """The ``AsyncMessageStreamManager`` of ``AsyncMessages.stream``, span started on ``__aenter__``."""

    def __init__(self, manager: Any, start: StartCall):
        super().__init__(manager)
        self._self_start = start
        self._self_call: ModelCall | None = None
        self._self_events: MessageEvents | None = None

    async def __aenter__(self) -> Any:
        call = self._self_start()
        if call is None:
            return await self.__wrapped__.__aenter__()
        try:
            with call.activated():
                message_stream = await self.__wrapped__.__aenter__()
        except BaseException as exc:
            call.finish(None, exc)
            raise
        self._self_call = call
        self._self_events = _observe_message_stream(message_stream, call)
        return message_stream

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        _fail(self._self_call, self._self_events, exc)
        return await self.__wrapped__.__aexit__(exc_type, exc, traceback)


def _fail(call: ModelCall | None, events: MessageEvents | None, exc: BaseException | None) -> None:
    """An exception left the ``with`` block before the stream ended: the call ends as an error.

    A no-op when the stream had already ended (``finish`` is idempotent).
    """
    if exc is not None and call is not None:
        end_model_call(call, events.result if events is not None else None, StreamEnd.FAILED, exc)
