"""A stream proxy that reports each chunk and ends its model call exactly once.

The provider's stream object is wrapped, not replaced: every attribute and
method the application uses still works. The call ends on exhaustion, on an
error while iterating, on ``close()``, on leaving a ``with`` block, or when the
stream is garbage-collected unfinished (``on_abandoned``, when given),
whichever comes first, and the application's own errors pass through untouched.

An optional ``check`` runs after each chunk and may raise
:class:`~otel_agentguard.AgentStopped` (enforce mode, an answer that repeats
itself): the provider's stream is then closed and the chunk is not delivered.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import wrapt

from otel_agentguard import _internal_errors
from otel_agentguard.errors import AgentStopped


class StreamProxy(wrapt.ObjectProxy):  # type: ignore[type-arg]  # wrapt 1.x proxies take no subscript at runtime
    def __init__(
        self,
        stream: Any,
        on_chunk: Callable[[Any], None],
        on_done: Callable[[BaseException | None], None],
        check: Callable[[], None] | None = None,
        on_abandoned: Callable[[], None] | None = None,
        on_exhausted: Callable[[], None] | None = None,
    ):
        super().__init__(stream)
        self._self_on_chunk = on_chunk
        self._self_on_done = on_done
        self._self_check = check
        self._self_on_abandoned = on_abandoned
        # Enforce mode: runs once the whole answer was read and judged, and may raise
        # AgentStopped (a refused answer) in place of the end of the stream.
        self._self_on_exhausted = on_exhausted
        self._self_done = False
        self._self_manager: Any = None  # a stream manager whose __enter__ gave us the stream

    def _self_chunk(self, chunk: Any) -> None:
        try:
            self._self_on_chunk(chunk)
        except Exception as exc:  # deliberate: a chunk we cannot read is the guard's loss only
            _internal_errors.report("stream.chunk", exc)

    def _self_exhausted(self) -> None:
        first = not self._self_done
        self._self_finish(None)
        if first and self._self_on_exhausted is not None:
            self._self_on_exhausted()

    def _self_stop_due(self) -> AgentStopped | None:
        """Run the check; the stop it raised, if any (anything else is the guard's loss only)."""
        try:
            self._self_check()  # type: ignore[misc]
        except AgentStopped as stopped:
            self._self_finish(None)  # the check already ended the call with what it saw
            return stopped
        except Exception as exc:  # deliberate
            _internal_errors.report("stream.check", exc)
        return None

    def _self_finish(self, error: BaseException | None) -> None:
        if self._self_done:
            return
        self._self_done = True
        try:
            self._self_on_done(error)
        except Exception as exc:  # deliberate
            _internal_errors.report("stream.done", exc)

    # --- sync ------------------------------------------------------------------------
    def __iter__(self) -> StreamProxy:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self.__wrapped__)
        except StopIteration:
            self._self_exhausted()
            raise
        except BaseException as exc:
            self._self_finish(exc)
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
            self._self_finish(exc)

    def close(self) -> Any:
        try:
            result = self.__wrapped__.close()
        except BaseException as exc:
            self._self_finish(exc)
            raise
        if inspect.isawaitable(result):
            return self._self_after(result)
        self._self_finish(None)
        return result

    async def _self_after(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        finally:
            self._self_finish(None)

    # --- async -----------------------------------------------------------------------
    def __aiter__(self) -> StreamProxy:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self.__wrapped__.__anext__()
        except StopAsyncIteration:
            self._self_exhausted()
            raise
        except BaseException as exc:
            self._self_finish(exc)
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
            self._self_finish(exc)

    async def aclose(self) -> Any:
        try:
            return await self.__wrapped__.aclose()
        finally:
            self._self_finish(None)

    def __del__(self) -> None:
        # Garbage-collected before it was exhausted or closed: end the call with what we saw.
        if self._self_done or self._self_on_abandoned is None:
            self._self_finish(None)
            return
        self._self_done = True
        try:
            self._self_on_abandoned()
        except Exception as exc:  # deliberate
            _internal_errors.report("stream.abandoned", exc)
