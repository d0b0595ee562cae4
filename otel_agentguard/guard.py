"""``otel_agentguard.install()``: add the guard to an SDK TracerProvider, once."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any

from opentelemetry import trace

from otel_agentguard.policy import Policy
from otel_agentguard.processor import AgentGuardSpanProcessor

_lock = threading.Lock()
_installed: weakref.WeakKeyDictionary[Any, AgentGuardSpanProcessor] = weakref.WeakKeyDictionary()


def install(
    tracer_provider: trace.TracerProvider | None = None,
    policy: Policy | str | os.PathLike[str] | None = None,
    mode: str | None = None,
    **options: Any,
) -> AgentGuardSpanProcessor:
    """Add the guard processor to ``tracer_provider`` (default: the global one).

    Idempotent: a second call for the same provider returns the processor the
    first one added. The provider keeps its own exporters; the guard only adds
    attributes, events and verdicts to the spans they export.

    Raises:
        ValueError: the provider is not an SDK ``TracerProvider`` (configure the
            SDK first, as ``opentelemetry-instrument`` does), or the mode is unknown.
        PolicyError: the policy file is unusable (the message names file, line and key).
    """
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    add_span_processor = getattr(provider, "add_span_processor", None)  # the SDK's, by duck typing
    if not callable(add_span_processor):
        raise ValueError(
            f"otel_agentguard.install() needs an SDK TracerProvider, got {type(provider).__name__}: "
            "set one with opentelemetry.trace.set_tracer_provider(TracerProvider(...)) or run under "
            "opentelemetry-instrument, or pass tracer_provider="
        )
    with _lock:
        existing = _installed.get(provider)
        if existing is not None:
            return existing
        processor = AgentGuardSpanProcessor(policy, mode, tracer_provider=provider, **options)
        add_span_processor(processor)
        _installed[provider] = processor
    # atexit runs last-registered first: sessions still open at exit are ended (as
    # abandoned) before the provider shuts its exporters down.
    atexit.register(processor.shutdown)
    return processor
