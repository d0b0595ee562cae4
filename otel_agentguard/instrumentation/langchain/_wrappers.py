"""The wrappers: LangChain tool runs and chat-model calls as guarded spans.

Why patching, not LangChain's callback system
---------------------------------------------
LangChain's callbacks are its own hook and would be the first choice (OI's
LangChain instrumentation adds a tracer to ``BaseCallbackManager``), but a
callback cannot make its span the *current* span: handlers run on other
threads and executors and in any order, so a handler that attaches context
corrupts it (OI's ``_tracer.py`` warns about exactly this). The guard needs
its span current while the work runs:

* a chat model calls a provider SDK (``ChatOpenAI`` calls ``openai``). When
  that SDK is instrumented too (agentguard's openai instrumentor, the official
  openai-v2, OpenLLMetry), the judge must still see one model step per call.
  That works only if the provider's instrumentation finds our model span
  current: it then enriches it (``ModelCall``) or is flagged as nested by the
  processor. With a callback span it would be a second, unrelated step;
* whatever a tool does (HTTP calls, a sub-agent, a nested model call) should
  nest under its ``execute_tool`` span and inherit its session;
* the exception a tool raises is seen as raised, and passes on untouched.

So we wrap the few methods every call goes through, unchanged since
langchain-core 0.1:

* ``BaseTool.run`` / ``BaseTool.arun`` (``invoke``, ``ainvoke``, LangGraph's
  ``ToolNode`` and ``create_agent`` all end up there; an async call of a sync
  tool goes through ``arun`` only, so each call is one span);
* ``BaseChatModel._generate_with_cache`` / ``_agenerate_with_cache``: one call
  per prompt for ``invoke``, ``ainvoke``, ``batch`` and ``generate``, including
  the streaming LangGraph does internally (``stream_mode="messages"``);
* ``BaseChatModel.stream`` / ``astream``: the public streaming API, which does
  not go through the above. The wrapper returns a generator: the span starts
  at the first chunk asked for (like the call itself), our span is current only
  while the model produces a chunk (never while the application holds one), and
  it ends exactly once on exhaustion, error, ``close()`` or garbage collection,
  classified as every stream is (``instrumentation/_stream.py``).

Every wrapper follows the instrumentor pattern: suppressed, call straight
through; read the call in ``try`` (a failure costs the telemetry, never the
call); call the original; an exception is recorded and re-raised as it is.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.config import capture_content, instrumentation_suppressed
from otel_agentguard.errors import AgentStopped
from otel_agentguard.instrumentation._base import InstrumentationContext
from otel_agentguard.instrumentation._model_call import ModelCall
from otel_agentguard.instrumentation._stream import StreamEnd, end_model_call, ended_by
from otel_agentguard.instrumentation._tool_span import intervene, tool_result_attributes, tool_start_attributes
from otel_agentguard.instrumentation.langchain import _extract, _session

logger = logging.getLogger(__name__)

TOOL_ERROR = "tool_error"  # error.type of a tool error LangChain returned as content

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]

# --- tools ---------------------------------------------------------------------------------------


class _ToolRun:
    """One tool execution: its span, and the policy it was fingerprinted with."""

    __slots__ = ("span", "name", "policy")

    def __init__(self, span: Span, name: str, policy: Any):
        self.span = span
        self.name = name
        self.policy = policy

    @classmethod
    def start(cls, context: InstrumentationContext, tool: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> _ToolRun | None:
        if instrumentation_suppressed():
            return None
        try:
            name = str(getattr(tool, "name", None) or type(tool).__name__)
            tool_input = args[0] if args else kwargs.get("tool_input")
            policy = context.guard.policy
            attributes = tool_start_attributes(
                name,
                _extract.tool_arguments(tool, tool_input),
                policy,
                effect=_extract.tool_effect_hint(tool),
                call_id=kwargs.get("tool_call_id"),
            )
            attributes["gen_ai.tool.type"] = "function"
            thread = _session.thread_id(kwargs.get("config"), kwargs.get("metadata"))
            attributes.update(_session.session_attributes(thread))
        except Exception as exc:  # deliberate: no telemetry for this call, the call itself goes on
            _internal_errors.report("langchain.tool.start", exc)
            return None
        span = context.tracer.start_span(f"{A.OP_EXECUTE_TOOL} {name}", kind=SpanKind.INTERNAL, attributes=attributes)
        return cls(span, name, policy)

    def activated(self) -> Any:
        return trace.use_span(self.span, end_on_exit=True, record_exception=False, set_status_on_exception=False)

    def failed(self, exc: BaseException) -> None:
        try:
            # Status and error.type first: they are what the judge counts as a failed call.
            self.span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
            self.span.set_attribute(A.ERROR_TYPE, type(exc).__qualname__)
        except Exception as failure:  # deliberate
            _internal_errors.report("langchain.tool.error", failure)
        try:
            # An exception message may quote arguments: the event only goes out with capture on.
            # str(exc) may raise (a hostile __str__): then only the event is lost.
            if capture_content():
                self.span.record_exception(exc)
        except Exception as failure:  # deliberate
            _internal_errors.report("langchain.tool.error.event", failure)

    def returned(self, output: Any) -> None:
        try:
            if not self.span.is_recording():
                return
            self.span.set_attributes(tool_result_attributes(self.name, _extract.tool_result(output), self.policy))
            if _extract.handled_tool_error(output):
                # handle_tool_error / handle_validation_error turned the failure into content:
                # the call returns, but the tool failed, and the judge must count it so.
                # LangChain does not say which exception it was: "tool_error", as the GenAI
                # conventions (and our mcp and openai_agents instrumentations) name an error result.
                self.span.set_status(Status(StatusCode.ERROR, "tool error handled by LangChain"))
                self.span.set_attribute(A.ERROR_TYPE, TOOL_ERROR)
        except Exception as exc:  # deliberate
            _internal_errors.report("langchain.tool.result", exc)


def tool_run_wrapper(context: InstrumentationContext) -> Wrapper:
    """``BaseTool.run``."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        run = _ToolRun.start(context, instance, args, kwargs)
        if run is None:
            return wrapped(*args, **kwargs)
        intervention = intervene(run.span, run.name, run.policy, context.guard)
        if intervention is not None:  # enforce mode: this call would repeat a stall
            return _extract.tool_output(instance, intervention.message, kwargs.get("tool_call_id"))
        with run.activated():
            try:
                output = wrapped(*args, **kwargs)
            except BaseException as exc:
                run.failed(exc)
                raise
            run.returned(output)
            return output

    return wrapper


