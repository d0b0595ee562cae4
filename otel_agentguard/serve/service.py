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
import gc
import logging
import time
from collections import deque
from typing import Any

from opentelemetry import metrics

from otel_agentguard import _internal_errors
from otel_agentguard.judge.policy import Policy
from otel_agentguard.serve.decode import TraceBatch
from otel_agentguard.serve.memory import MemoryLimit
from otel_agentguard.serve.sessions import Due, JudgedSession, LiveSessions
from otel_agentguard.serve.verdicts import VerdictWriter
from otel_agentguard.version import __version__

logger = logging.getLogger(__name__)

METRIC_SERVE_SPANS = "agentguard.serve.spans"
OUTCOME = "outcome"
_DEFAULT_QUEUE_SPANS = 200_000
LARGE_SPANS = 2_000  # a piece of work this large runs in a thread (about 20 ms or more)
_SLICE_S = 0.005  # the worker lets the receivers in at least this often


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
        memory: MemoryLimit | None = None,
    ):
        self.sessions = LiveSessions(
            policy, profile=profile, idle_timeout_s=idle_timeout_s, settle_s=settle_s, max_traces=max_traces)
        self.writer = writer
        self.queue_spans = queue_spans
        self.retry_after_s = retry_after_s
        self.verdicts_written = 0
        self.memory = memory
        self._shedding = False
        self._slice_started = time.monotonic()
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
        delivery = self.writer.delivery
        if self._draining or (self._queued and self._queued + count > self.queue_spans) or \
                (delivery is not None and delivery.crowded) or \
                (self.memory is not None and self.memory.above_soft()):  # slow the senders down
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
                await self._process(self._queue.popleft())
            if loop.time() >= next_sweep or self._draining:
                await self._judge(self.sessions.expire())
                next_sweep = loop.time() + tick
                await self._keep_under_the_memory_limit()
            if self._draining and not self._queue:
                return

    async def _keep_under_the_memory_limit(self) -> None:
        if self.memory is None or not self.memory.above_hard():
            self._shedding = False
            return
        if not self._shedding:
            logger.warning("agentguard serve: above its memory limit (%d bytes): judging the oldest traces early",
                           self.memory.hard)
        self._shedding = True
        await self._judge(self.sessions.shed())
        gc.collect()

    # No request, trace or session holds the event loop for long: large pieces of work (a
    # request's spans of one trace, the sessions of a trace) run in a thread, which the loop
    # shares the interpreter with every few milliseconds; verdicts are made and written one
    # by one, with a pause for the receivers every _SLICE_S. The worker is the only one that
    # touches the sessions, so nothing changes under it while it waits.
    async def _process(self, batches: list[TraceBatch]) -> None:
        for batch in batches:
            self._queued -= batch.spans
            try:
                if batch.spans > LARGE_SPANS:
                    due = await asyncio.to_thread(self.sessions.add, batch)
                else:
                    due = self.sessions.add(batch)
            except Exception as exc:  # deliberate: one bad trace never stops the service
                self.sessions.counts.unreadable += batch.spans
                _internal_errors.report("serve.judge", exc)
                continue
            await self._judge(due)
            await self._pause_if_due()
        self._count_drops()

    async def _judge(self, due: list[Due]) -> None:
        for item in due:
            try:
                if item.trace.spans > LARGE_SPANS:
                    sessions = await asyncio.to_thread(self.sessions.recorded, item)
                else:
                    sessions = self.sessions.recorded(item)
                for judged in self.sessions.verdicts(item, sessions):
                    self._write(judged)
                    await self._pause_if_due()
            except Exception as exc:  # deliberate: one bad trace never stops the service
                _internal_errors.report("serve.judge", exc)

    async def _pause_if_due(self) -> None:
        now = time.monotonic()
        if now - self._slice_started >= _SLICE_S:
            await asyncio.sleep(0)
            self._slice_started = time.monotonic()

    def _write(self, judged: JudgedSession) -> None:
        try:
            self.writer.write(judged)
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
            await self._process(self._queue.popleft())
        await self._judge(self.sessions.close())
        self._count_drops()
        self.writer.flush()
