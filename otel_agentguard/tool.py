"""``@otel_agentguard.tool``: the tools of a hand-written agent loop as guarded spans.

::

    @ag.tool(effect="write")
    def refund(order: str, amount: float) -> dict: ...

    @ag.tool
    async def get_order(order: str) -> dict: ...

Each call becomes an ``execute_tool {name}`` span with the argument and result
fingerprints, the argument keys and size, and the tool's effect. In enforce
mode a call that would repeat a stall is not run: the function returns the
guard's message instead (see :mod:`otel_agentguard.live.hooks`). The wrapped
function's behaviour is untouched: its exceptions propagate as they are, and a
failure inside the guard only loses that call's telemetry.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.config import capture_content, instrumentation_suppressed
from otel_agentguard.instrumentation._tool_span import intervene, tool_result_attributes, tool_start_attributes
from otel_agentguard.live.providers import GuardTracer
from otel_agentguard.live.registry import active_policy

F = TypeVar("F", bound=Callable[..., Any])
_SKIPPED_PARAMETERS = ("self", "cls")


@overload
def tool(func: F, *, name: str | None = None, effect: str | None = None,
         tracer_provider: trace.TracerProvider | None = None) -> F: ...
@overload
def tool(func: None = None, *, name: str | None = None, effect: str | None = None,
         tracer_provider: trace.TracerProvider | None = None) -> Callable[[F], F]: ...


def tool(
    func: Any = None,
    *,
    name: str | None = None,
    effect: str | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> Any:
    """Trace a tool function (sync or async).

    Args:
        name: the tool's name (default: the function's name).
        effect: ``"read"`` or ``"write"``; a contract in the policy
            (``[tools.<name>] effect``) takes precedence.
        tracer_provider: where its spans go (default: the provider of the most
            recent ``otel_agentguard.install()``, else the global one).
    """
    if effect not in (None, "read", "write"):
        raise ValueError(f"effect must be 'read' or 'write', got {effect!r}")

    def decorate(fn: F) -> F:
        tool_name = name or getattr(fn, "__name__", None) or "tool"
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        # Only declared parameter names are exported as argument keys; **kwargs keys are counted.
        if signature is None:
            declared = frozenset({"args"})  # what _arguments names positional arguments it cannot bind
        else:
            declared = frozenset(key for key, parameter in signature.parameters.items()
                                 if parameter.kind is not inspect.Parameter.VAR_KEYWORD)
        tracer = GuardTracer(tracer_provider, f"@ag.tool {tool_name!r}")
        span_name = f"{A.OP_EXECUTE_TOOL} {tool_name}"

        def start(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Span, Any] | None:
            if instrumentation_suppressed():
                return None
            try:
                policy = active_policy()
                attributes = tool_start_attributes(
                    tool_name, _arguments(signature, args, kwargs), policy, effect=effect, declared=declared
                )
                attributes["gen_ai.tool.type"] = "function"
            except Exception as exc:  # deliberate: no telemetry for this call, the call itself goes on
                _internal_errors.report("tool.start", exc)
                return None
            return tracer.get().start_span(span_name, kind=SpanKind.INTERNAL, attributes=attributes), policy

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                started = start(args, kwargs)
                if started is None:
                    return await fn(*args, **kwargs)
                span, policy = started
                intervention = intervene(span, tool_name, policy)
                if intervention is not None:
                    return intervention.message
                with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
                    try:
                        result = await fn(*args, **kwargs)
                    except BaseException as exc:
                        _record_error(span, exc)
                        raise
                    _record_result(span, tool_name, result, policy)
                    return result

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = start(args, kwargs)
            if started is None:
                return fn(*args, **kwargs)
            span, policy = started
            intervention = intervene(span, tool_name, policy)
            if intervention is not None:
                return intervention.message  # enforce mode: the repeating call does not run
            with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    _record_error(span, exc)
                    raise
                _record_result(span, tool_name, result, policy)
                return result

        return wrapper  # type: ignore[return-value]

    return decorate(func) if func is not None else decorate


def _arguments(signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's arguments by parameter name, defaults applied (so f(x) == f(x, y=default))."""
    if signature is None:
        return {"args": list(args), **kwargs}
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return {"args": list(args), **kwargs}  # the call itself will raise the real error
    bound.apply_defaults()
    arguments: dict[str, Any] = {}
    for key, value in bound.arguments.items():
        kind = signature.parameters[key].kind
        if key in _SKIPPED_PARAMETERS:
            continue
        if kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        else:
            arguments[key] = value
    return arguments


def _record_error(span: Span, exc: BaseException) -> None:
    try:
        # Status and error.type first: they are what the judge counts as a failed call.
        span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        span.set_attribute(A.ERROR_TYPE, type(exc).__qualname__)
    except Exception as failure:  # deliberate
        _internal_errors.report("tool.error", failure)
    try:
        # An exception message may quote arguments: the event only goes out with capture on.
        # str(exc) may raise (a hostile __str__): then only the event is lost.
        if capture_content():
            span.record_exception(exc)
    except Exception as failure:  # deliberate
        _internal_errors.report("tool.error.event", failure)


def _record_result(span: Span, tool_name: str, result: Any, policy: Any) -> None:
    try:
        if span.is_recording():
            span.set_attributes(tool_result_attributes(tool_name, result, policy))
    except Exception as exc:  # deliberate
        _internal_errors.report("tool.result", exc)
