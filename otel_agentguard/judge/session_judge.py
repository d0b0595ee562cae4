"""The judge: one session's steps in, alerts and a stop_reason out.

The live span processor and the offline replay both feed steps to
:class:`SessionJudge`, so a replay reproduces exactly the alerts the live run
raised, at the same sequence numbers. The judge must see steps in sequence
order; live spans end out of order (parallel tool calls), so the processor
puts them back in order with a :class:`SequenceBuffer` first.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass, field
from typing import NamedTuple

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard._fork import renew_in_forked_children
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import LONGEST_CYCLE, Alert, Probe, ProbeFactory, SessionTotals, all_probes
from otel_agentguard.judge.steps import MODEL, TOOL, Step


@dataclass(frozen=True)
class Verdict:
    """How a session ended and why, with its totals and every alert."""

    session_id: str
    stop_reason: str
    profile: str
    policy_version: str
    steps: int
    tokens: int
    cost_usd: float
    model_calls: int
    duration_s: float
    alerts: tuple[Alert, ...]
    labels: dict[int, str] = field(default_factory=dict)  # sequence -> step id from a trajectory file
    final_answers: int = 0
    unchecked_answers: int = 0  # final answers no claim rule could read (their language)

    @property
    def stalled(self) -> bool:
        return self.stop_reason in A.PROBE_NAMES

    def label(self, sequence: int) -> str:
        return self.labels.get(sequence, str(sequence))


def _verdict(**fields: object) -> Verdict:
    """A :class:`Verdict` of every field, made without the frozen dataclass's ``__init__``,
    which sets its eleven fields one ``object.__setattr__`` call at a time (several
    microseconds, paid by every session, most of them a lone model call)."""
    verdict = object.__new__(Verdict)
    verdict.__dict__.update(fields)
    return verdict


def choose_stop_reason(
    alerts: tuple[Alert, ...] | list[Alert],
    *,
    interrupt: str | None = None,
    error: bool = False,
    explicit_finish: bool = False,
    final_answer: bool = False,
) -> str:
    """The documented precedence: an interrupt on purpose is never a failure; a fake
    completion outranks other alerts; else the first alert; then error,
    explicit finish, completed; a session that just stopped is abandoned."""
    if interrupt:
        return interrupt
    if alerts:
        if any(alert.probe == A.FAKE_COMPLETION for alert in alerts):
            return A.FAKE_COMPLETION
        return alerts[0].probe
    if error:
        return A.ERROR
    if explicit_finish:
        return A.EXPLICIT_FINISH
    if final_answer:
        return A.COMPLETED
    return A.ABANDONED


class LastAction(NamedTuple):
    """One of a session's last steps, as a breakpoint names it."""

    sequence: int
    kind: str
    name: str
    failed: bool


_LAST_ACTIONS = 5  # the breakpoint's "last actions"
_NONE_RAISED: list[Alert] = []  # never written: what a step that raised nothing returns
_ACTION_FIELDS = len(LastAction._fields)