def tool_arun_wrapper(context: InstrumentationContext) -> Wrapper:
    """``BaseTool.arun``."""

    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        run = _ToolRun.start(context, instance, args, kwargs)
        if run is None:
            return await wrapped(*args, **kwargs)
        intervention = intervene(run.span, run.name, run.policy, context.guard)
        if intervention is not None:
            return _extract.tool_output(instance, intervention.message, kwargs.get("tool_call_id"))
        with run.activated():
            try:
                output = await wrapped(*args, **kwargs)
            except BaseException as exc:
                run.failed(exc)
                raise
            run.returned(output)
            return output

    return wrapper


# --- chat models ---------------------------------------------------------------------------------


def _start_model_call(
    context: InstrumentationContext, model: Any, messages: Any, stop: Any, call_kwargs: dict[str, Any], *sources: Any
) -> ModelCall | None:
    if instrumentation_suppressed():
        return None
    thread = None
    try:
        thread = _session.thread_id(*sources)
    except Exception as exc:  # deliberate
        _internal_errors.report("langchain.chat.session", exc)
    # Enforce mode: may raise AgentStopped here, at a cut point.
    context.guard.before_model_call(_session.session_of(thread), history=_first_prompt(messages))
    try:
        provider, name, attributes = _extract.request_model(model, stop, call_kwargs)
        attributes.update(_session.session_attributes(thread))
        attributes.update(_session.agent_attributes(*sources))
        prompt = _extract.input_messages(messages) if capture_content() else None
    except Exception as exc:  # deliberate: no telemetry for this call, the call itself goes on
        _internal_errors.report("langchain.chat.start", exc)
        return None
    # ModelCall.start enriches an enclosing model span instead of nesting a second one
    # (a chat model that delegates to another, stream() falling back to invoke()).
    return ModelCall.start(context.tracer, guard=context.guard, provider=provider, request_model=name,
                           attributes=attributes, input_messages=prompt)


