"""The guard's OpenTelemetry instruments (names are public: dashboards and alert rules use them).

Labels are low-cardinality by construction: stop reasons, profiles, probe and
budget-kind names. A session id or a tool argument never becomes a label.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import metrics

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.judge.probes import Alert
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.version import __version__

_STEP_BUCKETS = (1, 2, 4, 6, 8, 10, 12, 15, 18, 24, 32, 48, 64, 128)
_TOKEN_BUCKETS = (250, 500, 1000, 2000, 4000, 6000, 8000, 16000, 32000, 64000, 128000)
_MAX_SEEDED_PROFILES = 64  # profiles come from the policy; bound them all the same
_DURATION_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800)


def _histogram(meter: metrics.Meter, name: str, unit: str, description: str, buckets: tuple[float, ...]) -> Any:
    try:
        return meter.create_histogram(name, unit=unit, description=description,
                                      explicit_bucket_boundaries_advisory=list(buckets))
    except TypeError:  # opentelemetry-api before the bucket advisory
        return meter.create_histogram(name, unit=unit, description=description)


class GuardMetrics:
    def __init__(self, meter_provider: metrics.MeterProvider | None = None):
        meter = metrics.get_meter("otel_agentguard", __version__, meter_provider)
        self._sessions = meter.create_counter(
            A.METRIC_SESSIONS, unit="{session}", description="Sessions judged, by stop_reason and profile")
        self._stalls = meter.create_counter(
            A.METRIC_STALLS, unit="{stall}", description="Stall alerts raised, by probe")
        self._final_answers = meter.create_counter(
            A.METRIC_FINAL_ANSWERS, unit="{answer}",
            description="Final answers, by whether the claim rules could read them (agentguard.claims.checked)")
        self._internal_errors = meter.create_counter(
            A.METRIC_INTERNAL_ERRORS, unit="{error}", description="Failures contained inside the guard, by kind")
        self._steps = _histogram(meter, A.METRIC_SESSION_STEPS, "{step}",
                                 "Steps per session (tool steps plus the final answer)", _STEP_BUCKETS)
        self._tokens = _histogram(meter, A.METRIC_SESSION_TOKENS, "{token}", "Tokens per session", _TOKEN_BUCKETS)
        self._duration = _histogram(meter, A.METRIC_SESSION_DURATION, "s", "Session wall time", _DURATION_BUCKETS)
        self._seeded: set[str] = set()
        _internal_errors.add_listener(self.internal_error)

    def close(self) -> None:
        _internal_errors.remove_listener(self.internal_error)

    def _seed(self, profile: str) -> None:
        """Start every series of a profile not seeded yet at zero: a counter series that first
        appears at 1 hides its first increase from rate() and increase(). (Its callers test
        whether it is seeded: they are asked at every alert and session.)"""
        if len(self._seeded) >= _MAX_SEEDED_PROFILES:
            return
        self._seeded.add(profile)
        for reason in A.STOP_REASONS:
            self._sessions.add(0, {A.STOP_REASON: reason, A.PROFILE: profile})
        for probe in A.PROBE_NAMES:
            if probe != A.BUDGET_EXCEEDED:
                self._stalls.add(0, {A.PROBE: probe, A.PROFILE: profile})
        for kind in A.BUDGET_KINDS:
            self._stalls.add(0, {A.PROBE: A.BUDGET_EXCEEDED, A.PROFILE: profile, A.BUDGET_KIND: kind})
        for checked in (True, False):
            self._final_answers.add(0, {A.CLAIMS_CHECKED: checked, A.PROFILE: profile})

    def stall(self, alert: Alert, profile: str) -> None:
        if profile not in self._seeded:
            self._seed(profile)
        labels = {A.PROBE: alert.probe, A.PROFILE: profile}
        if alert.budget_kind:
            labels[A.BUDGET_KIND] = alert.budget_kind
        self._stalls.add(1, labels)

    def session_ended(self, verdict: Verdict) -> None:
        self.session_recorded(verdict.stop_reason, verdict.profile, verdict.steps, verdict.tokens, verdict.duration_s,
                              verdict.final_answers, verdict.unchecked_answers)

    def session_recorded(self, stop_reason: str, profile: str, steps: int, tokens: int, duration_s: float,
                         answers: int = 0, unchecked: int = 0) -> None:
        """A session's end, from the verdict's fields (a lone model call's verdict is made for nothing else)."""
        if profile not in self._seeded:
            self._seed(profile)
        labels = {A.STOP_REASON: stop_reason, A.PROFILE: profile}
        self._sessions.add(1, labels)
        self._steps.record(steps, labels)
        self._tokens.record(tokens, labels)
        self._duration.record(duration_s, labels)
        if answers:
            if answers > unchecked:
                self._final_answers.add(answers - unchecked, {A.CLAIMS_CHECKED: True, A.PROFILE: profile})
            if unchecked:
                self._final_answers.add(unchecked, {A.CLAIMS_CHECKED: False, A.PROFILE: profile})

    def internal_error(self, kind: str) -> None:
        self._internal_errors.add(1, {"kind": kind})
