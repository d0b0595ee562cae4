"""Streams of model calls: how a stream ended, and a proxy that reports each chunk and the end.

How a stream ended is decided here, once, for every framework (:class:`StreamEnd`):

* **completed**: read to its end;
* **closed early**: the application closed it before its end (``close()``, ``aclose()``,
  leaving its ``with`` block, a generator's ``GeneratorExit``; a ``.stream()`` helper that
  closes the HTTP response behind the stream, learnt when the stream is collected). Not an error;
* **abandoned**: garbage-collected before its end, never closed (``break`` out of a loop
  over a stream that nobody closes, a stream dropped half read). Not an error either, but
  marked ``agentguard.stream.abandoned`` on the model span so it never looks completed;
* **failed**: an exception ended it (raised while reading, or leaving its ``with`` block).

Whatever the end, the call is judged on what the application received: a stream that
stopped before the model's finish reason arrived holds a partial answer, which is no final
answer (no claim check, and it does not complete a session); one closed after the finish
reason holds the whole answer and is judged as one; a failed one is an error.

The provider's stream object is wrapped, not replaced: every attribute and method the
application uses still works, and the application's own errors pass through untouched.
Each read runs with the model span current (``activate``), so spans the transport makes
nest under it, and the span current before the read is current again after it.

An optional ``check`` runs after each chunk and may raise
:class:`~otel_agentguard.AgentStopped` (enforce mode, an answer that repeats
itself): the provider's stream is then closed and the chunk is not delivered.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import wrapt

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.errors import AgentStopped
from otel_agentguard.instrumentation._model_call import ModelCall, ModelResult


class StreamEnd(enum.Enum):
    """How a stream ended (see the module docstring); only ``FAILED`` is an error."""

    COMPLETED = "completed"
    CLOSED_EARLY = "closed_early"
    ABANDONED = "abandoned"
    FAILED = "failed"


def ended_by(error: BaseException) -> StreamEnd:
    """The end of a stream that ``error`` left before its end: a generator closed is closed early."""
    return StreamEnd.CLOSED_EARLY if isinstance(error, GeneratorExit) else StreamEnd.FAILED


# (end, the exception of a failed stream, whether it ended at garbage collection)
OnEnd = Callable[[StreamEnd, "BaseException | None", bool], None]


def end_model_call(call: ModelCall, result: ModelResult | None, end: StreamEnd,
                   error: BaseException | None = None, *, collected: bool = False) -> None:
    """End the model call of a stream as ``end`` classifies it.

    ``collected``: the end was noticed at garbage collection, so an enclosing span we only
    enriched is ended too (see :meth:`ModelCall.finish`).
    """
    if end is StreamEnd.ABANDONED:
        try:
            if not call.done and call.span.is_recording():
                call.span.set_attribute(A.STREAM_ABANDONED, True)
        except Exception as exc:  # deliberate: the mark is lost, the call still ends
            _internal_errors.report("stream.abandoned", exc)
    call.finish(result, error if end is StreamEnd.FAILED else None, collected=collected)


def _closed_by_someone(stream: Any) -> bool:
    """The stream's HTTP response was closed behind the proxy (the SDKs' ``.stream()`` helpers
    close the response, not the stream they read)."""
    try:
        return getattr(getattr(stream, "response", None), "is_closed", None) is True
    except Exception:  # deliberate: an object we cannot read was not closed by anyone we know
        return False


class StreamProxy(wrapt.ObjectProxy):  # type: ignore[type-arg]  # wrapt 1.x proxies take no subscript at runtime
    """A provider stream that reports each chunk and how it ended, exactly once.

    Args:
        on_chunk: called with each chunk read (its failures are the guard's loss only).
        on_done: called once with the exception that failed the stream, or None; for
            callers that need no more than that. ``on_end``, when given, replaces it.
        check: run after each chunk; may raise AgentStopped.
        on_exhausted: run once the stream was read to its end (may raise AgentStopped).
        on_end: called once with the :class:`StreamEnd`, the exception of a failed stream,
            and whether the end was noticed at garbage collection.
        activate: a context manager factory current during each read.
    """

    def __init__(
        self,
        stream: Any,
        on_chunk: Callable[[Any], None],
        on_done: Callable[[BaseException | None], None] | None = None,
        *,
        check: Callable[[], None] | None = None,
        on_exhausted: Callable[[], None] | None = None,
        on_end: OnEnd | None = None,
        activate: Callable[[], AbstractContextManager[None]] | None = None,
    ):
        super().__init__(stream)
        self._self_on_chunk = on_chunk
        self._self_on_done = on_done
        self._self_check = check
        # Enforce mode: runs once the whole answer was read and judged, and may raise
        # AgentStopped (a refused answer) in place of the end of the stream.
        self._self_on_exhausted = on_exhausted
        self._self_on_end = on_end
        self._self_activate = activate
        self._self_done = False
        self._self_manager: Any = None  # a stream manager whose __enter__ gave us the stream

    @classmethod
    def for_call(cls, stream: Any, call: ModelCall, on_chunk: Callable[[Any], None],
                 result_of: Callable[[], ModelResult]) -> StreamProxy:
        """The stream of model call ``call``: reads run with its span current, and the call ends
        with the stream, as classified; the repetition check runs after each chunk and, in
        enforce mode, the guard has its word once the whole answer was read."""
        return cls(
            stream, on_chunk, check=call.repetition_check(result_of), on_exhausted=call.after,
            on_end=lambda end, error, collected: end_model_call(call, result_of(), end, error, collected=collected),
            activate=call.activated,
        )

    def _self_reading(self) -> AbstractContextManager[None]:
        return self._self_activate() if self._self_activate is not None else contextlib.nullcontext()

    def _self_chunk(self, chunk: Any) -> None:
        try:
            self._self_on_chunk(chunk)
        except Exception as exc:  # deliberate: a chunk we cannot read is the guard's loss only
            _internal_errors.report("stream.chunk", exc)

    def _self_exhausted(self) -> None:
        first = not self._self_done
        self._self_end(StreamEnd.COMPLETED)
        if first and self._self_on_exhausted is not None:
            self._self_on_exhausted()

    def _self_stop_due(self) -> AgentStopped | None:
        """Run the check; the stop it raised, if any (anything else is the guard's loss only)."""
        try:
            self._self_check()  # type: ignore[misc]
        except AgentStopped as stopped:
            self._self_end(StreamEnd.CLOSED_EARLY)  # the check already ended the call with what it saw
            return stopped
        except Exception as exc:  # deliberate
            _internal_errors.report("stream.check", exc)
        return None

    def _self_end(self, end: StreamEnd, error: BaseException | None = None, collected: bool = False) -> None:
        if self._self_done:
            return
        self._self_done = True
        try:
            if self._self_on_end is not None:
                self._self_on_end(end, error, collected)
            elif self._self_on_done is not None:
                self._self_on_done(error if end is StreamEnd.FAILED else None)
        except Exception as exc:  # deliberate
            _internal_errors.report("stream.done", exc)

    def _self_left(self, exc: BaseException | None) -> None:
        """Closed, or left its ``with`` block: closed early, unless an exception left it."""
        self._self_end(StreamEnd.CLOSED_EARLY if exc is None else StreamEnd.FAILED, exc)

    # --- sync ------------------------------------------------------------------------
    def __iter__(self) -> StreamProxy:
        return self

    def __next__(self) -> Any:
        try:
            with self._self_reading():
                chunk = next(self.__wrapped__)
        except StopIteration:
            self._self_exhausted()
            raise
        except BaseException as exc:
            self._self_end(ended_by(exc), exc)
            raise
        self._self_chunk(chunk)
        if self._self_check is not None:
            stopped = self._self_stop_due()
            if stopped is not None:
                try:
                    self.__wrapped__.close()
                except Exception as exc:  # deliberate: the stop matters more than a clean close
                    _internal_errors.report("stream.close", exc)
                raise stopped
        return chunk

    def __enter__(self) -> StreamProxy:
        manager = self.__wrapped__
        entered = manager.__enter__()
        if entered is not manager:
            # A stream manager (anthropic's messages.stream) hands out the stream: proxy
            # the stream from here on, and leave the block through the manager.
            self._self_manager = manager
            self.__wrapped__ = entered
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        try:
            return (self._self_manager or self.__wrapped__).__exit__(exc_type, exc, traceback)
        finally:
            self._self_left(exc)

    def close(self) -> Any:
        try:
            result = self.__wrapped__.close()
        except BaseException as exc:
            self._self_left(exc)
            raise
        if inspect.isawaitable(result):
            return self._self_after(result)
        self._self_left(None)
        return result

    async def _self_after(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        finally:
            self._self_left(None)

    # --- async -----------------------------------------------------------------------
    def __aiter__(self) -> StreamProxy:
        return self

    async def __anext__(self) -> Any:
        try:
            with self._self_reading():
                chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_exhausted()
            raise
        except BaseException as exc:
            self._self_end(ended_by(exc), exc)
            raise
        self._self_chunk(chunk)
        if self._self_check is not None:
            stopped = self._self_stop_due()
            if stopped is not None:
                try:
                    closing = getattr(self.__wrapped__, "aclose", None) or self.__wrapped__.close
                    result = closing()
                    if inspect.isawaitable(result):
                        await result
                except Exception as exc:  # deliberate
                    _internal_errors.report("stream.close", exc)
                raise stopped
        return chunk

    async def __aenter__(self) -> StreamProxy:
        manager = self.__wrapped__
        entered = await manager.__aenter__()
        if entered is not manager:
            self._self_manager = manager
            self.__wrapped__ = entered
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> Any:
        try:
            return await (self._self_manager or self.__wrapped__).__aexit__(exc_type, exc, traceback)
        finally:
            self._self_left(exc)

    async def aclose(self) -> Any:
        try:
            closing = getattr(self.__wrapped__, "aclose", None) or self.__wrapped__.close  # anthropic's: close()
            result = closing()
            return await result if inspect.isawaitable(result) else result
        finally:
            self._self_left(None)

    def __del__(self) -> None:
        # Collected before it was exhausted or closed through us: abandoned, unless its
        # response was closed behind us (then it was closed early, and we only learn it now).
        if self._self_done:
            return
        closed = _closed_by_someone(self.__wrapped__)
        self._self_end(StreamEnd.CLOSED_EARLY if closed else StreamEnd.ABANDONED, None, True)
