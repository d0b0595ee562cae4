"""The judge service: a bounded queue between the receivers and the judge.

Receivers (OTLP/HTTP, OTLP/gRPC) parse a request and offer its spans; the queue
takes them whole or refuses them whole, so a refused request is retried by the
sender (answered with the retryable status OTLP names for an overloaded server)
and an accepted one is judged. The worker drains the queue into
:class:`LiveSessions` and writes every verdict. Everything runs on one event
loop: the judge is single-threaded by design, and one process uses one core.

Spans are counted by outcome in ``agentguard.serve.spans``: ``accepted``,
``refused`` (queue full or shutting down; the sender retries), ``rejected``
(malformed), and of the accepted, ``reopened`` (they came after their trace was
judged, in time to judge it again and amend what changed), ``late`` (too late for
that), ``unreadable``
and ``over_limit``, which are dropped but never silently.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from opentelemetry import metrics

from otel_agentguard import _internal_errors
from otel_agentguard.judge.policy import Policy
from otel_agentguard.serve.decode import TraceBatch
from otel_agentguard.serve.sessions import JudgedSession, LiveSessions
from otel_agentguard.serve.verdicts import VerdictWriter
from otel_agentguard.version import __version__

logger = logging.getLogger(__name__)

METRIC_SERVE_SPANS = "agentguard.serve.spans"
OUTCOME = "outcome"
_DEFAULT_QUEUE_SPANS = 200_000


class JudgeService:
    def __init__(
        self,
        policy: Policy,
        writer: VerdictWriter,
        *,
        profile: str | None = None,
        idle_timeout_s: float = 30.0,
        settle_s: float = 2.0,
        queue_spans: int = _DEFAULT_QUEUE_SPANS,
        retry_after_s: int = 1,
        max_traces: int = 10_000,
        meter_provider: Any = None,
    ):
        self.sessions = LiveSessions(
            policy, profile=profile, idle_timeout_s=idle_timeout_s, settle_s=settle_s, max_traces=max_traces)
        self.writer = writer
        self.queue_spans = queue_spans
        self.retry_after_s = retry_after_s
        self.verdicts_written = 0
        self._queue: deque[list[TraceBatch]] = deque()
        self._queued = 0
        self._draining = False
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        meter = metrics.get_meter("otel_agentguard.serve", __version__, meter_provider)
        self._spans = meter.create_counter(
            METRIC_SERVE_SPANS, unit="{span}", description="Spans received by agentguard serve, by outcome")
        self._reported = {"reopened": 0, "late": 0, "unreadable": 0, "over_limit": 0}

    # --- receivers' side ---------------------------------------------------------------

    def offer(self, batches: list[TraceBatch]) -> bool:
        """Queue a request's spans, or refuse them all (the sender retries)."""
        count = sum(batch.spans for batch in batches)
        if self._draining or (self._queued and self._queued + count > self.queue_spans):
            self._spans.add(count, {OUTCOME: "refused"})
            return False
        self._queue.append(batches)
        self._queued += count
        self._spans.add(count, {OUTCOME: "accepted"})
        if self._wake is not None:
            self._wake.set()
        return True

    def rejected(self, count: int = 1) -> None:
        """A malformed request (its spans cannot be counted: one per request)."""
        self._spans.add(count, {OUTCOME: "rejected"})

    @property
    def queued_spans(self) -> int:
        return self._queued

    # --- the worker ----------------------------------------------------------------------

    def start(self) -> None:
        self._wake = asyncio.Event()
        self._worker = asyncio.get_running_loop().create_task(self._run(), name="agentguard-judge")

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        # Quiet traces are looked for on a clock, not after every request: the sweep visits every
        # open trace, and a busy service holds thousands.
        tick = min(self.sessions.settle_s, self.sessions.idle_timeout_s) / 4
        next_sweep = loop.time() + tick
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), max(next_sweep - loop.time(), 0))
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            while self._queue:
                self._process(self._queue.popleft())
                await asyncio.sleep(0)  # let the receivers answer between requests
            if loop.time() >= next_sweep or self._draining:
                self._write(self.sessions.expire())
                next_sweep = loop.time() + tick
            if self._draining and not self._queue:
                return

    def _process(self, batches: list[TraceBatch]) -> None:
        for batch in batches:
            self._queued -= batch.spans
            try:
                self._write(self.sessions.add(batch))
            except Exception as exc:  # deliberate: one bad trace never stops the service
                self.sessions.counts.unreadable += batch.spans
                _internal_errors.report("serve.judge", exc)
        self._count_drops()

    def _write(self, judged: list[JudgedSession]) -> None:
        for item in judged:
            try:
                self.writer.write(item)
                self.verdicts_written += 1
            except Exception as exc:  # deliberate: an exporter problem loses one verdict, logged
                _internal_errors.report("serve.verdict", exc)

    def _count_drops(self) -> None:
        counts = self.sessions.counts
        for outcome in self._reported:
            now = getattr(counts, outcome)
            if now > self._reported[outcome]:
                self._spans.add(now - self._reported[outcome], {OUTCOME: outcome})
                self._reported[outcome] = now

    async def drain_begin(self) -> None:
        """From now on every offer is refused (retryable): the senders go elsewhere or wait."""
        self._draining = True

    async def drain(self) -> None:
        """Refuse new spans, judge what is queued and open, flush every verdict."""
        self._draining = True
        if self._worker is not None:
            assert self._wake is not None
            self._wake.set()
            await self._worker
        while self._queue:  # never started (tests), or stopped early
            self._process(self._queue.popleft())
        self._write(self.sessions.close())
        self._count_drops()
        self.writer.flush()