def _first_prompt(messages: Any) -> Any:
    """The message list of a call (``generate`` takes a batch of them)."""
    if type(messages) is list and messages and type(messages[0]) is list:
        return messages[0]
    return messages


def _call_session(call: ModelCall) -> str | None:
    return (getattr(call.span, "attributes", None) or {}).get(A.SESSION_ID)


def _generate_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any, dict[str, Any]]:
    """``(messages, stop, run_manager, provider kwargs)`` of ``_generate_with_cache``."""
    messages = args[0] if args else kwargs.get("messages")
    stop = args[1] if len(args) > 1 else kwargs.get("stop")
    run_manager = args[2] if len(args) > 2 else kwargs.get("run_manager")
    extra = {k: v for k, v in kwargs.items() if k not in ("messages", "stop", "run_manager")}
    return messages, stop, run_manager, extra


def _finish(call: ModelCall, result_of: Callable[[], Any], error: BaseException | None) -> None:
    try:
        result = result_of() if error is None else None
    except Exception as exc:  # deliberate: the call succeeded; only its telemetry is lost
        _internal_errors.report("langchain.chat.result", exc)
        result = None
    call.finish(result, error)


def generate_wrapper(context: InstrumentationContext) -> Wrapper:
    """``BaseChatModel._generate_with_cache``."""

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = None
        try:
            messages, stop, run_manager, extra = _generate_call(args, kwargs)
            call = _start_model_call(context, instance, messages, stop, extra, getattr(run_manager, "metadata", None))
        except AgentStopped:
            raise
        except Exception as exc:  # deliberate
            _internal_errors.report("langchain.chat.start", exc)
        if call is None:
            return wrapped(*args, **kwargs)
        chat_result = call.run(wrapped, args, kwargs)
        _finish(call, lambda: _extract.result_from_chat_result(chat_result), None)
        call.after(_call_session(call))  # enforce mode: a refused answer is not returned
        return chat_result

    return wrapper


def agenerate_wrapper(context: InstrumentationContext) -> Wrapper:
    """``BaseChatModel._agenerate_with_cache``."""

    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = None
        try:
            messages, stop, run_manager, extra = _generate_call(args, kwargs)
            call = _start_model_call(context, instance, messages, stop, extra, getattr(run_manager, "metadata", None))
        except AgentStopped:
            raise
        except Exception as exc:  # deliberate
            _internal_errors.report("langchain.chat.start", exc)
        if call is None:
            return await wrapped(*args, **kwargs)
        chat_result = await call.run_async(wrapped, args, kwargs)
        _finish(call, lambda: _extract.result_from_chat_result(chat_result), None)
        call.after(_call_session(call))  # enforce mode: a refused answer is not returned
        return chat_result

    return wrapper


def _stream_call(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any, dict[str, Any]]:
    """``(prompt messages or None, stop, config, provider kwargs)`` of ``stream(input, config, *, stop, **kw)``."""
    model_input = args[0] if args else kwargs.get("input")
    config = args[1] if len(args) > 1 else kwargs.get("config")
    stop = kwargs.get("stop")
    extra = {k: v for k, v in kwargs.items() if k not in ("input", "config", "stop")}
    messages = None
    if capture_content():
        try:
            messages = model._convert_input(model_input).to_messages()
        except Exception:  # deliberate: the call will raise its own error for a bad input
            messages = None
    return messages, stop, config, extra


_G = TypeVar("_G")


class _GeneratorEnd:
    """Tells, at a generator's ``GeneratorExit``, whether it is being garbage-collected.

    The interpreter clears a generator's weak references before it closes it on collection,
    so a dead reference means nobody closed it: the stream was abandoned, not closed early.
    """

    __slots__ = ("_ref",)

    def __init__(self) -> None:
        self._ref: weakref.ref[Any] | None = None

    def watch(self, generator: _G) -> _G:
        self._ref = weakref.ref(generator)
        return generator

    def classify(self, error: BaseException) -> StreamEnd:
        if isinstance(error, GeneratorExit) and self._ref is not None and self._ref() is None:
            return StreamEnd.ABANDONED
        return ended_by(error)


