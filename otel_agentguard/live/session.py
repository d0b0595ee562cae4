"""One agent session being judged live: its judge, its numbering and its open session span."""

from __future__ import annotations

import threading
from concurrent.futures import Future

from opentelemetry.sdk.trace import Span
from opentelemetry.trace import SpanContext

from otel_agentguard._fork import renew_in_forked_children
from otel_agentguard.judge.derived import DerivedTools
from otel_agentguard.judge.probes import Alert
from otel_agentguard.judge.session_judge import SequenceBuffer, SessionJudge
from otel_agentguard.live.enforcer import Enforcer

#: A final answer the model judge is reading: its sequence number, the judgement to come, when to
#: stop waiting, and (for an answer the claim rules decided by inference) their categories and rule.
Review = tuple[int, Future[tuple[str, ...] | None], float, tuple[tuple[str, ...], str | None] | None]


class SequenceCounter:
    """A session's sequence numbers; the counter outlives the session so a reused id keeps counting."""

    __slots__ = ("last",)

    def __init__(self, last: int = 0):
        self.last = last

    def next(self) -> int:
        with _numbering:
            self.last += 1
            return self.last


# One lock for every counter: an increment holds it for a moment, and a session then allocates
# no lock of its own for its numbers (nor one more object for the garbage collector to track).
# Every step's start in every session takes it: cheap under the GIL; a free-threaded build with
# many threads starting spans at once would want one per session again.
_numbering = threading.Lock()
renew_in_forked_children(globals(), "_numbering")


class LiveSession:
    """A live session. Its ``lock`` guards the judge, the buffer and the span writes."""

    __slots__ = (
        "session_id", "lock", "judge", "buffer", "sequence", "first_sequence", "session_span", "session_span_id",
        "last_context",
        "pending_alerts", "ended", "enforcer", "interrupt", "derived", "implicit", "last_response_id", "running",
        "reviews", "ends_with_trace",
    )

    def __init__(self, session_id: str, judge: SessionJudge, sequence: SequenceCounter, enforcer: Enforcer | None,
                 implicit: bool = False):
        self.session_id = session_id
        self.implicit = implicit  # no session id anywhere: the trace stands in for the session
        self.lock = threading.Lock()
        self.judge = judge
        self.sequence = sequence
        self.first_sequence = sequence.last + 1
        self.buffer = SequenceBuffer(first=self.first_sequence)
        self.session_span: Span | None = None
        self.session_span_id = 0  # of session_span, once attached
        self.last_context: SpanContext | None = None  # where a verdict span is parented
        # For the verdict span when no session span is open (a tuple: most sessions never hold one).
        self.pending_alerts: tuple[Alert, ...] = ()
        self.ended = False
        self.enforcer = enforcer  # None in observe mode
        self.interrupt: str | None = None  # steered, drained, dispatched or awaiting, once honoured
        # Tool calls only a model span recorded: made when a span first names one (most sessions' never do).
        self.derived: DerivedTools | None = None
        self.last_response_id: str | None = None  # of the last model step: a second span of it is no step
        # Step spans numbered at their start that have not ended yet, counted only where it is read:
        # in a session no id names, which may end with its trace (see LiveSessions.trace_over).
        self.running = 0
        self.reviews: tuple[Review, ...] = ()
        # Its steps said what they were only at their end: the span that names the run may still be
        # open around them, so the run ends with that span or its trace, not at a final answer.
        self.ends_with_trace = False

    def start_step(self) -> int:
        """The sequence number of a step span starting now; it runs until :meth:`step_span_ended`."""
        with _numbering:
            if self.implicit:
                self.running += 1
            self.sequence.last += 1
            return self.sequence.last

    def step_span_ended(self) -> None:
        if self.implicit:  # else never counted: a named session need not take the lock again
            with _numbering:  # the lock start_step counts under, so no count is lost between threads
                self.running -= 1

    def span_open(self) -> bool:
        return self.session_span is not None and self.session_span.is_recording()

    def attach_span(self, span: Span) -> None:
        """``span`` is this session's span: its end ends the session."""
        self.session_span = span
        self.session_span_id = span.get_span_context().span_id

    def stop_pending(self) -> bool:
        return self.enforcer is not None and self.enforcer.pending_stop is not None
