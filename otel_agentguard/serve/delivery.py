"""What becomes of each verdict the service writes: exported, retried, or dropped, and counted.

The SDK's batch processor drops spans without a word when its queue is full, and an OTLP
exporter gives up on a batch after its own timeout. Neither is acceptable for a verdict, the one
thing the service makes. So:

- a verdict is handed to the SDK only while there is room for it (the verdicts in flight stay
  under ``room``, below the processor's own queue); past that it is dropped here, counted and
  logged, never lost inside the SDK;
- each exporter is wrapped: a batch it fails to export is tried again, with backoff, for
  ``retry_for_s`` (a downstream outage of that long loses nothing), then counted dropped;
- the service refuses new spans (503, retried by the sender) while the verdicts in flight fill
  more than half the room: an outage downstream slows the senders instead of filling memory.

Counts are read by ``/health`` and recorded as ``agentguard.serve.verdicts{outcome}``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

logger = logging.getLogger(__name__)

METRIC_SERVE_VERDICTS = "agentguard.serve.verdicts"
DEFAULT_ROOM = 50_000  # verdicts in flight at most (each a finished span, about 1-2 KB)
DEFAULT_RETRY_FOR_S = 300.0
_FIRST_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 5.0


class Delivery:
    """Counts of verdicts handed to the exporters, thread-safe (the exporters run in the SDK's
    worker threads)."""

    def __init__(self, room: int = DEFAULT_ROOM):
        self.room = room
        self.counter: Any = None  # agentguard.serve.verdicts, set by the verdict writer
        self.exporters: list[DeliveringExporter] = []  # told to stop retrying when the service exits
        self.give_up_at = math.inf  # time.monotonic() after which a failed batch is not tried again
        self._lock = threading.Lock()
        self.written = 0  # handed to the SDK
        self.exported = 0
        self.retried = 0  # export attempts repeated after a failure (spans, per attempt)
        self.dropped = 0  # handed to the SDK, never delivered: failing past the retry time, or at exit
        self.no_room = 0  # never handed to the SDK: too many in flight
        self._warned_full = False

    @property
    def in_flight(self) -> int:
        """Handed to the SDK, neither exported nor dropped yet."""
        return self.written - self.exported - self.dropped

    @property
    def crowded(self) -> bool:
        """More than half the room is taken: time to slow the senders down."""
        return self.in_flight * 2 > self.room

    def admit(self) -> bool:
        """Whether one more verdict may be handed to the SDK; counted either way."""
        if not self.exporters:
            return True  # no exporter (OTEL_TRACES_EXPORTER=none): nothing to deliver or to count
        with self._lock:
            if self.in_flight < self.room:
                self.written += 1
                return True
            self.no_room += 1
            warn = not self._warned_full
            self._warned_full = True
        self._count(1, "dropped")
        if warn:
            logger.warning("agentguard serve: %d verdicts wait for the exporter; further verdicts are dropped "
                           "(and counted) until it catches up", self.room)
        return False

    def settle(self, spans: int, outcome: str) -> None:
        """``spans`` verdicts reached ``outcome``: exported, retried or dropped."""
        with self._lock:
            setattr(self, outcome, getattr(self, outcome) + spans)
        self._count(spans, outcome)

    def stop_retrying(self, after_s: float = 0.0) -> None:
        """Exit is near: failed batches are tried again for ``after_s`` more seconds at most."""
        self.give_up_at = time.monotonic() + after_s
        if after_s <= 0:
            for exporter in self.exporters:
                exporter.stop_retrying()

    def lose_the_rest(self) -> int:
        """At exit: whatever is still in flight will never be exported."""
        with self._lock:
            lost = max(self.in_flight, 0)
            self.dropped += lost
        if lost:
            self._count(lost, "dropped")
        return lost

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {"written": self.written, "exported": self.exported, "retried": self.retried,
                    "dropped": self.dropped + self.no_room, "in_flight": self.in_flight}

    def _count(self, spans: int, outcome: str) -> None:
        if self.counter is not None:
            self.counter.add(spans, {"outcome": outcome})


class DeliveringExporter(SpanExporter):
    """An exporter whose failed batches are tried again for ``retry_for_s``, every outcome counted."""

    def __init__(self, exporter: SpanExporter, delivery: Delivery, retry_for_s: float = DEFAULT_RETRY_FOR_S,
                 sleep: Any = None):
        self._exporter = exporter
        self._delivery = delivery
        self._retry_for_s = retry_for_s
        self._stopping = threading.Event()
        self._sleep = sleep or self._stopping.wait  # returns early at shutdown
        delivery.exporters.append(self)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        count = len(spans)
        deadline = time.monotonic() + self._retry_for_s
        backoff = _FIRST_BACKOFF_S
        while True:
            try:
                result = self._exporter.export(spans)
            except Exception as exc:  # deliberate: an exporter that raises is one that failed
                logger.warning("agentguard serve: the verdict exporter raised %s: %s", type(exc).__name__, exc)
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                self._delivery.settle(count, "exported")
                return result
            give_up_at = min(deadline, self._delivery.give_up_at)
            if self._stopping.is_set() or time.monotonic() >= give_up_at:
                self._delivery.settle(count, "dropped")
                logger.warning("agentguard serve: %d verdicts could not be exported and are dropped", count)
                return result
            self._delivery.settle(count, "retried")
            self._sleep(min(backoff, max(give_up_at - time.monotonic(), 0.0)))
            backoff = min(backoff * 2, _MAX_BACKOFF_S)

    def stop_retrying(self) -> None:
        """Exit is near: a failed batch is dropped (and counted) rather than tried again."""
        self._stopping.set()

    def shutdown(self) -> None:
        self._stopping.set()
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)
