"""Bounded store of live sessions: least-recently-used order plus an idle timeout.

The store never grows past ``max_sessions``: inserting one more evicts the
least recently used session, and sessions idle for longer than
``idle_timeout_s`` are evicted as new ones arrive (amortised O(1): only the
oldest entries are looked at). Evicted sessions are handed to ``on_evict``
outside the lock, so the caller can end them as ``abandoned``; nothing is ever
dropped silently.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

DEFAULT_MAX_SESSIONS = 10_000
DEFAULT_IDLE_TIMEOUT_S = 900.0


class SessionStore(Generic[T]):
    def __init__(
        self,
        on_evict: Callable[[T], None],
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        if idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be positive, got {idle_timeout_s}")
        self._entries: OrderedDict[str, tuple[T, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._on_evict = on_evict
        self._max = max_sessions
        self._idle = idle_timeout_s
        self._clock = clock

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> T | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries[key] = (entry[0], self._clock())
            self._entries.move_to_end(key)
            return entry[0]

    def get_or_create(self, key: str, factory: Callable[[], T]) -> T:
        evicted: list[T] = []
        with self._lock:
            now = self._clock()
            entry = self._entries.get(key)
            if entry is not None:
                value = entry[0]
                self._entries.move_to_end(key)
            else:
                value = factory()
                self._collect(now, evicted)
            self._entries[key] = (value, now)
        self._evict(evicted)
        return value

    def pop(self, key: str) -> T | None:
        with self._lock:
            entry = self._entries.pop(key, None)
        return entry[0] if entry else None

    def sweep(self) -> int:
        """Evict idle sessions now; returns how many."""
        evicted: list[T] = []
        with self._lock:
            self._collect(self._clock(), evicted, room=False)
        self._evict(evicted)
        return len(evicted)

    def drain(self) -> list[T]:
        with self._lock:
            values = [value for value, _ in self._entries.values()]
            self._entries.clear()
        return values

    def _collect(self, now: float, evicted: list[T], room: bool = True) -> None:
        entries = self._entries
        deadline = now - self._idle
        while entries:
            key, (value, seen) = next(iter(entries.items()))
            if seen <= deadline or (room and len(entries) >= self._max):
                del entries[key]
                evicted.append(value)
            else:
                break

    def _evict(self, evicted: list[T]) -> None:
        for value in evicted:
            self._on_evict(value)
