"""The live sessions of one guard: opening them, judging their steps, ending them.

Steps arrive as their spans end, in any order and from any thread; each
session's :class:`~otel_agentguard.judge.session_judge.SequenceBuffer` puts them back in
sequence order before its judge sees them. A session ends at its session
span's end, at its final answer when it has no session span, with its trace
when no id names it and the trace's root span is one of its steps, when it is
evicted (idle, or the store is full) and at shutdown; its verdict is written
once, by :mod:`otel_agentguard.live.verdicts`.

A lone call (a model or tool call made outside any span, with no session id
anywhere: its trace's root span and its only step, as most direct SDK calls
are) opens no session in observe mode. Its span is numbered 1 at its start
(its trace is new) and remembered; at its end its one step is judged on its
own, with the verdict and metrics its session would have had. Only when a
step starts inside it (an agent nested in a tool) does it become a session
like any other, which then counts on from its step 1.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.judge.claims import MODEL_JUDGE, WRITE
from otel_agentguard.judge.derived import DerivedTools
from otel_agentguard.judge.fingerprints.payloads import PayloadFingerprints
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.probes import Alert
from otel_agentguard.judge.session_judge import SessionJudge, Verdict
from otel_agentguard.judge.steps import MODEL, TOOL, Step
from otel_agentguard.judge.tool_calls import records_requested_calls
from otel_agentguard.live.duplicates import same_response
from otel_agentguard.live.enforcer import Enforcer
from otel_agentguard.live.metrics import GuardMetrics
from otel_agentguard.live.resolution import enclosing_session
from otel_agentguard.live.session import LiveSession, SequenceCounter
from otel_agentguard.live.store import SessionStore
from otel_agentguard.live.verdicts import VerdictWriter, wants_verdict_span, write_alerts

_MAX_REMEMBERED_COUNTERS = 10_000
# Lone calls running at once; beyond it, a lone call opens a session as any step does.
_MAX_LONE_CALLS = 10_000
# What a running lone call's session would be opened with: its start time, profile and task type
# (a plain tuple of atoms, which the garbage collector stops tracking; never the span itself).
LoneCall = tuple[int, Any, Any]
_NO_ALERTS: list[Alert] = []  # never written: what judging no step raised

logger = logging.getLogger(__name__)


class LiveSessions:
    """The sessions one processor judges, bounded by ``max_sessions`` and ``idle_timeout_s``."""

    # What every step span reads, in slots; the rest in the instance dict, where a method may also
    # be patched on one object.
    __slots__ = ("store", "lone", "payloads", "__dict__", "__weakref__")

    def __init__(self, policy: Policy, enforcing: bool, verdicts: VerdictWriter, metrics: GuardMetrics,
                 max_sessions: int, idle_timeout_s: float):
        self.policy = policy
        self._enforcing = enforcing
        self._verdicts = verdicts
        self._metrics = metrics
        self._limits = (max_sessions, idle_timeout_s)
        self.store = self._new_store()
        self.payloads = PayloadFingerprints()  # raw tool payloads of foreign spans, fingerprinted once
        self._told_unrecorded = False  # tool calls without arguments: said once, in the log
        # Counters of ended sessions, so a session id that comes back keeps counting (bounded): a
        # lone call's is its last number alone, an int the garbage collector does not track.
        self._counters: OrderedDict[str, SequenceCounter | int] = OrderedDict()
        self._counters_lock = threading.Lock()  # also guards the lone calls' claims
        # Running lone calls by session id, until a step inside one claims it for a session.
        self.lone: dict[str, LoneCall | LiveSession] = {}

    def _new_store(self) -> SessionStore[LiveSession]:
        max_sessions, idle_timeout_s = self._limits
        return SessionStore(self._evicted, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                            pinned=LiveSession.span_open)

    def after_fork(self) -> None:
        """In a forked child: no live sessions (they run in the parent), fresh locks."""
        self.store = self._new_store()
        self._counters = OrderedDict()
        self._counters_lock = threading.Lock()
        self.lone = {}

    def get(self, session_id: str) -> LiveSession | None:
        return self.store.get(session_id)

    def peek(self, session_id: str) -> LiveSession | None:
        """The live session, not counted as activity (its span's start was)."""
        return self.store.peek(session_id)

    def open(self, session_id: str, attrs: Mapping[str, Any], parent_context: Any, start_ns: int,
             implicit: bool) -> LiveSession:
        """The live session ``session_id``, opened now if it is not live yet."""
        session = self.store.get(session_id)
        if session is None:  # built outside the store's lock: a session reads the policy and may log
            session = (self._claim_lone_call(session_id) if session_id in self.lone else None) or \
                self._new_session(session_id, attrs, parent_context, start_ns, implicit)
            session = self.store.add(session_id, session)
        return session

    def _new_session(self, session_id: str, attrs: Mapping[str, Any], parent_context: Any, start_ns: int,
                     implicit: bool, sequence: SequenceCounter | None = None) -> LiveSession:
        # An implicit session has no session in its context: none encloses it.
        enclosing = None if implicit else enclosing_session(parent_context)
        profile = attrs.get(A.PROFILE) or (enclosing.profile if enclosing else None)
        task_type = attrs.get(A.TASK_TYPE) or (enclosing.task_type if enclosing else None)
        chosen = self.policy.resolve_profile(profile, task_type)
        if sequence is None:
            with self._counters_lock:
                remembered = self._counters.pop(session_id, 0)
            sequence = remembered if isinstance(remembered, SequenceCounter) else SequenceCounter(remembered)
        enforcer = Enforcer(self.policy.escalation) if self._enforcing else None
        # Only enforce mode names the last actions (in a stop's breakpoint).
        judge = SessionJudge(session_id, self.policy, chosen, start_ns=start_ns, last_actions=self._enforcing)
        return LiveSession(session_id, judge, sequence, enforcer, implicit)

    # --- lone calls -------------------------------------------------------------------------
    def start_lone_call(self, session_id: str, attrs: Mapping[str, Any], start_ns: int) -> int | None:
        """A step span starting as its trace's root, with no session anywhere: its sequence
        number (1); or None, and it opens a session as any step does, when its session id is
        known already (a trace id reused) or too many lone calls run at once."""
        lone = self.lone
        if lone:
            self._end_idle_lone_call(start_ns)
            if len(lone) >= _MAX_LONE_CALLS or session_id in lone:
                return None
        if session_id in self._counters or self.store.peek(session_id) is not None:
            return None
        lone[session_id] = (start_ns, attrs.get(A.PROFILE), attrs.get(A.TASK_TYPE))
        return 1

    def _end_idle_lone_call(self, now_ns: int) -> None:
        """The oldest lone call, if it has run longer than the idle timeout (its span never
        ended, say), ends unfinished as an idle session is evicted: counted, never dropped."""
        first = next(iter(self.lone.items()), None)
        if first is None:
            return
        oldest, entry = first
        if isinstance(entry, tuple) and now_ns - entry[0] > self._limits[1] * 1e9:
            session = self._claim_lone_call(oldest)
            if session is not None and self.lone.pop(oldest, None) is session:
                self.end(session, unfinished=True)

    def _claim_lone_call(self, session_id: str) -> LiveSession | None:
        """The session a running lone call would have opened at its start, its step 1 running,
        for a step starting inside it (or its own end, when it cannot be judged alone); made once,
        kept in :attr:`lone` until the call ends. None when the lone call is over."""
        entry = self.lone.get(session_id)
        if isinstance(entry, LiveSession):
            return None if entry.ended else entry
        if entry is None:
            return None
        # Its own counter, so that a claim given up below takes no remembered number with it.
        claim = self._lone_call_session(session_id, entry, SequenceCounter())
        with self._counters_lock:
            entry = self.lone.get(session_id)
            if entry is None:  # it ended meanwhile, judged alone: a new session counts on after it
                return None
            if isinstance(entry, LiveSession):  # another step claimed it first
                return None if entry.ended else entry
            self.lone[session_id] = claim
        return claim

    def end_lone_call(self, session_id: str, stored: LiveSession | None, step: Step,
                      span: ReadableSpan) -> LiveSession | None:
        """A lone call's span ended with its one step: the session that claimed it (or one stored
        under its id) to judge the step in; else None, the step judged alone (its number is
        remembered, so a late span of its trace counts on from 2), or the call ended already."""
        with self._counters_lock:
            entry = self.lone.pop(session_id, None)
            if stored is None and entry is not None and not isinstance(entry, LiveSession):
                self._remember_counter(session_id, 1)
        found = stored or entry
        if found is None or isinstance(found, LiveSession):
            return found
        self._judge_lone_call(step, found, span)
        return None

    def lone_call_session(self, session_id: str, stored: LiveSession | None) -> LiveSession | None:
        """The session an ending lone call would have opened, stored, for a step judging alone
        does not fit (one that names tool calls to derive, or no step after all). Claimed before
        its entry goes, so a step starting meanwhile joins the same session."""
        session = self._claim_lone_call(session_id)
        if session is not None:
            stored = self.store.add(session_id, session)
        self.lone.pop(session_id, None)
        return stored

    def _lone_call_session(self, session_id: str, call: LoneCall, sequence: SequenceCounter) -> LiveSession:
        start_ns, profile, task_type = call
        session = self._new_session(session_id, {A.PROFILE: profile, A.TASK_TYPE: task_type}, None, start_ns,
                                    implicit=True, sequence=sequence)
        session.start_step()  # the lone call's own step, numbered 1 at its start
        return session

    @staticmethod
    def asks_for_no_calls(kind: str | None, attrs: Mapping[str, Any]) -> bool:
        """Whether a step names no tool call a later span may answer: a tool step, or a model
        step without the captured output that names its calls."""
        return kind == TOOL or (kind is not None and not records_requested_calls(attrs))

    def _judge_lone_call(self, step: Step, call: LoneCall, span: ReadableSpan) -> None:
        """A lone call's one step, judged as the session it would have opened would judge it,
        ended with the step (unfinished, unless the step is a final answer): the alerts, the
        verdict, a verdict span only where that session would have one, and the metrics."""
        start_ns, profile_name, task_type = call
        profile = self.policy.resolve_profile(profile_name, task_type)
        judge = SessionJudge(step.session_id, self.policy, profile, start_ns=start_ns, last_actions=False)
        raised = judge.observe(step)
        if raised:
            self.count(raised, profile.name)
        end_ns, unfinished = time.time_ns(), not step.final
        if wants_verdict_span(raised, judge.totals, implicit=True):
            verdict = judge.finish(end_ns=end_ns, unfinished=unfinished)
            self._verdicts.verdict_span(step.session_id, span.get_span_context(), verdict, raised)
            self._metrics.session_ended(verdict)
        else:  # the usual model call alone: its verdict goes to the metrics only, so none is made
            stop_reason, duration_s = judge.outcome(end_ns=end_ns, unfinished=unfinished)
            totals = judge.totals
            self._metrics.session_recorded(stop_reason, profile.name, totals.steps, totals.tokens, duration_s,
                                           totals.answers, totals.unchecked_answers)

    # --- steps ---------------------------------------------------------------------------------
    def step_ended(self, session: LiveSession, kind: str, step: Step, attrs: Mapping[str, Any],
                   span: ReadableSpan) -> None:
        """A step span ended: derive what it implies, release what is in order, judge it."""
        if step.kind == TOOL and step.args_fingerprint is None and not self._told_unrecorded:
            self._told_unrecorded = True
            logger.warning(
                "otel_agentguard: tool calls arrive without their arguments (first: %r); tool_loop and "
                "cycle cannot tell a repeated call from distinct ones until the instrumentation records "
                "them (its content capture switch)", span.name)
        with session.lock:
            if step.final and session.reviews:
                step = _held_back(step, session)
            if kind == TOOL and not session.derived:
                # The usual tool step: no response to compare, no derived step waiting on it.
                session.last_context = span.get_span_context()
                released = session.buffer.push(step)
            else:
                repeated, session.last_response_id = same_response(kind, attrs, session.last_response_id)
                if repeated:  # the same model call seen a second time
                    released = session.buffer.skip(step.sequence)
                else:
                    session.last_context = span.get_span_context()
                    released = self._derive(session, kind, attrs, span)
                    released.extend(session.buffer.push(step))
            # Judged under the same lock that released them: steps are judged in sequence order
            # whichever thread releases them.
            raised, final = self._observe(session, released)
        if raised or final:
            self._judged(session, raised, final)

    def skip(self, session: LiveSession, sequence: int) -> None:
        """A numbered span that is no step after all (or whose step was lost): fill its place."""
        with session.lock:
            raised, final = self._observe(session, session.buffer.skip(sequence))
        self._judged(session, raised, final)

    def _derive(self, session: LiveSession, kind: str, attrs: Mapping[str, Any], span: ReadableSpan) -> list[Step]:
        """Tool steps only a model span recorded, released in order (under the session lock)."""
        released: list[Step] = []
        waiting = session.derived
        if not waiting and self.asks_for_no_calls(kind, attrs):
            # No requested call waits for a tool span to answer it, and this span asks for none
            # that could be read (a model span without captured content names no call).
            return released
        if waiting is None:
            waiting = session.derived = DerivedTools(session.session_id, session.judge.policy)
        try:
            derived, unused = waiting.on_step(
                kind, attrs, span_name=span.name, start_ns=span.start_time or 0, end_ns=span.end_time or 0,
                next_sequence=session.sequence.next,
            )
        except Exception as exc:  # deliberate: lose the derived steps, not the span's own step
            _internal_errors.report("processor.derived", exc)
            return released
        for sequence in unused:
            released.extend(session.buffer.skip(sequence))
        for step in derived:
            released.extend(session.buffer.push(step))
        return released

    def _observe(self, session: LiveSession, steps: list[Step]) -> tuple[list[Alert], bool]:
        """Judge released steps (under the session lock): the alerts raised, and whether one was final."""
        if not steps or session.ended:
            return _NO_ALERTS, False
        final = False
        raised = _NO_ALERTS
        for step in steps:
            found = session.judge.observe(step)
            if session.enforcer is not None:
                session.enforcer.on_step(step)
                for alert in found:
                    session.enforcer.on_alert(alert)
            if found:
                raised = raised + found  # (a new list: _NO_ALERTS is never written)
            final = final or step.final
        if raised:
            write_alerts(session, raised)
        return raised, final

    def _judged(self, session: LiveSession, raised: list[Alert], final: bool) -> None:
        """After judging, outside the lock: count the alerts; a final answer may end the session."""
        if raised:
            self.count(raised, session.judge.profile.name)
        if final and session.session_span is None and not session.ends_with_trace and not session.stop_pending():
            # Without a session span, the final answer is where the session ends (unless
            # the guard is about to refuse that answer: the stop ends it then). An answer the
            # model judge is still reading ends it when the judge has answered, off this thread.
            pending = [review for _, review, _, _ in session.reviews if not review.done()]
            if pending:
                pending[-1].add_done_callback(lambda _: self._close_quietly(session))
            else:
                self.close(session)

    def _close_quietly(self, session: LiveSession) -> None:
        try:
            self.close(session)
        except Exception as exc:  # deliberate: on the judge's thread, nobody to raise to
            _internal_errors.report("processor.review", exc)

    def review_answer(self, session_id: str, sequence: int, review: Future[tuple[str, ...] | None],
                      held: tuple[tuple[str, ...], str | None] | None = None) -> None:
        """The model judge reads a final answer of a live session: its end waits for the verdict
        (as long as the judge's time budget allows). ``held``: the categories and rule the claim
        rules gave an answer they decided by inference, which stand if the judge cannot say;
        None for an answer they could not read."""
        session = self.store.peek(session_id)
        judge = self.policy.claims.model_judge
        if session is None or judge is None:
            return  # (a lone call, or a session that ended: the answer stays unchecked)
        with session.lock:
            session.reviews += ((sequence, review, time.monotonic() + 2 * judge.timeout_s, held),)

    def count(self, alerts: list[Alert], profile: str) -> None:
        for alert in alerts:
            self._metrics.stall(alert, profile)

    # --- ending --------------------------------------------------------------------------------
    def close(self, session: LiveSession, *, error: bool = False, unfinished: bool = False,
              named: str | None = None) -> Verdict | None:
        """End a live session now (its session span ends, its final answer came, or its trace ended).
        ``named``: the id its agent span gave it at the end, for a session judged under its trace's
        id until then (the verdict carries the name)."""
        if self.store.pop(session.session_id) is not session:
            return None  # already ended (or never live)
        if named is not None and named != session.session_id:
            session.session_id = session.judge.session_id = named
        return self.end(session, error=error, unfinished=unfinished)

    def trace_over(self, session: LiveSession) -> None:
        """The session's trace ended here with its root span (one of its steps, or the app's span
        around the run), and no id names the session, or its steps said what they were only at
        their end: nothing more is coming, so it ends now. Unless another of its steps still runs,
        or a stop waits for the wrapper to raise it."""
        if session.running <= 0 and not session.stop_pending():
            # (a run that gave its final answer is over, not abandoned: one judged at its trace's end)
            self.close(session, unfinished=not session.judge.totals.final)

    def end_all(self) -> None:
        """Shutdown: every session ends, a running lone call's too (as the session it would have opened)."""
        for session_id in list(self.lone):
            claimed = self._claim_lone_call(session_id)
            if claimed is not None:
                self.store.add(session_id, claimed)
        self.lone.clear()
        for session in self.store.drain():
            self.end(session, unfinished=True)

    def _evicted(self, session: LiveSession) -> None:
        try:
            self.end(session, unfinished=True)
        except Exception as exc:  # deliberate
            _internal_errors.report("processor.evict", exc)

    def end(self, session: LiveSession, *, error: bool = False, unfinished: bool = False) -> Verdict | None:
        """End a session (already out of the store): judge what is buffered, write the verdict.

        ``unfinished`` (evicted or shut down): a probe's finding or the finish tool
        still names the stop reason; otherwise the session is ``abandoned``.
        """
        judged, decided = _reviewed(session)  # (waits outside the lock, at most the judge's time budget)
        with session.lock:
            if session.ended:
                return None
            session.ended = True
            if session.implicit and self.lone.get(session.session_id) is session:
                self.lone.pop(session.session_id, None)  # a claimed lone call's: ended, it is claimed no more
            raised = []
            unanswered = session.derived.flush() if session.derived is not None else ()
            waiting = [s for step in unanswered for s in session.buffer.push(step)] if unanswered else []
            for step in waiting + session.buffer.drain():
                raised.extend(session.judge.observe(step))
            if decided:  # answers the rules could not read and the model judge did
                totals = session.judge.totals
                totals.unchecked_answers = max(0, totals.unchecked_answers - decided)
            for sequence, rule in judged:  # a claim, by the model judge (or the rules it could not overrule)
                raised.extend(_judged_as_at_its_step(session, Step(
                    session.session_id, sequence, MODEL, "", final=True, claims=(WRITE,), claim_rule=rule)))
            verdict = session.judge.finish(error=error, interrupt=session.interrupt, end_ns=time.time_ns(),
                                           unfinished=unfinished)
            span = session.session_span
            on_span = span is not None and span.is_recording()
            if on_span:
                self._verdicts.on_session_span(span, verdict, raised)
        self.count(raised, verdict.profile)
        if not on_span and wants_verdict_span(verdict.alerts, session.judge.totals, implicit=session.implicit,
                                              interrupted=session.interrupt is not None,
                                              unanswered=len(unanswered)):
            self._verdicts.verdict_span(session.session_id, session.last_context, verdict,
                                        [*session.pending_alerts, *raised])
        self._metrics.session_ended(verdict)
        with self._counters_lock:
            self._remember_counter(session.session_id, session.sequence)
        return verdict

    def _remember_counter(self, session_id: str, counter: SequenceCounter | int) -> None:
        """Keep an ended session's counter (under ``_counters_lock``), the oldest dropped past the bound."""
        self._counters[session_id] = counter
        if len(self._counters) > _MAX_REMEMBERED_COUNTERS:
            self._counters.popitem(last=False)


def _held_back(step: Step, session: LiveSession) -> Step:
    """A final answer the model judge reads (under the session lock): after a write that
    succeeded its claim would be no fake completion, so the judge's answer is not waited for;
    otherwise the claim the rules inferred waits for the judge (see :func:`_reviewed`)."""
    for index, (sequence, _, _, held) in enumerate(session.reviews):
        if sequence != step.sequence:
            continue
        if session.judge.totals.wrote:
            session.reviews = session.reviews[:index] + session.reviews[index + 1:]
        elif held is not None and step.claims:
            return dataclasses.replace(step, claims=(), claim_rule=None, claim_clause=None)
        break
    return step


def _judged_as_at_its_step(session: LiveSession, step: Step) -> list[Alert]:
    """``fake_completion`` for an answer judged at the session's end as it would have been at its
    step: no write succeeded before it (see :func:`_held_back`), so writes after it do not count."""
    totals = session.judge.totals
    wrote, totals.wrote = totals.wrote, False
    try:
        return session.judge.observe_early(A.FAKE_COMPLETION, step)
    finally:
        totals.wrote = wrote


def _reviewed(session: LiveSession) -> tuple[list[tuple[int, str | None]], int]:
    """The answers that claim a write, by the model judge (or, where it could not say, by the
    rules that decided them by inference): their sequence numbers and deciding rules; and how
    many answers the rules could not read the judge did. Each judgement is waited for until its
    deadline; an unread answer not judged by then stays unchecked."""
    claimed = []
    decided = 0
    for sequence, review, deadline, held in session.reviews:
        try:
            categories = review.result(timeout=max(0.0, deadline - time.monotonic()))
        except Exception:  # deliberate: a judge that is late or failed says nothing
            categories = None
        rule: str | None = MODEL_JUDGE
        if categories is None and held is not None:  # the judge fails open: the rules' verdict stands
            categories, rule = held
        elif categories is not None and held is None:
            decided += 1
        if categories and WRITE in categories:
            claimed.append((sequence, rule))
    return claimed, decided
