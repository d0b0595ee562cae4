"""Putting the guard's processor on the Agents SDK trace provider, keeping it there, taking it off.

* Added lazily, with ``agents.add_trace_processor``, when the application
  imports ``agents`` (at once if it already has): instrumenting never imports
  a framework the application does not use. It goes *beside* the user's
  processors (and the SDK's default exporter, if still there).
* ``set_trace_processors()`` replaces the provider's list; applications call
  it at startup to turn the OpenAI export off, which under
  ``opentelemetry-instrument`` happens after we were added. A wrapper on
  ``DefaultTraceProvider.set_processors`` puts ours back beside the new list,
  so the guard only goes away by ``uninstrument()``.
* The SDK has no public way to remove a processor (0.24): ``uninstrument``
  takes ours out of the provider's tuple under the provider's own lock when
  the provider has the expected shape, and in every case disables it, so a
  processor that could not be removed does nothing.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import wrapt
from opentelemetry import trace

from otel_agentguard import _internal_errors
from otel_agentguard._fork import renew_in_forked_children
from otel_agentguard.live.guard_ref import GuardRef

# Re-entrant: _add holds it while calling into the SDK, whose set_processors we wrap.
_lock = threading.RLock()
renew_in_forked_children(globals(), "_lock", threading.RLock)
_generation = 0  # bumped by every register/unregister: older import hooks do nothing
_processor: Any = None
_provider: Any = None


def register(tracer: trace.Tracer, guard: GuardRef) -> None:
    global _generation
    with _lock:
        _generation += 1
        generation = _generation
    # Post-import hooks cannot be removed; a stale one sees a newer generation and returns.
    wrapt.register_post_import_hook(functools.partial(_add, generation, tracer, guard), "agents")


def unregister() -> None:
    global _generation, _processor, _provider
    with _lock:
        _generation += 1
        processor, provider = _processor, _provider
        _processor = _provider = None
    if processor is None:
        return
    processor.disable()
    try:
        _remove(provider, processor)
    except Exception as exc:  # deliberate: the disabled processor stays, inert
        _internal_errors.report("openai_agents.remove_processor", exc)


def keep_registered(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Wrapper of ``DefaultTraceProvider.set_processors``: the user's list, then ours beside it."""
    result = wrapped(*args, **kwargs)
    try:
        with _lock:
            processor, provider = _processor, _provider
        if processor is not None and instance is provider:
            given = args[0] if args else kwargs.get("processors", ())
            if not any(p is processor for p in given or ()):
                instance.register_processor(processor)
    except Exception as exc:  # deliberate: the user's call has already done what it should
        _internal_errors.report("openai_agents.keep_registered", exc)
    return result


def _add(generation: int, tracer: trace.Tracer, guard: GuardRef, module: Any) -> None:
    global _processor, _provider
    try:
        import agents.tracing

        from otel_agentguard.instrumentation.openai_agents._processor import GuardTracingProcessor

        with _lock:
            if generation != _generation or _processor is not None:
                return
            processor = GuardTracingProcessor(tracer, guard)
            provider = agents.tracing.get_trace_provider()
            agents.tracing.add_trace_processor(processor)
            _processor, _provider = processor, provider
    except Exception as exc:  # deliberate: a post-import hook must never break the user's import
        _internal_errors.report("instrument.openai_agents", exc)


def _remove(provider: Any, processor: Any) -> None:
    """Drop ``processor`` from the provider's list, keeping everyone else's, atomically."""
    multi = getattr(provider, "_multi_processor", None)
    lock = getattr(multi, "_lock", None)
    if multi is None or lock is None or not isinstance(getattr(multi, "_processors", None), tuple):
        return  # an unknown provider: the processor stays registered, disabled
    # Under the SDK's own lock (the one add_tracing_processor takes), so a processor
    # the user adds at the same moment is not lost, as a read-filter-set_processors would.
    with lock:
        multi._processors = tuple(p for p in multi._processors if p is not processor)
