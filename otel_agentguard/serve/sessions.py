"""Live sessions of the service: spans buffered per trace, judged when the trace is done.

A trace is the unit: the Collector's ``loadbalancing`` exporter sends all spans of
a trace to the same replica, and inside a trace replay's collector resolves every
span's session (its own attributes, its parent chain, else the trace) exactly as
it does for a file. A trace is judged

- ``settle_s`` after its last span once its root span, a session span or a final answer
  has been seen, whichever span came last: a Collector exports batches concurrently and
  retries a refused one after later ones succeeded, so the root may come first;
- ``idle_timeout_s`` after its last span otherwise;
- at shutdown, or when more than ``max_traces`` are open (the least recently fed first).

A span that arrives for a trace already judged re-opens it while the trace is still
remembered whole (the last ``max_traces`` judged, for ``idle_timeout_s``): the trace
settles again and each session whose verdict changed gets an amended verdict. Past that,
the span is counted as late, never judged as a second session.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
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
    reason: str  # why the trace was judged now: settled, idle, shutdown, evicted, amended


@dataclass(slots=True)
class _OpenTrace:
    collector: OTLPCollector
    last_seen: float
    spans: int = 0
    root_span_id: str = ""
    any_span_id: str = ""
    session_spans: dict[str, str] = field(default_factory=dict)
    settling: bool = False  # its root, a session span or a final answer was seen
    judged_at: float = 0.0  # when it was last judged (0: never)
    # The spans as they came, to judge the trace again when late spans amend it (judging
    # hands the collector's spans over).
    batches: list[TraceBatch] = field(default_factory=list)
    # What each session was last judged (session id -> its verdict), to amend only what changed.
    verdicts: dict[str, Verdict] = field(default_factory=dict)


@dataclass(slots=True)
class Due:
    """A trace taken out of the open ones, to be judged now."""

    trace_id: str
    trace: _OpenTrace
    reason: str  # settled, idle, shutdown, evicted
    amending: bool  # judged before: only the sessions whose verdict changes are written


@dataclass
class SpanCounts:
    """What happened to the spans the service accepted (every span lands in exactly one)."""

    judged: int = 0
    late: int = 0  # arrived after their trace was judged and forgotten
    reopened: int = 0  # arrived after their trace was judged, in time to re-judge it (and amend what changed)
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
        self._judged: OrderedDict[str, None] = OrderedDict()  # ids of judged traces, to know late spans
        # Judged traces kept whole, to amend, oldest first: the last max_traces, for idle_timeout_s.
        self._whole: OrderedDict[str, _OpenTrace] = OrderedDict()

    @property
    def open_traces(self) -> int:
        return len(self._open)

    @property
    def open_spans(self) -> int:
        return sum(trace.spans for trace in self._open.values())

    def add(self, batch: TraceBatch) -> list[Due]:
        """Buffer one trace's spans; the traces this evicts come back, taken to be judged."""
        trace_id = batch.trace_id
        trace = self._open.get(trace_id)
        if trace is None and trace_id in self._judged:
            trace = self._whole.pop(trace_id, None)
            if trace is None:
                self.counts.late += batch.spans
                return []
            trace = self._open[trace_id] = self._reopened(trace_id, trace)  # it settles again
        if trace is None:
            trace = self._open[trace_id] = _OpenTrace(OTLPCollector(self.policy, self._payloads), self.clock())
        else:
            self._open.move_to_end(trace_id)
            trace.last_seen = self.clock()
        if trace.spans + batch.spans > self.max_spans_per_trace:
            self.counts.over_limit += batch.spans
            return []
        try:
            _feed(trace.collector, batch)
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:  # as add_document says
            self.counts.unreadable += batch.spans
            logger.warning("agentguard serve: spans of %s not readable: %s: %s", trace_id, type(exc).__name__, exc)
            return []
        except InputError as exc:
            self.counts.unreadable += batch.spans
            logger.warning("agentguard serve: spans of %s not readable: %s", trace_id, exc)
            return []
        trace.spans += batch.spans
        trace.batches.append(batch)
        if trace.judged_at:  # judged once: these count apart from the spans of its first verdict
            self.counts.reopened += batch.spans
        trace.any_span_id = trace.any_span_id or batch.any_span_id
        trace.session_spans.update(batch.session_spans)
        if batch.root_span_id:
            trace.root_span_id = batch.root_span_id
        trace.settling = trace.settling or batch.final_answer or bool(batch.session_spans) or bool(batch.root_span_id)
        due: list[Due] = []
        while len(self._open) > self.max_traces:
            due.append(self._take(next(iter(self._open)), "evicted"))
        return due

    def expire(self) -> list[Due]:
        """The traces whose quiet period is over, taken to be judged."""
        now = self.clock()
        quiet = [
            (trace_id, "settled" if trace.settling else "idle") for trace_id, trace in self._open.items()
            if now - trace.last_seen >= (self.settle_s if trace.settling else self.idle_timeout_s)
        ]
        due = [self._take(trace_id, reason) for trace_id, reason in quiet]
        self._forget(now)
        return due

    def shed(self) -> list[Due]:
        """Memory is short: forget the judged traces kept for amending, and take the older half
        of the open traces to be judged now (their verdicts may miss spans still to come)."""
        due = [self._take(trace_id, "evicted") for trace_id in list(self._open)[:(len(self._open) + 1) // 2]]
        self._whole.clear()  # (the ones taken just now too)
        return due

    def close(self) -> list[Due]:
        """Every trace still open (shutdown)."""
        return [self._take(trace_id, "shutdown") for trace_id in list(self._open)]

    def judge(self, due: list[Due]) -> list[JudgedSession]:
        """Judge taken traces at once (the service slices this work: :meth:`recorded`, :meth:`verdicts`)."""
        return [judged for item in due for judged in self.verdicts(item, self.recorded(item))]

    def recorded(self, due: Due) -> list[RecordedSession]:
        """The sessions of a taken trace, from its spans (the bulk of judging a large trace)."""
        try:
            sessions = due.trace.collector.sessions()
        except InputError as exc:
            self.counts.unreadable += due.trace.spans
            logger.warning("agentguard serve: trace %s not judged: %s", due.trace_id, exc)
            return []
        if not due.amending:
            self.counts.judged += due.trace.spans  # (late spans that re-open it are counted as reopened)
        return sessions

    def verdicts(self, due: Due, sessions: list[RecordedSession]) -> Iterator[JudgedSession]:
        """Each session's verdict, one at a time; on a trace judged before, only what changed."""
        trace = due.trace
        fallback = trace.root_span_id or trace.any_span_id
        for session in sessions:
            try:
                verdict = judge_recorded(session, self.policy, self.profile)
            except InputError as exc:
                logger.warning("agentguard serve: session %s not judged: %s", session.session_id, exc)
                continue
            before = trace.verdicts.get(session.session_id)
            trace.verdicts[session.session_id] = verdict
            if before is not None and _same(before, verdict):
                continue  # late spans that changed nothing of this session
            yield JudgedSession(session, verdict, due.trace_id, trace.session_spans.get(session.session_id, fallback),
                                "amended" if before is not None else due.reason)

    def _take(self, trace_id: str, reason: str) -> Due:
        trace = self._open.pop(trace_id)
        amending = bool(trace.judged_at)
        self._remember(trace_id, trace)
        return Due(trace_id, trace, reason, amending)

    # --- judged traces: kept whole for a while, to amend ------------------------------------

    def _remember(self, trace_id: str, trace: _OpenTrace) -> None:
        trace.judged_at = self.clock()
        self._judged[trace_id] = None
        self._judged.move_to_end(trace_id)
        if len(self._judged) > _REMEMBERED_TRACES:
            self._judged.popitem(last=False)
        self._whole[trace_id] = trace
        if len(self._whole) > self.max_traces:
            self._whole.popitem(last=False)

    def _reopened(self, trace_id: str, trace: _OpenTrace) -> _OpenTrace:
        """A judged trace, open again with its spans in a fresh collector."""
        trace.collector = OTLPCollector(self.policy, self._payloads)
        for batch in trace.batches:
            _feed(trace.collector, batch)  # read once already: no error now
        return trace

    def _forget(self, now: float) -> None:
        """Judged traces kept whole for ``idle_timeout_s`` are kept by their id only from then on."""
        whole = self._whole
        while whole and now - next(iter(whole.values())).judged_at >= self.idle_timeout_s:
            whole.popitem(last=False)


def _feed(collector: OTLPCollector, batch: TraceBatch) -> None:
    if batch.document is not None:
        collector.add_document(batch.document, f"trace {batch.trace_id}", 1)
    else:
        for span, attrs in batch.decoded:
            collector.add_span(span, attrs, f"trace {batch.trace_id}", 1)


def _same(before: Verdict, after: Verdict) -> bool:
    return (before.stop_reason, before.steps, before.tokens, len(before.alerts)) == \
        (after.stop_reason, after.steps, after.tokens, len(after.alerts))
