"""Fail open, log once: how every runtime failure inside the guard is reported.

Nothing raised by fingerprinting, probes, the processor or an instrumentor may
reach the application. Each failure kind is logged once per process (with its
traceback, so it can be reported) and counted, so a broken guard shows up on a
dashboard instead of in the user's stack traces.

The log is rate-limited: at most ``_NEW_KINDS_PER_MINUTE`` new kinds are logged
per minute (the rest are counted and logged once a later minute has room), and
at most ``_MAX_KINDS`` kinds are told apart (further ones count as ``other``),
so a guard failing everywhere at once cannot flood the application's log or
the ``agentguard.internal_errors`` metric. With content capture off the logged
traceback names the exception types and code lines but not the exception
messages: a message may quote a tool argument or a prompt.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable

from otel_agentguard._fork import renew_in_forked_children
from otel_agentguard.config import capture_content

logger = logging.getLogger("otel_agentguard")

OTHER = "other"
_NEW_KINDS_PER_MINUTE = 10
_MAX_KINDS = 256
_WINDOW_S = 60.0

_lock = threading.Lock()
renew_in_forked_children(globals(), "_lock")
_logged: set[str] = set()
_counts: dict[str, int] = {}
_listeners: list[Callable[[str], None]] = []
_clock: Callable[[], float] = time.monotonic
_window_start: float | None = None
_window_logged = 0
_window_noted = False


def report(kind: str, exc: BaseException | None = None) -> None:
    """Record a contained failure of ``kind`` (a short, low-cardinality name)."""
    global _window_start, _window_logged, _window_noted
    log = note_suppressed = False
    with _lock:
        if kind not in _counts and len(_counts) >= _MAX_KINDS:
            kind = OTHER
        _counts[kind] = _counts.get(kind, 0) + 1
        if kind not in _logged:
            now = _clock()
            if _window_start is None or now - _window_start >= _WINDOW_S:
                _window_start, _window_logged, _window_noted = now, 0, False
            if _window_logged < _NEW_KINDS_PER_MINUTE:
                _window_logged += 1
                _logged.add(kind)
                log = True
            elif not _window_noted:
                _window_noted = note_suppressed = True
        listeners = tuple(_listeners)
    if log:
        _log(kind, exc)
    elif note_suppressed:
        logger.warning(
            "otel_agentguard contained more than %d new kinds of internal error within a minute; further ones "
            "are counted (agentguard.internal_errors) and logged when the rate drops", _NEW_KINDS_PER_MINUTE,
        )
    for listener in listeners:
        try:
            listener(kind)
        except Exception:  # deliberate: a broken listener must not loop back into report()
            pass


def _log(kind: str, exc: BaseException | None) -> None:
    message = "otel_agentguard contained an internal error (%s); the application is not affected"
    try:
        if exc is None or capture_content():
            logger.warning(message, kind, exc_info=exc)
        else:
            logger.warning(message + "\n%s", kind, _traceback_without_messages(exc))
    except Exception:  # deliberate: reporting a failure must not fail
        pass


def _traceback_without_messages(exc: BaseException) -> str:
    """The traceback of ``exc`` and its causes: frames and exception types, no messages."""
    chain: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(chain) < 16:
        seen.add(id(current))
        chain.append(current)
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    parts: list[str] = []
    for index, item in enumerate(reversed(chain)):
        if index:
            parts.append("\nwhich led to:\n\n")
        parts.append("Traceback (most recent call last):\n")
        parts.extend(traceback.format_list(traceback.extract_tb(item.__traceback__)))
        kind = type(item)
        parts.append(f"{kind.__module__}.{kind.__qualname__} (message withheld: content capture is off)\n")
    return "".join(parts).rstrip("\n")


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