class SessionJudge:
    """Judges one session, step by step. Not thread-safe: the caller serialises."""

    __slots__ = (
        "session_id", "policy", "profile", "totals", "_alerts", "_last", "_shared", "_by_kind", "_own", "_keep_calls",
        "_labels", "_last_end_ns", "_last_sequence",
    )

    def __init__(self, session_id: str, policy: Policy, profile: Profile | None = None, *, start_ns: int = 0,
                 last_actions: bool = True):
        """``last_actions``: keep the last steps a breakpoint names (:attr:`last_steps`);
        only a judge whose session can be stopped needs them."""
        self.session_id = session_id
        self.policy = policy
        self.profile = profile or policy.resolve_profile()
        self.totals = SessionTotals(start_ns)
        self._alerts: list[Alert] | None = None  # made at the first alert
        # The last actions, flat (sequence, kind, name, failed, sequence, ...): a step is not
        # kept alive for a breakpoint that only names it.
        self._last: tuple[object, ...] | None = () if last_actions else None
        # The probes are shared by every session of this profile; a session gets a list of
        # its own only when one of them fails here (and is dropped for this session).
        self._shared, self._by_kind, self._keep_calls = _probes_for(self.profile, policy)
        self._own: list[Probe] | None = None
        self._labels: dict[int, str] | None = None
        self._last_end_ns = start_ns
        self._last_sequence = 0

    @property
    def alerts(self) -> list[Alert]:
        """Every alert of the session so far, in the order raised."""
        if self._alerts is None:
            self._alerts = []
        return self._alerts

    @property
    def _probes(self) -> list[Probe]:
        """This session's own list of probes (made on first use)."""
        if self._own is None:
            self._own = list(self._shared)
        return self._own

    def observe(self, step: Step) -> list[Alert]:
        """Account for one step (in sequence order) and return the alerts it raised."""
        self._account(step)
        totals = self.totals
        raised: list[Alert] | None = None
        # The shared probes that read this kind of step (each still checks for itself).
        for probe in self._by_kind.get(step.kind, self._shared) if self._own is None else tuple(self._own):
            try:
                found = probe.observe(step, totals)
            except Exception as exc:  # deliberate: a failing probe is disabled, the others carry on
                self._probe_failed(probe, exc)
                continue
            if found:
                if raised is None:
                    raised = []
                raised.extend(found)
        if raised is None:
            return _NONE_RAISED
        self.alerts.extend(raised)
        return raised

    def _probe_failed(self, probe: Probe, exc: Exception) -> None:
        """A probe raised: it is disabled for this session (the others carry on), and reported."""
        self._probes.remove(probe)
        _internal_errors.report(f"probe.{probe.name}", exc)

    def observe_early(self, probe_name: str, step: Step) -> list[Alert]:
        """Run one probe on a step before the step itself is judged (enforce mode cutting a
        stream inside a span another instrumentation ends later). Probes raise an alert once,
        so judging the step later raises no second one."""
        for probe in self._shared if self._own is None else self._own:
            if probe.name == probe_name:
                found = probe.observe(step, self.totals) or []
                if found:
                    self.alerts.extend(found)
                return found
        return []

    def _account(self, step: Step) -> None:
        totals = self.totals
        # (Comparisons, not max(): this runs for every step.)
        if not totals.start_ns and step.start_ns:
            totals.start_ns = step.start_ns
        if step.end_ns > self._last_end_ns:
            self._last_end_ns = step.end_ns
        if step.sequence > self._last_sequence:
            self._last_sequence = step.sequence
        if step.kind == TOOL:
            totals.remember_call(step, self._keep_calls)
            totals.steps += 1
            if totals.final:  # a tool ran after an answer: it was not the run's last word (Google ADK
                totals.final = False  # marks every turn "stop" with content capture off)
                totals.steps -= 1  # (nor a step of its own: the turn's tool calls are)
            left = totals.open_tool_calls - 1  # never below 0, whatever a span said was asked for
            totals.open_tool_calls = left if left > 0 else 0
            if not step.failed:
                if step.empty is False:
                    totals.partial_result = True
                if step.effect == "write":
                    totals.wrote = True
                if step.name == self.policy.finish_tool:
                    totals.finished_explicitly = True
            if step.input_tokens or step.output_tokens:  # (a tool step seldom has any)
                totals.tokens += step.input_tokens + step.output_tokens
            if step.cost_usd is not None:
                totals.cost_usd += step.cost_usd
        else:
            totals.tokens += step.input_tokens + step.output_tokens
            totals.cost_usd += (step.cost_usd if step.cost_usd is not None
                                else self.policy.prices.cost(step.model, step.input_tokens, step.output_tokens))
            totals.model_calls += 1
            totals.open_tool_calls = step.tool_calls or 0  # a new turn: its batch is what is open now
            if step.final:
                totals.steps += 1
                totals.final = True
                totals.answers += 1
                if not step.claims_checked:
                    totals.unchecked_answers += 1
        last = self._last
        if last is not None:  # one exact-size tuple: a list would keep room to grow
            last += (step.sequence, step.kind, step.name, step.failed)
            self._last = last[_ACTION_FIELDS:] if len(last) > _LAST_ACTIONS * _ACTION_FIELDS else last
        if step.label is not None:
            if self._labels is None:
                self._labels = {}
            self._labels[step.sequence] = step.label

    @property
    def last_steps(self) -> list[LastAction]:
        """The session's last steps (at most five), oldest first; none when not kept."""
        last = self._last or ()
        return [LastAction(*last[at:at + _ACTION_FIELDS]) for at in range(0, len(last), _ACTION_FIELDS)]  # type: ignore[arg-type]

    @property
    def last_sequence(self) -> int:
        return self._last_sequence

    def finish(
        self, *, error: bool = False, interrupt: str | None = None, end_ns: int = 0, unfinished: bool = False
    ) -> Verdict:
        """The verdict. ``unfinished``: the session was cut off (evicted, shut down), so a
        final answer seen earlier does not make it ``completed``."""
        totals = self.totals
        stop_reason, duration_s = self.outcome(error=error, interrupt=interrupt, end_ns=end_ns, unfinished=unfinished)
        return _verdict(
            session_id=self.session_id,
            stop_reason=stop_reason,
            profile=self.profile.name,
            policy_version=self.policy.version,
            steps=totals.steps,
            tokens=totals.tokens,
            cost_usd=totals.cost_usd,
            model_calls=totals.model_calls,
            duration_s=duration_s,
            alerts=tuple(self._alerts or ()),
            labels=dict(self._labels or {}),
            final_answers=totals.answers,
            unchecked_answers=totals.unchecked_answers,
        )

    def outcome(self, *, error: bool = False, interrupt: str | None = None, end_ns: int = 0,
                unfinished: bool = False) -> tuple[str, float]:
        """The verdict's stop reason and duration (s), were the session to end at ``end_ns`` (or
        its last step's end, if later): :meth:`finish`'s, without the verdict."""
        totals = self.totals
        stop_reason = choose_stop_reason(self._alerts or (), interrupt=interrupt, error=error,
                                         explicit_finish=totals.finished_explicitly,
                                         final_answer=totals.final and not unfinished)
        start_ns = totals.start_ns
        end = end_ns if end_ns > self._last_end_ns else self._last_end_ns
        return stop_reason, max(end - start_ns, 0) / 1e9 if start_ns else 0.0


