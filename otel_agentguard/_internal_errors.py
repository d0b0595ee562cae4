"""Fail open, log once: how every runtime failure inside the guard is reported.

Nothing raised by fingerprinting, probes, the processor or an instrumentor may
reach the application. Each failure kind is logged once per process (with its
traceback, so it can be reported) and counted, so a broken guard shows up on a
dashboard instead of in the user's stack traces.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

logger = logging.getLogger("otel_agentguard")

_lock = threading.Lock()
_logged: set[str] = set()
_counts: dict[str, int] = {}
_listeners: list[Callable[[str], None]] = []


def report(kind: str, exc: BaseException | None = None) -> None:
    """Record a contained failure of ``kind`` (a short, low-cardinality name)."""
    with _lock:
        _counts[kind] = _counts.get(kind, 0) + 1
        first = kind not in _logged
        if first:
            _logged.add(kind)
        listeners = tuple(_listeners)
    if first:
        logger.warning("otel_agentguard contained an internal error (%s); the application is not affected", kind,
                       exc_info=exc)
    for listener in listeners:
        try:
            listener(kind)
        except Exception:  # deliberate: a broken listener must not loop back into report()
            pass


def counts() -> dict[str, int]:
    """Failures so far by kind (for tests and diagnostics)."""
    with _lock:
        return dict(_counts)


def add_listener(listener: Callable[[str], None]) -> None:
    with _lock:
        _listeners.append(listener)


def remove_listener(listener: Callable[[str], None]) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)
