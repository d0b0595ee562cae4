"""Wrappers that make each MCP ``tools/call`` of a client exactly one guarded ``execute_tool`` step.

``ClientSession.call_tool`` (the one client entry point in mcp 1.x and 2.x;
``mcp.Client.call_tool`` and ``ClientSessionGroup`` go through it) computes
the step's start attributes once (argument fingerprint, keys, size, effect)
and publishes the call in a context variable for the duration of the call.
Which span becomes the step depends on what mcp traces itself:

* mcp 2.x over a JSON-RPC transport (stdio, HTTP, memory streams) opens a
  CLIENT span ``MCP send tools/call {name}`` in ``JSONRPCDispatcher.send_raw_request``
  through the ``otel_span`` helper. Our ``otel_span`` wrapper adds the start
  attributes before that span starts (so it is a tool step from its first
  moment, numbered by the guard processor at start) and keeps the span open
  past mcp's ``with`` block: the dispatcher ends it before the result is
  parsed, and the result fingerprint must land on it first. The call wrapper
  ends it as soon as it has the ``CallToolResult``.
* mcp 2.x in process (``mcp.Client(server)``) calls the server directly, in
  the caller's task: the only span is the server's own ``tools/call {name}``
  span (``gen_ai.operation.name = execute_tool``, opened by
  ``OpenTelemetryMiddleware``). Its start attributes are added the same way,
  and the result ones by the ``call_next`` we hand the middleware, which runs
  inside that span.
* The server span of a JSON-RPC call served in this very process (memory
  streams) is the other half of a client span that is already the step: it is
  marked nested, with the client's session, so the call is counted once.
* Otherwise (mcp 1.x, which has no spans of its own; or mcp's span is not
  recording, e.g. no SDK provider is global) the call gets a span of ours:
  started before the call under 1.x, after it (with the call's start time)
  under 2.x once it is clear that mcp made none.

A call's outcome is never changed: exceptions propagate as they are, and a
failure inside these wrappers only loses that call's telemetry.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.config import capture_content, instrumentation_suppressed
from otel_agentguard.instrumentation._base import InstrumentationContext
from otel_agentguard.instrumentation._tool_span import (
    record_intervention,
    tool_result_attributes,
    tool_start_attributes,
)
from otel_agentguard.judge.policy import Policy

logger = logging.getLogger(__name__)

# Names mcp 2.x puts on its spans (mcp/shared/jsonrpc_dispatcher.py, mcp/server/_otel.py).
MCP_METHOD_NAME = "mcp.method.name"
TOOLS_CALL = "tools/call"
TOOL_ERROR = "tool_error"  # mcp's error.type for a CallToolResult with isError
_MCP_OTEL_MODULE = "mcp.shared._otel"

_CLIENT = "client"  # mcp's CLIENT span is the step; we end it
_SERVER = "server"  # mcp's in-process SERVER span is the step; mcp ends it
_OWN = "own"  # our span is the step

_current_call: ContextVar[_ToolCall | None] = ContextVar("otel_agentguard.mcp.tool_call", default=None)


def mcp_traces_itself() -> bool:
    """Whether the installed mcp makes spans of its own (2.x); 1.x makes none."""
    return _MCP_OTEL_MODULE in sys.modules


# --- tool annotations, as each client session saw them in tools/list ---------------------------------


def annotation_effect(annotations: Any) -> str | None:
    """``read`` / ``write`` from MCP tool annotations, or None when they say nothing.

    ``readOnlyHint: true`` is a read; ``destructiveHint: true`` or an explicit
    ``readOnlyHint: false`` is a write. Only hints the server set count: MCP's
    defaults (not read-only, destructive) are not a statement about the tool.
    """
    if annotations is None:
        return None
    read_only = _hint(annotations, "readOnlyHint", "read_only_hint")
    if read_only is True:
        return "read"
    if read_only is False or _hint(annotations, "destructiveHint", "destructive_hint") is True:
        return "write"
    return None


def _hint(annotations: Any, wire_name: str, field_name: str) -> Any:
    if isinstance(annotations, Mapping):
        return annotations.get(wire_name, annotations.get(field_name))
    # mcp 2.x models use snake_case fields, 1.x models the camelCase wire names.
    value = getattr(annotations, field_name, None)
    return value if value is not None else getattr(annotations, wire_name, None)


class _ToolEffects:
    """Per client session: tool name -> effect from its annotations (weak keys: a closed session goes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_session: weakref.WeakKeyDictionary[Any, dict[str, str | None]] = weakref.WeakKeyDictionary()

    def absorb(self, session: Any, listing: Any) -> None:
        effects = {
            tool.name: annotation_effect(getattr(tool, "annotations", None))
            for tool in getattr(listing, "tools", None) or ()
            if isinstance(getattr(tool, "name", None), str)
        }
        if not effects:
            return
        with self._lock:
            # Merged, not replaced: a paginated listing arrives one page at a time.
            self._by_session.setdefault(session, {}).update(effects)

    def effect(self, session: Any, tool_name: str) -> str | None:
        with self._lock:
            known = self._by_session.get(session)
            return known.get(tool_name) if known else None

    def clear(self) -> None:
        with self._lock:
            self._by_session.clear()


_effects = _ToolEffects()
# (trace id, span id) of each open mcp CLIENT span that is a step, so the server half of the
# same call, served in this process, can be recognised. Plain dict: get/set/pop are atomic.
_open_client_steps: dict[tuple[int, int], _ToolCall] = {}


def reset_state() -> None:
    """Forget what the wrappers learned (on uninstrument)."""
    _effects.clear()
    _open_client_steps.clear()


# --- one tools/call ----------------------------------------------------------------------------------


class _ToolCall:
    """One ``tools/call`` as the client made it, and the span that became its step."""

    __slots__ = (
        "name", "policy", "attributes", "tracer", "guard", "parent", "start_ns", "side", "span", "session_id",
        "_claim", "_key", "_done",
    )

    def __init__(self, name: str, policy: Policy, attributes: dict[str, Any], context: InstrumentationContext):
        self.name = name
        self.policy = policy
        self.attributes = attributes
        self.tracer = context.tracer
        self.guard = context.guard
        self.parent = otel_context.get_current()
        self.start_ns = time.time_ns()
        self.side: str | None = None
        self.span: Span | None = None
        self.session_id: str | None = None
        self._claim: _SpanClaim | None = None
        self._key: tuple[int, int] | None = None
        self._done = False

    @classmethod
    def begin(
        cls, session: Any, args: tuple[Any, ...], kwargs: dict[str, Any], context: InstrumentationContext
    ) -> _ToolCall | None:
        """None when the call cannot be read: it then runs untouched, without telemetry."""
        try:
            name, arguments = _call_tool_arguments(args, kwargs)
            if not isinstance(name, str):
                return None  # the call itself will raise its own error
            policy = context.guard.policy
            attributes = tool_start_attributes(
                name, arguments if arguments is not None else {}, policy, effect=_effects.effect(session, name)
            )
            call = cls(name, policy, attributes, context)
            if not mcp_traces_itself():
                call._start_own_span(call.start_ns)  # mcp 1.x: there is no span of mcp's to enrich
            return call
        except Exception as exc:  # deliberate: no telemetry for this call, the call itself goes on
            _internal_errors.report("mcp.call_tool.start", exc)
            return None

    @contextlib.contextmanager
    def activated(self) -> Iterator[None]:
        """Make our own span current while the call runs (transport spans nest under it)."""
        if self.side != _OWN or self.span is None:
            yield
            return
        with trace.use_span(self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            yield

    def claim(self, span: Span, side: str, claim: _SpanClaim) -> None:
        """mcp opened a span for this call: it becomes the step, unless it does not record."""
        if not span.is_recording():
            return  # e.g. no SDK provider is global: finish() makes a span of ours instead
        self.side, self.span, self._claim = side, span, claim
        if side == _CLIENT:
            session_id = (getattr(span, "attributes", None) or {}).get(A.SESSION_ID)
            self.session_id = str(session_id) if session_id else None
            context = span.get_span_context()
            self._key = (context.trace_id, context.span_id)
            _open_client_steps[self._key] = self

    def owns(self, claim: _SpanClaim) -> bool:
        return self._claim is claim

    def record_result(self, result: Any) -> None:
        """Result attributes on the step span, while it is still open."""
        try:
            span = self.span
            if span is None or not span.is_recording():
                return
            value, failed = tool_output(result)
            span.set_attributes(tool_result_attributes(self.name, value, self.policy))
            if failed:
                mark_failed(span, TOOL_ERROR)
        except Exception as exc:  # deliberate
            _internal_errors.report("mcp.call_tool.result", exc)

    def finish(self, result: Any = None, error: BaseException | None = None) -> None:
        """The call returned or raised: record it and end the step span, unless mcp ends it."""
        if self._done:
            return
        self._done = True
        try:
            if self._key is not None:
                _open_client_steps.pop(self._key, None)
            if self.side == _SERVER:
                return  # recorded inside mcp's server span, which mcp has ended by now
            if self.side is None and mcp_traces_itself():
                # mcp 2.x made no recording span for this call: ours, with the call's start time.
                self._start_own_span(self.start_ns)
            span = self.span
            if span is None or not span.is_recording():
                return
            if error is not None:
                mark_failed(span, type(error).__qualname__, error)
            else:
                self.record_result(result)
        except Exception as exc:  # deliberate
            _internal_errors.report("mcp.call_tool.finish", exc)
        finally:
            # Always: a claimed CLIENT span must be closed, or mcp's context would stay attached.
            try:
                if self.side == _CLIENT and self._claim is not None:
                    self._claim.close()
                elif self.side == _OWN and self.span is not None:
                    self.span.end()
            except Exception as exc:  # deliberate: the caller's result or exception goes on as it is
                _internal_errors.report("mcp.call_tool.end", exc)

    def intervened(self) -> Any:
        """Enforce mode: the guard's answer (a ``CallToolResult``) when this call would repeat a
        stall, on a span of ours; None to send the call."""
        try:
            intervention = self.guard.before_tool_call(self.attributes.get(A.TOOL_ARGS_FINGERPRINT))
            if intervention is None:
                return None
            if self.span is None:
                self._start_own_span(self.start_ns)
            # _start_own_span set the span; mypy cannot see through the call.
            record_intervention(self.span, self.name, intervention, self.policy)  # type: ignore[arg-type]
            self._done = True
            from mcp.types import CallToolResult, TextContent

            return CallToolResult(content=[TextContent(type="text", text=intervention.message)])
        except Exception as exc:  # deliberate: a broken guard lets the call go
            _internal_errors.report("mcp.call_tool.intervene", exc)
            return None

    def _start_own_span(self, start_ns: int) -> None:
        attributes = {**self.attributes, MCP_METHOD_NAME: TOOLS_CALL}
        self.span = self.tracer.start_span(
            f"{A.OP_EXECUTE_TOOL} {self.name}",
            context=self.parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=start_ns,
        )
        self.side = _OWN


def _call_tool_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(name, arguments)`` of ``ClientSession.call_tool(name, arguments=None, ...)``."""
    name = args[0] if args else kwargs.get("name")
    arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
    return name, arguments


def tool_output(result: Any) -> tuple[Any, bool]:
    """What a ``tools/call`` returned, in the form the judge compares, and whether it is an error.

    The structured content when there is some, else the content blocks (a text
    block as its text, a single block as itself); ``_meta`` never counts. The
    same form whether the result is a model (client side, or an in-process
    server's) or a wire dict, so every path fingerprints a call alike.
    """
    data = result
    if hasattr(result, "model_dump"):
        data = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not isinstance(data, Mapping):
        return data, False
    failed = data.get("isError") is True
    structured = data.get("structuredContent")
    if structured is not None:
        return structured, failed
    if "content" in data:
        blocks = [_content_block(block) for block in data.get("content") or ()]
        return (blocks[0] if len(blocks) == 1 else blocks), failed
    return {key: value for key, value in data.items() if key not in ("_meta", "isError")}, failed


def _content_block(block: Any) -> Any:
    if isinstance(block, Mapping):
        if block.get("type") == "text":
            return block.get("text")
        return {key: value for key, value in block.items() if key not in ("_meta", "annotations")}
    return block


def mark_failed(span: Span, error_type: str, error: BaseException | None = None) -> None:
    """A failed step: status ERROR and ``error.type``, keeping what mcp already set."""
    attributes = getattr(span, "attributes", None) or {}
    if A.ERROR_TYPE not in attributes:
        span.set_attribute(A.ERROR_TYPE, error_type)
    status = getattr(span, "status", None)
    if status is None or status.status_code is not StatusCode.ERROR:
        span.set_status(Status(StatusCode.ERROR, error_type))
    # An exception message may quote arguments or results: the event only goes out with capture on.
    # Last and on its own: str(error) of a hostile exception may raise, and must cost only the event.
    if error is not None and capture_content():
        try:
            span.record_exception(error)
        except Exception as failure:  # deliberate
            _internal_errors.report("mcp.exception_event", failure)


# --- mcp's span, claimed for a call ------------------------------------------------------------------------


class _SpanClaim:
    """mcp's ``otel_span(...)`` context manager, seen through by the call it belongs to.

    A claimed CLIENT span is not ended when mcp's block exits normally: the
    dispatcher leaves that block before the result is parsed. The call wrapper
    closes it (same task, nothing attached in between) once it has the result.
    """

    __slots__ = ("_manager", "_call", "_side")

    def __init__(self, manager: Any, call: _ToolCall, side: str):
        self._manager = manager
        self._call = call
        self._side = side

    def __enter__(self) -> Any:
        span = self._manager.__enter__()
        try:
            self._call.claim(span, self._side, self)
        except Exception as exc:  # deliberate: mcp's span goes on unenriched
            _internal_errors.report("mcp.span.claim", exc)
        return span

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        if self._call.owns(self):
            if exc is None and self._side == _CLIENT:
                return False  # ended by _ToolCall.finish, once the result is on it
            if exc is not None:
                # mcp marks Exceptions itself; cancellation and other BaseExceptions it leaves unmarked.
                try:
                    if self._call.span is not None and self._call.span.is_recording():
                        mark_failed(self._call.span, type(exc).__qualname__, exc)
                except Exception as failure:  # deliberate
                    _internal_errors.report("mcp.span.error", failure)
        return self._manager.__exit__(exc_type, exc, tb)

    def close(self) -> None:
        self._manager.__exit__(None, None, None)


# --- wrapper factories (one per patched mcp function) ---------------------------------------------------


def call_tool(context: InstrumentationContext) -> Callable[..., Any]:
    """``ClientSession.call_tool``: the call's boundary, in mcp 1.x and 2.x."""

    async def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = None if instrumentation_suppressed() else _ToolCall.begin(instance, args, kwargs, context)
        if call is None:
            return await wrapped(*args, **kwargs)
        answered = call.intervened()
        if answered is not None:
            return answered  # enforce mode: the call would repeat a stall and is not sent
        token = _current_call.set(call)
        try:
            with call.activated():
                result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            call.finish(error=exc)
            raise
        finally:
            _current_call.reset(token)
        call.finish(result=result)
        return result

    return wrapper


def session_list_tools(context: InstrumentationContext) -> Callable[..., Any]:
    """``ClientSession.list_tools``: remember each tool's annotations for this session."""

    async def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = await wrapped(*args, **kwargs)
        _absorb(instance, result)
        return result

    return wrapper


def client_list_tools(context: InstrumentationContext) -> Callable[..., Any]:
    """``mcp.Client.list_tools`` (2.x): also sees listings served from its response cache."""

    async def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        result = await wrapped(*args, **kwargs)
        try:
            session = instance.session
        except Exception:  # deliberate: a closed client; the listing is still the caller's
            return result
        _absorb(session, result)
        return result

    return wrapper


def _absorb(session: Any, listing: Any) -> None:
    try:
        _effects.absorb(session, listing)
    except Exception as exc:  # deliberate
        _internal_errors.report("mcp.list_tools", exc)


def otel_span(context: InstrumentationContext) -> Callable[..., Any]:
    """mcp 2.x's ``otel_span`` helper, as the JSON-RPC dispatcher and the server middleware call it."""

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        attributes = kwargs.get("attributes")
        if not attributes or attributes.get(MCP_METHOD_NAME) != TOOLS_CALL or instrumentation_suppressed():
            return wrapped(*args, **kwargs)
        try:
            plan = _plan(kwargs.get("kind"), attributes, kwargs.get("context"))
        except Exception as exc:  # deliberate: mcp's span goes on as mcp made it
            _internal_errors.report("mcp.span.start", exc)
            plan = None
        if plan is None:
            return wrapped(*args, **kwargs)
        extra, call, side = plan
        # mcp's own values win where both name a key (operation and tool name agree anyway).
        manager = wrapped(*args, **{**kwargs, "attributes": {**extra, **attributes}})
        return manager if call is None else _SpanClaim(manager, call, side)

    return wrapper


def _plan(kind: Any, attributes: Mapping[str, Any], parent: Any) -> tuple[dict[str, Any], _ToolCall | None, str] | None:
    """What to add to an mcp ``tools/call`` span before it starts, and which call it belongs to."""
    if kind is SpanKind.SERVER:
        remote = _remote_parent(parent) if parent is not None else None
        twin = _open_client_steps.get(remote) if remote is not None else None
        if twin is not None:
            # The server half of a client span in this process that is already the step.
            # Marked nested (counted once, like a model call seen by two instrumentations).
            extra: dict[str, Any] = {A.NESTED_STEP: True}
            if twin.session_id:
                extra[A.SESSION_ID] = twin.session_id
            return extra, None, _SERVER
        call = _current_call.get()
        if call is not None and call.side is None and attributes.get(A.GEN_AI_TOOL_NAME) == call.name:
            return dict(call.attributes), call, _SERVER  # in process: mcp's server span is the step
        return None  # a server's own call from elsewhere: left as mcp makes it
    if kind is SpanKind.CLIENT:
        call = _current_call.get()
        if call is not None and call.side is None:
            return dict(call.attributes), call, _CLIENT
    return None


def _remote_parent(parent: Any) -> tuple[int, int] | None:
    span_context = trace.get_current_span(parent).get_span_context()
    if not span_context.is_valid:
        return None
    return span_context.trace_id, span_context.span_id


def middleware_call(context: InstrumentationContext) -> Callable[..., Any]:
    """``OpenTelemetryMiddleware.__call__``: hand it a ``call_next`` that records the result inside its span."""

    async def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = _current_call.get()
        if call is None or call.side is not None or len(args) != 2 or kwargs:
            return await wrapped(*args, **kwargs)
        ctx, call_next = args
        if getattr(ctx, "method", None) != TOOLS_CALL:
            return await wrapped(*args, **kwargs)

        async def call_next_in_span(inner_ctx: Any) -> Any:
            result = await call_next(inner_ctx)
            if call.side == _SERVER:  # claimed by this very span (started just before us)
                call.record_result(result)
            return result

        return await wrapped(ctx, call_next_in_span)

    return wrapper