_SHARED_PROBES_MAX = 64
_shared_probes_lock = threading.Lock()
renew_in_forked_children(globals(), "_shared_probes_lock")
_ProbeSet = tuple[tuple[Probe, ...], dict[str, tuple[Probe, ...]], int]
# (id(profile), id(policy)) -> the objects themselves (held, so their ids stay theirs while
# cached), the probe factories they were built from, and the probes.
_shared_probes: dict[tuple[int, int], tuple[Policy, Profile, tuple[ProbeFactory, ...], _ProbeSet]] = {}


def _probes_for(profile: Profile, policy: Policy) -> _ProbeSet:
    """The probes of a profile, built once and shared by its sessions (they keep no session
    state of their own): all of them, those that read each kind of step (a probe's ``kinds``,
    else every kind), and how many of the last tool calls they read."""
    factories = all_probes()
    key = (id(profile), id(policy))
    found = _shared_probes.get(key)
    if found is not None and found[2] is factories:  # else the probes were swapped (tests do)
        return found[3]
    disabled = profile.disabled_probes
    probes = tuple(factory(profile, policy) for factory in factories if factory.name not in disabled)
    by_kind = {kind: tuple(probe for probe in probes if kind in getattr(probe, "kinds", (kind,)))
               for kind in (TOOL, MODEL)}
    keep = max(profile.window, LONGEST_CYCLE * profile.cycle_repeats)
    with _shared_probes_lock:  # sessions start on any thread
        if len(_shared_probes) >= _SHARED_PROBES_MAX:
            _shared_probes.pop(next(iter(_shared_probes)))  # the oldest: a profile no longer judged with
        _shared_probes[key] = (policy, profile, factories, (probes, by_kind, keep))
    return probes, by_kind, keep


class SequenceBuffer:
    """Releases steps in sequence order when they arrive out of order.

    Sequence numbers are assigned at span start; spans end in any order.
    A step waits until every lower number has ended or been skipped. A number
    that never ends (a leaked span) holds back at most ``max_pending`` steps
    before it is given up on, so memory stays bounded.
    """

    __slots__ = ("_next", "_pending", "_skipped", "_max_pending", "_arrivals")

    def __init__(self, first: int = 1, max_pending: int = 64):
        self._next = first
        # Made when a step first waits, a number is first skipped: steps usually end in order.
        self._pending: list[tuple[int, int, Step]] | None = None  # heap of (sequence, arrival, step)
        self._skipped: set[int] | None = None
        self._max_pending = max_pending
        self._arrivals = 0  # tie-breaker: steps themselves are not ordered

    def push(self, step: Step) -> list[Step]:
        sequence = step.sequence
        if sequence < self._next:
            return [step]  # late or duplicate: judge it now rather than never
        if sequence == self._next and not self._pending and not self._skipped:
            self._next = sequence + 1  # the usual case: the step it waits for, nothing held back
            return [step]
        if self._pending is None:
            self._pending = []
        self._arrivals += 1
        heapq.heappush(self._pending, (sequence, self._arrivals, step))
        return self._release()

    def skip(self, sequence: int) -> list[Step]:
        """A numbered span ended without being a step."""
        if sequence >= self._next:
            if self._skipped is None:
                self._skipped = set()
            self._skipped.add(sequence)
        return self._release()

    def drain(self) -> list[Step]:
        ready = [entry[2] for entry in sorted(self._pending)] if self._pending else []
        self._pending = None
        self._skipped = None
        if ready:
            self._next = ready[-1].sequence + 1
        return ready

    def _release(self) -> list[Step]:
        ready: list[Step] = []
        pending = self._pending or []
        skipped = self._skipped or set()
        while True:
            if self._next in skipped:
                skipped.discard(self._next)
                self._next += 1
            elif pending and pending[0][0] <= self._next:
                step = heapq.heappop(pending)[2]
                self._next = max(self._next, step.sequence + 1)
                ready.append(step)
            elif len(pending) > self._max_pending:
                self._next = pending[0][0]  # give up on the missing number
            else:
                if not pending:
                    self._pending = None  # drop the emptied containers: most sessions idle in order
                if not skipped:
                    self._skipped = None
                return ready
