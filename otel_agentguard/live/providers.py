"""Which TracerProvider the guard's own spans go to, and the SDK provider under a proxy.

Applications hold providers in several shapes: the SDK's ``TracerProvider``,
a proxy around one (Logfire's ``ProxyTracerProvider`` keeps the SDK provider
in ``.provider`` so that ``logfire.configure()`` can swap it), or the API's
default proxy when nothing was configured at all. The guard is added to the
SDK provider underneath, and ``@ag.tool`` / ``ag.session`` without a
``tracer_provider=`` trace to the provider the guard was installed on last
(the global provider when no guard is installed), resolved at each call: a
tool is usually decorated at import time, before ``install()`` runs.

A span that cannot be recorded by anything (no SDK provider anywhere) is
reported once per cause, naming the fix, instead of silently tracing nothing.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider as SDKTracerProvider

from otel_agentguard._fork import renew_in_forked_children
from otel_agentguard.version import __version__

logger = logging.getLogger("otel_agentguard")

_SCOPE = "otel_agentguard"
_MAX_PROXY_DEPTH = 8
_lock = threading.Lock()
renew_in_forked_children(globals(), "_lock")
_last_installed: weakref.ref[Any] | None = None
_warned: set[str] = set()


def sdk_provider(provider: Any) -> Any:
    """The SDK provider ``provider`` is or wraps; None when there is none to add a processor to."""
    current = provider
    for _ in range(_MAX_PROXY_DEPTH):
        if isinstance(current, SDKTracerProvider):
            return current
        inner = getattr(current, "provider", None)  # Logfire's re-assignable proxy
        if inner is None or inner is current:
            break
        current = inner
    # Another SDK-like provider (a vendor's subclass or re-implementation) takes processors too.
    return current if callable(getattr(current, "add_span_processor", None)) else None


def run_first(provider: Any, processor: Any) -> bool:
    """Move ``processor`` to the front of the provider's processors, so that at shutdown it writes
    its last verdicts while the exporters added before it still export. The SDK shuts its
    processors down in the order they were added and offers no public way to reorder them; its
    multi-processors keep them in a tuple under a lock, which is what is read here. False (and
    nothing changed) for a provider built otherwise: the guard then stays last, and the verdicts
    of runs still open at a ``provider.shutdown()`` made before the process exits may be lost."""
    chain: Any = getattr(provider, "_active_span_processor", None)
    lock = getattr(chain, "_lock", None)
    processors = getattr(chain, "_span_processors", None)
    if lock is None or not isinstance(processors, tuple) or processor not in processors:
        return False
    with lock:
        current = chain._span_processors  # (again, under the lock)
        chain._span_processors = (processor, *(p for p in current if p is not processor))
    return True


def remember_installed(provider: Any) -> None:
    """``install()`` added a guard to ``provider``: the default for the guard's own spans from now on."""
    global _last_installed
    with _lock:
        _last_installed = weakref.ref(provider)


def default_provider() -> Any:
    """The provider the guard was installed on last, else the global one."""
    reference = _last_installed
    provider = reference() if reference is not None else None
    return provider if provider is not None else trace.get_tracer_provider()


class GuardTracer:
    """The tracer for a decorated tool or a session: the given provider's, else the default one.

    ``what`` names the caller in the one warning given when nothing can be traced.
    """

    __slots__ = ("_explicit", "_what", "_provider", "_tracer")

    def __init__(self, tracer_provider: Any, what: str):
        self._explicit = tracer_provider
        self._what = what
        self._provider: Any = None
        self._tracer: trace.Tracer | None = None

    def get(self) -> trace.Tracer:
        provider = self._explicit if self._explicit is not None else default_provider()
        tracer = self._tracer
        if tracer is not None and provider is self._provider:
            return tracer
        tracer = trace.get_tracer(_SCOPE, __version__, provider)
        self._provider, self._tracer = provider, tracer
        if sdk_provider(provider) is None:
            _warn_untraced(self._what, provider, explicit=self._explicit is not None)
        return tracer


def _warn_untraced(what: str, provider: Any, *, explicit: bool) -> None:
    if explicit:
        warn_once(
            f"untraced:{type(provider).__name__}",
            "otel_agentguard: %s records nothing: its tracer_provider= is a %s, not an OpenTelemetry SDK "
            "TracerProvider. Pass the SDK provider (opentelemetry.sdk.trace.TracerProvider) you export with.",
            what, type(provider).__name__,
        )
    else:
        warn_once(
            "untraced:default",
            "otel_agentguard: %s records nothing: no OpenTelemetry SDK TracerProvider is configured and "
            "otel_agentguard.install() was not called. Configure the SDK (or run under opentelemetry-instrument "
            "with opentelemetry-distro installed), then call otel_agentguard.install(); or pass tracer_provider=.",
            what,
        )


def warn_once(key: str, message: str, *args: Any) -> None:
    """Log ``message`` as a warning the first time ``key`` is seen in this process."""
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message, *args)
