"""``otel_agentguard.install()``: add the guard to an SDK TracerProvider, once."""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from typing import Any

from opentelemetry import trace

from otel_agentguard._fork import renew_in_forked_children
from otel_agentguard.judge.policy import Policy
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.live.providers import remember_installed, run_first, sdk_provider

_lock = threading.Lock()
renew_in_forked_children(globals(), "_lock")
_installed: weakref.WeakKeyDictionary[Any, AgentGuardSpanProcessor] = weakref.WeakKeyDictionary()


def install(
    tracer_provider: trace.TracerProvider | None = None,
    policy: Policy | str | os.PathLike[str] | None = None,
    mode: str | None = None,
    **options: Any,
) -> AgentGuardSpanProcessor:
    """Add the guard processor to ``tracer_provider`` (default: the global one).

    A proxy provider (Logfire's) is looked through: the guard goes on the SDK
    provider underneath. Idempotent: a second call for the same provider
    returns the processor the first one added. The provider keeps its own
    exporters; the guard only adds attributes, events and verdicts to the spans
    they export. ``@ag.tool`` and ``ag.session`` without a ``tracer_provider=``
    trace to the provider of the most recent ``install()``.

    Raises:
        ValueError: the provider is not an SDK ``TracerProvider`` (configure the
            SDK first, as ``opentelemetry-instrument`` does), or the mode is unknown.
        PolicyError: the policy file is unusable (the message names file, line and key).
    """
    given = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    provider = sdk_provider(given)
    if provider is None:
        raise ValueError(
            f"otel_agentguard.install() needs an SDK TracerProvider, got {type(given).__name__}: "
            "set one with opentelemetry.trace.set_tracer_provider(TracerProvider(...)), or run under "
            "opentelemetry-instrument with opentelemetry-distro installed, or pass tracer_provider="
        )
    with _lock:
        existing = _installed.get(provider)
        if existing is not None:
            remember_installed(provider)
            return existing
        processor = AgentGuardSpanProcessor(policy, mode, tracer_provider=provider, **options)
        provider.add_span_processor(processor)
        # First in line: its stamps are on a span before any other processor sees it end, and at
        # shutdown its verdicts go out while the exporters added before it are still open.
        run_first(provider, processor)
        _installed[provider] = processor
        remember_installed(provider)
    # atexit runs last-registered first: sessions still open at exit are ended (as
    # abandoned) before the provider shuts its exporters down.
    atexit.register(processor.shutdown)
    return processor
