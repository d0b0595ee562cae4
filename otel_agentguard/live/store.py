"""Bounded store of live sessions: an idle timeout, and the least recently used evicted when full.

Sessions idle for longer than ``idle_timeout_s`` are evicted as new ones
arrive. Beyond ``max_sessions`` the least recently used session is evicted,
except one that ``pinned`` says must stay (a session whose session span is
still open: ending it early would split one agent run in two); the store then
grows past its size and warns once. Evictions are amortised: at most
``_MAX_EVICTIONS_PER_CALL`` per insert, so one span start never pays for a
long quiet period at once. Evicted sessions are handed to ``on_evict``
outside the lock, so the caller can end them; nothing is dropped silently.

A use (every step's start) only notes the time, without a lock: the order of
use is settled when the store needs room, as the CLOCK algorithm does. Entries
wait in the order they were queued; the one at the front that was used since
it was queued goes to the back once more, the first one that was not is the
least recently used.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_SESSIONS = 10_000
DEFAULT_IDLE_TIMEOUT_S = 900.0
_MAX_EVICTIONS_PER_CALL = 32


class SessionStore(Generic[T]):
    __slots__ = ("_entries", "_seen", "_used", "_lock", "_on_evict", "_pinned", "_max", "_idle", "_clock",
                 "_warned_full")

    def __init__(
        self,
        on_evict: Callable[[T], None],
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        pinned: Callable[[T], bool] = lambda value: False,
        clock: Callable[[], float] = time.monotonic,
    ):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        if idle_timeout_s <= 0:
            raise ValueError(f"idle_timeout_s must be positive, got {idle_timeout_s}")
        self._entries: OrderedDict[str, T] = OrderedDict()  # in the order queued
        # When each was last used (apart from the entries, so that using one allocates no tuple that
        # the garbage collector tracks), and which were used since they were queued.
        self._seen: dict[str, float] = {}
        self._used: set[str] = set()
        self._lock = threading.Lock()
        self._on_evict = on_evict
        self._pinned = pinned
        self._max = max_sessions
        self._idle = idle_timeout_s
        self._clock = clock
        self._warned_full = False

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> T | None:
        """The value, its use noted (no lock: a dict read and a dict write are atomic)."""
        value = self._entries.get(key)
        if value is not None:
            # (Another thread may pop the entry meanwhile: a time left behind is dropped by _collect.)
            self._seen[key] = self._clock()
            self._used.add(key)
        return value

    def peek(self, key: str) -> T | None:
        """The value, without counting this as activity (a dict read: atomic, no lock)."""
        return self._entries.get(key)

    def add(self, key: str, created: T) -> T:
        """Store ``created`` under ``key`` unless another thread stored one first; returns the stored one."""
        evicted: list[T] = []
        with self._lock:
            stored = self._entries.get(key)
            if stored is not None:  # another thread won the race: use its session
                self._seen[key] = self._clock()
                self._used.add(key)
                return stored
            now = self._clock()
            self._collect(now, evicted, room=True)
            self._entries[key] = created
            self._seen[key] = now
        if evicted:
            self._evict(evicted)
        return created

    def pop(self, key: str) -> T | None:
        with self._lock:
            self._seen.pop(key, None)
            self._used.discard(key)
            return self._entries.pop(key, None)

    def sweep(self) -> int:
        """Evict idle sessions now (a bounded number); returns how many."""
        evicted: list[T] = []
        with self._lock:
            self._collect(self._clock(), evicted, room=False)
        self._evict(evicted)
        return len(evicted)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._entries)

    def drain(self) -> list[T]:
        with self._lock:
            values = list(self._entries.values())
            self._entries.clear()
            self._seen.clear()
            self._used.clear()
        return values

    def _collect(self, now: float, evicted: list[T], room: bool) -> None:
        entries, seen, used = self._entries, self._seen, self._used
        deadline = now - self._idle
        skipped = 0
        if len(seen) > len(entries) + _MAX_EVICTIONS_PER_CALL:  # times a use noted after its entry was popped
            for key in [key for key in seen if key not in entries]:
                del seen[key]
                used.discard(key)
        while entries and len(evicted) < _MAX_EVICTIONS_PER_CALL and skipped < _MAX_EVICTIONS_PER_CALL:
            key, value = next(iter(entries.items()))
            if seen[key] <= deadline:
                del entries[key], seen[key]
                used.discard(key)
                evicted.append(value)
            elif key in used or (room and len(entries) >= self._max and self._pinned(value)):
                # Used since it was queued (a second chance: idle ones reach the front, and the
                # least recently used is evicted first), or a running agent keeps its session.
                entries.move_to_end(key)
                used.discard(key)
                skipped += 1
            elif room and len(entries) >= self._max:
                del entries[key], seen[key]
                evicted.append(value)
            else:
                return
        if room and len(entries) >= self._max and not self._warned_full:
            self._warned_full = True
            logger.warning(
                "more than %d agent sessions have open session spans; the guard keeps them all. "
                "Raise OTEL_AGENTGUARD_MAX_SESSIONS if this is expected", self._max,
            )

    def _evict(self, evicted: list[T]) -> None:
        for value in evicted:
            self._on_evict(value)
