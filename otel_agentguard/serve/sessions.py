"""Live sessions of the service: spans buffered per trace, judged when the trace is done.

A trace is the unit: the Collector's ``loadbalancing`` exporter sends all spans of
a trace to the same replica, and inside a trace replay's collector resolves every
span's session (its own attributes, its parent chain, else the trace) exactly as
it does for a file. A trace is judged

- at once when its root span arrives (a session span is usually the root);
- ``settle_s`` after its last span once a session span or a final answer has been
  seen (the spans that end right after, in the same or the next export, still count);
- ``idle_timeout_s`` after its last span otherwise;
- at shutdown, or when more than ``max_traces`` are open (the least recently fed first).

A span that arrives for a trace already judged cannot change its verdict: it is
counted as late, never judged as a second session.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from otel_agentguard.judge.fingerprints.payloads import PayloadFingerprints
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.replay.errors import InputError
from otel_agentguard.replay.otlp import OTLPCollector
from otel_agentguard.replay.recorded import RecordedSession
from otel_agentguard.replay.runner import judge_recorded
from otel_agentguard.serve.decode import TraceBatch

logger = logging.getLogger(__name__)

_REMEMBERED_TRACES = 100_000  # judged trace ids kept to recognise late spans


@dataclass(slots=True)
class JudgedSession:
    """A verdict and where it belongs: the session's trace and the span to hang it under."""

    session: RecordedSession
    verdict: Verdict
    trace_id: str
    parent_span_id: str
    reason: str  # why the trace was judged now: root, settled, idle, shutdown, evicted


@dataclass(slots=True)
class _OpenTrace:
    collector: OTLPCollector
    last_seen: float
    spans: int = 0
    root_span_id: str = ""
    any_span_id: str = ""
    session_spans: dict[str, str] = field(default_factory=dict)
    settling: bool = False  # a session span or a final answer was seen


@dataclass
class SpanCounts:
    """What happened to the spans the service accepted (every span lands in exactly one)."""

    judged: int = 0
    late: int = 0  # arrived after their trace was judged
    unreadable: int = 0  # the adapter could not read the trace (logged)
    over_limit: int = 0  # beyond the per-trace cap


class LiveSessions:
    """Not thread-safe: the service feeds and sweeps it from one event loop."""

    def __init__(
        self,
        policy: Policy,
        *,
        profile: str | None = None,
        idle_timeout_s: float = 30.0,
        settle_s: float = 2.0,
        max_traces: int = 10_000,
        max_spans_per_trace: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.policy = policy
        self.profile = profile
        self.idle_timeout_s = idle_timeout_s
        self.settle_s = settle_s
        self.max_traces = max_traces
        self.max_spans_per_trace = max_spans_per_trace
        # One memory of raw payload fingerprints for every open trace (bounded once, not per trace).
        self._payloads = PayloadFingerprints()
        self.clock = clock
        self.counts = SpanCounts()
        self._open: OrderedDict[str, _OpenTrace] = OrderedDict()  # least recently fed first
        self._judged: OrderedDict[str, None] = OrderedDict()

    @property
    def open_traces(self) -> int:
        return len(self._open)

    @property
    def open_spans(self) -> int:
        return sum(trace.spans for trace in self._open.values())

    def add(self, batch: TraceBatch) -> list[JudgedSession]:
        """Buffer one trace's spans; the sessions this completes (or evicts) come back judged."""
        trace_id = batch.trace_id
        if trace_id in self._judged:
            self.counts.late += batch.spans
            return []
        trace = self._open.get(trace_id)
        if trace is None:
            trace = self._open[trace_id] = _OpenTrace(OTLPCollector(self.policy, self._payloads), self.clock())
        else:
            self._open.move_to_end(trace_id)
            trace.last_seen = self.clock()
        if trace.spans + batch.spans > self.max_spans_per_trace:
            self.counts.over_limit += batch.spans
            return []
        try:
            if batch.document is not None:
                trace.collector.add_document(batch.document, f"trace {trace_id}", 1)
            else:
                for span, attrs in batch.decoded:
                    trace.collector.add_span(span, attrs, f"trace {trace_id}", 1)
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:  # as add_document says
            self.counts.unreadable += batch.spans
            logger.warning("agentguard serve: spans of %s not readable: %s: %s", trace_id, type(exc).__name__, exc)
            return []
        except InputError as exc:
            self.counts.unreadable += batch.spans
            logger.warning("agentguard serve: spans of %s not readable: %s", trace_id, exc)
            return []
        trace.spans += batch.spans
        trace.any_span_id = trace.any_span_id or batch.any_span_id
        trace.session_spans.update(batch.session_spans)
        trace.settling = trace.settling or batch.final_answer or bool(batch.session_spans)
        judged: list[JudgedSession] = []
        if batch.root_span_id:
            trace.root_span_id = batch.root_span_id
            judged.extend(self._judge(trace_id, "root"))
        while len(self._open) > self.max_traces:
            oldest = next(iter(self._open))
            judged.extend(self._judge(oldest, "evicted"))
        return judged

    def expire(self) -> list[JudgedSession]:
        """Judge every trace whose quiet period is over."""
        now = self.clock()
        due = [
            trace_id for trace_id, trace in self._open.items()
            if now - trace.last_seen >= (self.settle_s if trace.settling else self.idle_timeout_s)
        ]
        judged: list[JudgedSession] = []
        for trace_id in due:
            trace = self._open[trace_id]
            judged.extend(self._judge(trace_id, "settled" if trace.settling else "idle"))
        return judged

    def close(self) -> list[JudgedSession]:
        """Judge everything still open (shutdown)."""
        judged: list[JudgedSession] = []
        for trace_id in list(self._open):
            judged.extend(self._judge(trace_id, "shutdown"))
        return judged

    def _judge(self, trace_id: str, reason: str) -> list[JudgedSession]:
        trace = self._open.pop(trace_id)
        self._judged[trace_id] = None
        if len(self._judged) > _REMEMBERED_TRACES:
            self._judged.popitem(last=False)
        try:
            sessions = trace.collector.sessions()
            verdicts = [judge_recorded(session, self.policy, self.profile) for session in sessions]
        except InputError as exc:
            self.counts.unreadable += trace.spans
            logger.warning("agentguard serve: trace %s not judged: %s", trace_id, exc)
            return []
        self.counts.judged += trace.spans
        fallback = trace.root_span_id or trace.any_span_id
        return [
            JudgedSession(session, verdict, trace_id, trace.session_spans.get(session.session_id, fallback), reason)
            for session, verdict in zip(sessions, verdicts, strict=True)
        ]