def _end(call: ModelCall, accumulator: _extract.StreamAccumulator, end: StreamEnd,
         error: BaseException | None) -> None:
    try:
        result = accumulator.result() if end is not StreamEnd.FAILED else None
    except Exception as exc:  # deliberate: the call ended; only its telemetry is lost
        _internal_errors.report("langchain.chat.result", exc)
        result = None
    end_model_call(call, result, end, error, collected=end is StreamEnd.ABANDONED)


def stream_wrapper(context: InstrumentationContext) -> Wrapper:
    """``BaseChatModel.stream``: returns a generator, like the method it wraps."""

    def generate(ending: _GeneratorEnd, wrapped: Callable[..., Any], instance: Any,
                 args: tuple[Any, ...], kwargs: dict[str, Any]) -> Iterator[Any]:
        call = None
        try:
            messages, stop, config, extra = _stream_call(instance, args, kwargs)
            call = _start_model_call(context, instance, messages, stop, extra, config)
        except Exception as exc:  # deliberate
            _internal_errors.report("langchain.chat.start", exc)
        if call is None:
            yield from wrapped(*args, **kwargs)
            return
        accumulator = _extract.StreamAccumulator()
        check = call.repetition_check(accumulator.partial)
        end, error = StreamEnd.COMPLETED, None
        chunks = wrapped(*args, **kwargs)
        try:
            while True:
                with call.activated():  # current while the model works, not while the caller holds a chunk
                    try:
                        chunk = next(chunks)
                    except StopIteration:
                        break
                _add(accumulator, chunk)
                _check(check)  # enforce mode: raises AgentStopped on an answer that repeats itself
                yield chunk
        except BaseException as exc:
            end, error = ending.classify(exc), exc
            raise
        finally:
            try:
                close = getattr(chunks, "close", None)
                if close is not None:
                    close()
            finally:
                _end(call, accumulator, end, error)
        call.after(_call_session(call))  # enforce mode: a refused streamed answer ends here

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Iterator[Any]:
        ending = _GeneratorEnd()
        return ending.watch(generate(ending, wrapped, instance, args, kwargs))

    return wrapper


def astream_wrapper(context: InstrumentationContext) -> Wrapper:
    """``BaseChatModel.astream``: returns an async generator, like the method it wraps."""

    async def generate(ending: _GeneratorEnd, wrapped: Callable[..., Any], instance: Any,
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        call = None
        try:
            messages, stop, config, extra = _stream_call(instance, args, kwargs)
            call = _start_model_call(context, instance, messages, stop, extra, config)
        except Exception as exc:  # deliberate
            _internal_errors.report("langchain.chat.start", exc)
        chunks = wrapped(*args, **kwargs)
        if call is None:
            async for chunk in chunks:
                yield chunk
            return
        accumulator = _extract.StreamAccumulator()
        check = call.repetition_check(accumulator.partial)
        end, error = StreamEnd.COMPLETED, None
        try:
            while True:
                with call.activated():
                    try:
                        chunk = await chunks.__anext__()
                    except StopAsyncIteration:
                        break
                _add(accumulator, chunk)
                _check(check)
                yield chunk
        except BaseException as exc:
            end, error = ending.classify(exc), exc
            raise
        finally:
            try:
                aclose = getattr(chunks, "aclose", None)
                if aclose is not None:
                    await aclose()
            finally:
                _end(call, accumulator, end, error)
        call.after(_call_session(call))  # enforce mode: a refused streamed answer ends here

    def wrapper(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> AsyncIterator[Any]:
        ending = _GeneratorEnd()
        return ending.watch(generate(ending, wrapped, instance, args, kwargs))

    return wrapper


def _add(accumulator: _extract.StreamAccumulator, chunk: Any) -> None:
    try:
        accumulator.add(chunk)
    except Exception as exc:  # deliberate: a chunk we cannot read is the guard's loss only
        _internal_errors.report("langchain.chat.chunk", exc)


def _check(check: Callable[[], None]) -> None:
    try:
        check()
    except AgentStopped:
        raise
    except Exception as exc:  # deliberate: the guard's loss only
        _internal_errors.report("langchain.chat.check", exc)
