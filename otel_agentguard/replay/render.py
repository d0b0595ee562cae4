"""Text and JSON output of the replay, check and report commands."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from otel_agentguard import attributes as A
from otel_agentguard.judge.probes import Alert
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.replay.recorded import RecordedSession

Judged = tuple[RecordedSession, Verdict]


# --- replay -----------------------------------------------------------------------------------


def alert_json(alert: Alert, verdict: Verdict) -> dict[str, Any]:
    data: dict[str, Any] = {
        "probe": alert.probe,
        "evidence": list(alert.evidence),
        "detail": alert.detail,
        "disposal": alert.disposal,
        "sequence": alert.sequence,
    }
    if alert.budget_kind:
        data["budget_kind"] = alert.budget_kind
    if alert.offsets is not None:
        data["offsets"] = list(alert.offsets)  # output_repetition: first and triggering repetition
    if verdict.labels:
        data["evidence_ids"] = [verdict.label(seq) for seq in alert.evidence]
    return data


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    return {
        "session_id": verdict.session_id,
        "stop_reason": verdict.stop_reason,
        "profile": verdict.profile,
        "policy_version": verdict.policy_version,
        "steps": verdict.steps,
        "tokens": verdict.tokens,
        "cost_usd": round(verdict.cost_usd, 6),
        "model_calls": verdict.model_calls,
        "duration_s": round(verdict.duration_s, 3),
        "alerts": [alert_json(alert, verdict) for alert in verdict.alerts],
    }


def replay_json(judged: Sequence[Judged], compared: Sequence[Verdict] | None = None) -> dict[str, Any]:
    sessions = []
    for index, (session, verdict) in enumerate(judged):
        data = verdict_json(verdict)
        data["source"] = session.source
        if session.title:
            data["title"] = session.title
        if compared is not None:
            other = verdict_json(compared[index])
            data["compare"] = {key: other[key] for key in ("profile", "stop_reason", "steps", "tokens", "alerts")}
        sessions.append(data)
    return {"sessions": sessions}


def replay_table(judged: Sequence[Judged], compared: Sequence[Verdict] | None = None) -> str:
    lines: list[str] = []
    for index, (session, verdict) in enumerate(judged):
        title = f" - {session.title}" if session.title else ""
        lines.append(f"session {verdict.session_id}{title}")
        lines.append(
            f"  {_short_path(session.source)} | profile {verdict.profile} | {verdict.steps} {STEPS_MEANING} | "
            f"{verdict.tokens:,} tokens | {_flagged(verdict.cost_usd, '${:.4f}')} | "
            f"{_flagged(verdict.duration_s, '{:.1f}s')}"
        )
        lines.append(f"  stop_reason: {verdict.stop_reason}")
        lines.extend(_alert_lines(verdict, "  "))
        if compared is not None:
            other = compared[index]
            if other.profile == verdict.profile:
                lines.append(f"  under profile {other.profile}: the session's own profile, same verdict")
            else:
                lines.append(f"  under profile {other.profile}: {other.stop_reason}"
                             + ("" if other.alerts else " (no alerts)"))
                lines.extend(_alert_lines(other, "    "))
        lines.append("")
    lines.append(_summary(v for _, v in judged))
    return "\n".join(lines)


# Two counts users meet: the step total (what max_steps limits) and the sequence numbers alerts
# and evidence point at (every model and tool call has one). Each line says which it shows.
STEPS_MEANING = "steps (tool calls + final answer)"
SEQUENCE_MEANING = "sequence numbers count model and tool calls"


def alert_line(verdict: Verdict, alert: Alert) -> str:
    """``tool_loop at seq 6; evidence: seq 2 4 6 (...)``, or the step ids a trajectory file gave."""
    kind = f" ({alert.budget_kind})" if alert.budget_kind else ""
    numbers = (alert.sequence, *alert.evidence)
    if all(seq in verdict.labels for seq in numbers):
        evidence = " ".join(verdict.labels[seq] for seq in alert.evidence)
        return f"{alert.probe}{kind} at step {verdict.labels[alert.sequence]}; evidence: {evidence}"
    evidence = " ".join(verdict.label(seq) for seq in alert.evidence)
    return f"{alert.probe}{kind} at seq {verdict.label(alert.sequence)}; evidence: seq {evidence} ({SEQUENCE_MEANING})"


def _alert_lines(verdict: Verdict, indent: str) -> list[str]:
    lines = []
    for alert in verdict.alerts:
        lines.append(f"{indent}! {alert_line(verdict, alert)}")
        lines.append(f"{indent}    {alert.detail}")
        lines.append(f"{indent}    disposal: {alert.disposal}")
    return lines


def _summary(verdicts: Any) -> str:
    verdicts = list(verdicts)
    reasons = Counter(v.stop_reason for v in verdicts)
    stalled = sum(count for reason, count in reasons.items() if reason in A.PROBE_NAMES)
    parts = ", ".join(f"{reason} {count}" for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))
    if not verdicts:
        return "no sessions found"
    return f"{counted(len(verdicts), 'session')}, {stalled} stalled ({parts})"


# --- check ------------------------------------------------------------------------------------


@dataclass
class CheckOutcome:
    session: RecordedSession
    verdict: Verdict
    expected_stop: bool
    stopped: bool
    missing: tuple[str, ...]  # expected probes that were not raised

    @property
    def ok(self) -> bool:
        return self.expected_stop == self.stopped and not self.missing


def check_outcomes(judged: Sequence[Judged]) -> tuple[list[CheckOutcome], int]:
    """Outcomes of the labelled sessions, and how many sessions had no label."""
    outcomes = []
    unlabelled = 0
    for session, verdict in judged:
        if session.expect is None:
            unlabelled += 1
            continue
        raised = {alert.probe for alert in verdict.alerts}
        outcomes.append(CheckOutcome(
            session=session,
            verdict=verdict,
            expected_stop=not session.expect.must_pass,
            stopped=bool(verdict.alerts),
            missing=tuple(p for p in session.expect.must_stop if p not in raised),
        ))
    return outcomes, unlabelled


def check_table(outcomes: Sequence[CheckOutcome], unlabelled: int) -> str:
    lines = []
    for outcome in outcomes:
        expect = outcome.session.expect
        wanted = f"must stop [{', '.join(expect.must_stop)}]" if expect and expect.must_stop else "must pass"
        raised = ", ".join(alert.probe for alert in outcome.verdict.alerts) or "no alerts"
        status = "ok  " if outcome.ok else "MISS"
        lines.append(f"{status} {outcome.session.session_id}: {wanted}; got {outcome.verdict.stop_reason} ({raised})")
        if outcome.missing:
            lines.append(f"     missing: {', '.join(outcome.missing)}")
    counts = Counter((o.expected_stop, o.stopped) for o in outcomes)
    lines += [
        "",
        "               stopped  passed",
        f"  must stop   {counts[(True, True)]:>7}  {counts[(True, False)]:>6}",
        f"  must pass   {counts[(False, True)]:>7}  {counts[(False, False)]:>6}",
        "",
    ]
    probe_lines = _probe_confusion(outcomes)
    if probe_lines:
        lines += ["  probe              expected  raised  missed", *probe_lines, ""]
    misses = sum(1 for o in outcomes if not o.ok)
    tail = f", {unlabelled} unlabelled (not checked)" if unlabelled else ""
    lines.append(f"{counted(len(outcomes), 'labelled session')}, {counted(misses, 'miss', 'misses')}{tail}")
    return "\n".join(lines)


def counted(number: int, one: str, many: str | None = None) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{number} {one if number == 1 else many or one + 's'}"


def _probe_confusion(outcomes: Sequence[CheckOutcome]) -> list[str]:
    lines = []
    for probe in A.PROBE_NAMES:
        expected = [o for o in outcomes if o.session.expect and probe in o.session.expect.must_stop]
        raised = sum(1 for o in outcomes if any(a.probe == probe for a in o.verdict.alerts))
        if not expected and not raised:
            continue
        missed = sum(1 for o in expected if probe in o.missing)
        lines.append(f"  {probe:<18} {len(expected):>8}  {raised:>6}  {missed:>6}")
    return lines


def check_json(outcomes: Sequence[CheckOutcome], unlabelled: int) -> dict[str, Any]:
    return {
        "sessions": [
            {
                "session_id": o.session.session_id,
                "expected": list(o.session.expect.must_stop) if o.session.expect else [],
                "must_pass": bool(o.session.expect and o.session.expect.must_pass),
                "stop_reason": o.verdict.stop_reason,
                "raised": [a.probe for a in o.verdict.alerts],
                "missing": list(o.missing),
                "ok": o.ok,
            }
            for o in outcomes
        ],
        "misses": sum(1 for o in outcomes if not o.ok),
        "unlabelled": unlabelled,
    }


# --- report -----------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is a real session's)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def report_json(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    reasons = Counter(v.stop_reason for v in verdicts)
    total = len(verdicts)
    figures = {}
    for name, values in (
        ("steps", [v.steps for v in verdicts]),
        ("tokens", [v.tokens for v in verdicts]),
        ("duration_s", [v.duration_s for v in verdicts]),
    ):
        figures[name] = {f"p{q}": percentile(values, q) for q in (50, 90, 99)} | {"max": max(values, default=0)}
    return {
        "sessions": total,
        "stop_reasons": {
            reason: {"count": count, "share": round(count / total, 4)}
            for reason, count in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
        },
        "stalls": dict(sorted(Counter(a.probe for v in verdicts for a in v.alerts).items())),
        **figures,
    }


def report_table(verdicts: Sequence[Verdict]) -> str:
    data = report_json(verdicts)
    count = data["sessions"]
    lines = [f"{count} session{'' if count == 1 else 's'}", "", "  stop_reason        sessions   share"]
    for reason, entry in data["stop_reasons"].items():
        lines.append(f"  {reason:<18} {entry['count']:>8}  {entry['share'] * 100:>5.1f}%")
    if data["stalls"]:
        lines += ["", "  alerts by probe"]
        lines += [f"  {probe:<18} {count:>8}" for probe, count in data["stalls"].items()]
    lines += ["", "  per session        p50      p90      p99      max"]
    for name in ("steps", "tokens", "duration_s"):
        row = data[name]
        lines.append(f"  {name:<14}" + "".join(f"{_figure(row[k]):>9}" for k in ("p50", "p90", "p99", "max")))
    return "\n".join(lines)


def _figure(value: float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return NOT_FINITE
    return f"{value:,.1f}" if isinstance(value, float) and not value.is_integer() else f"{int(value):,}"


# --- strict JSON ------------------------------------------------------------------------------

NOT_FINITE = "not finite (null in JSON)"


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (never valid JSON) replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def _flagged(value: float, form: str) -> str:
    """``value`` in ``form``, or a flag when it is not a finite number (JSON prints null)."""
    return form.format(value) if math.isfinite(value) else NOT_FINITE


def _short_path(path: str) -> str:
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return relative if len(relative) < len(path) else path
