"""One self-contained HTML page of judged sessions, for incident review.

Per session: its verdict, the steps as a timeline strip (tool and model calls, their
durations, the agent of each), calls that repeat the same arguments drawn alike and grouped,
the alerts with their evidence steps marked, the step where the guard stopped (or would have,
in observe mode), and tokens, cost and steps as they accumulate against the profile's budgets.
Names, fingerprints and counts only, as the spans carry them: no arguments, results or answers.

The page loads nothing: its style and its one small script are inline, and a Content-Security
Policy forbids every request, so it opens offline and from an attachment alike.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence

from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.judge.steps import TOOL, Step
from otel_agentguard.replay.recorded import RecordedSession
from otel_agentguard.replay.render import counted

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
_REPEAT_COLOURS = ("#d9480f", "#5f3dc4", "#0b7285", "#a61e4d", "#2b8a3e", "#e67700")

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#212529;background:#fff}
h1{font-size:20px;margin:0 0 4px}
.sub{color:#495057;margin:0 0 16px}
nav{columns:3 260px;margin:0 0 20px;font-size:13px}
nav a{text-decoration:none;color:#1c7ed6}
section{border:1px solid #dee2e6;border-radius:8px;padding:14px 16px;margin:0 0 18px}
h2{font-size:16px;margin:0 0 6px}
.reason{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff}
.stalled{background:#c92a2a}.fine{background:#2b8a3e}.other{background:#868e96}
.meta{color:#495057;font-size:12px;margin:0 0 10px}
.strip{display:flex;align-items:flex-end;gap:2px;overflow-x:auto;padding:22px 0 4px;position:relative}
.step{position:relative;min-width:14px;height:34px;border-radius:3px;border:2px solid transparent;
 box-sizing:border-box;display:flex;align-items:center;justify-content:center;font-size:10px;color:#fff}
.tool{background:#495057}.model{background:#adb5bd;height:24px;color:#212529}
.failed{background:repeating-linear-gradient(45deg,#e03131,#e03131 4px,#495057 4px,#495057 8px)}
.evidence{border-color:#fcc419;box-shadow:0 0 0 2px #fcc419}
.cut::after{content:"\\25BC cut point";position:absolute;top:-20px;left:0;font-size:10px;color:#c92a2a;
 white-space:nowrap}
.agent{position:absolute;top:-16px;left:0;font-size:9px;color:#495057;white-space:nowrap}
.legend{font-size:11px;color:#495057;margin:4px 0 10px}
.legend span{display:inline-block;margin-right:12px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;vertical-align:middle;margin-right:4px}
table{border-collapse:collapse;font-size:12px;margin:6px 0}
td,th{padding:2px 8px;text-align:left;border-bottom:1px solid #f1f3f5;vertical-align:top}
.alert td:first-child{font-weight:600;color:#c92a2a}
.bars{display:grid;grid-template-columns:90px 1fr 140px;gap:4px 10px;align-items:center;font-size:12px;max-width:720px}
.bar{height:10px;background:#f1f3f5;border-radius:5px;overflow:hidden;position:relative}
.bar i{display:block;height:100%;background:#1c7ed6}
.bar.over i{background:#c92a2a}
.spark{height:26px;width:100%}
"""

# Clicking a step or an alert marks the steps that go with it (no network, no library).
_SCRIPT = """
document.addEventListener('click',function(e){
  var a=e.target.closest('[data-evidence]');if(!a)return;
  var sec=a.closest('section');var seqs=a.getAttribute('data-evidence').split(' ');
  sec.querySelectorAll('.step').forEach(function(s){
    s.classList.toggle('evidence',seqs.indexOf(s.getAttribute('data-seq'))>=0);});
});
"""


def render_page(judged: Sequence[tuple[RecordedSession, Verdict]], policy: Policy, title: str = "") -> str:
    """The page for every judged session, stalled ones first, with an index."""
    ordered = sorted(judged, key=lambda pair: (not pair[1].stalled, pair[1].session_id))
    stalled = sum(1 for _, verdict in ordered if verdict.stalled)
    reasons = Counter(verdict.stop_reason for _, verdict in ordered)
    heading = title or "agentguard: judged sessions"
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name=viewport content="width=device-width,initial-scale=1">',
        f"<title>{_e(heading)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{_e(heading)}</h1>",
        f'<p class=sub>{counted(len(ordered), "session")}, {stalled} stalled: '
        + ", ".join(f"{_e(reason)} {count}" for reason, count in reasons.most_common()) + "</p>",
    ]
    if len(ordered) > 1:
        parts.append("<nav>" + "".join(
            f'<div><a href="#s{index}">{_e(verdict.session_id)}</a> {_reason_badge(verdict.stop_reason)}</div>'
            for index, (_, verdict) in enumerate(ordered)) + "</nav>")
    parts.extend(_session(index, session, verdict, policy) for index, (session, verdict) in enumerate(ordered))
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "".join(parts)


def _session(index: int, session: RecordedSession, verdict: Verdict, policy: Policy) -> str:
    profile = policy.resolve_profile(verdict.profile)
    steps = sorted(session.steps, key=lambda step: step.sequence)
    groups = _repeat_groups(steps)
    evidence = {sequence for alert in verdict.alerts for sequence in alert.evidence}
    cut = _cut_point(steps, verdict)
    longest = max((max(step.end_ns - step.start_ns, 0) for step in steps), default=0) or 1
    cells = []
    agent_before = None
    for step in steps:
        duration = max(step.end_ns - step.start_ns, 0)
        width = 14 + int(46 * duration / longest)
        classes = ["step", "tool" if step.kind == TOOL else "model"]
        if step.sequence in evidence:  # framed from the start; clicking an alert or a step frames others
            classes.append("evidence")
        if step.failed:
            classes.append("failed")
        if step.sequence == cut:
            classes.append("cut")
        style = f"width:{width}px"
        group = groups.get(step.args_fingerprint or "") if step.kind == TOOL else None
        if group is not None and not step.failed:
            style += f";background:{group[0]}"
        label = _e(verdict.label(step.sequence))
        tip = _tip(step, verdict.label(step.sequence), duration)
        agent = ""
        if step.agent and step.agent != agent_before:
            agent = f'<span class=agent>{_e(step.agent)}</span>'
        agent_before = step.agent or agent_before
        cells.append(f'<div class="{" ".join(classes)}" style="{style}" data-seq="{step.sequence}" '
                     f'data-evidence="{step.sequence}" title="{_e(tip)}">{agent}{label}</div>')
    alerts = "".join(
        f'<tr class=alert data-evidence="{" ".join(str(s) for s in alert.evidence)}"><td>{_e(alert.probe)}</td>'
        f"<td>at {_e(verdict.label(alert.sequence))}; evidence "
        f'{_e(" ".join(verdict.label(s) for s in alert.evidence))}</td><td>{_e(alert.detail)}</td></tr>'
        for alert in verdict.alerts)
    legend = "".join(
        f'<span><i class=sw style="background:{colour}"></i>{_e(name)} '
        f'(same arguments, {counted(calls, "call")})</span>' for colour, name, calls in groups.values())
    return (
        f'<section id="s{index}"><h2>{_e(verdict.session_id)} {_reason_badge(verdict.stop_reason)}</h2>'
        f'<p class=meta>{_e(session.title or "")} {_e(session.source)} | profile {_e(verdict.profile)} | '
        f"{counted(verdict.steps, 'step')} | {verdict.tokens:,} tokens | ${verdict.cost_usd:.4f} | "
        f"{verdict.duration_s:.1f} s</p>"
        f'<div class=strip>{"".join(cells)}</div>'
        f'<div class=legend><span><i class=sw style="background:#495057"></i>tool call</span>'
        f'<span><i class=sw style="background:#adb5bd"></i>model call</span>'
        f'<span><i class=sw style="background:#fcc419"></i>evidence</span>{legend}</div>'
        + (f"<table>{alerts}</table>" if alerts else "<p class=meta>no alert</p>")
        + _budgets(steps, verdict, profile)
        + "</section>"
    )


def _budgets(steps: list[Step], verdict: Verdict, profile: Profile) -> str:
    """Tokens, cost and steps as they accumulate, against the profile's budgets."""
    rows = []
    for label, used, limit, shown in (
        ("steps", verdict.steps, profile.max_steps, f"{verdict.steps}"),
        ("tokens", verdict.tokens, profile.max_tokens, f"{verdict.tokens:,}"),
        ("cost", verdict.cost_usd, profile.max_cost_usd, f"${verdict.cost_usd:.4f}"),
    ):
        if not limit:
            continue
        share = used / limit
        over = " over" if share > 1 else ""
        rows.append(f'<span>{label}</span><div class="bar{over}"><i style="width:{min(share, 1) * 100:.1f}%">'
                    f"</i></div><span>{_e(shown)} of {_e(_amount(label, limit))}</span>")
    tokens, running, points = 0, [], []
    for step in steps:
        tokens += step.input_tokens + step.output_tokens
        running.append(tokens)
    if running and running[-1]:
        limit = profile.max_tokens or running[-1]
        top = max(running[-1], limit)
        for index, value in enumerate(running):
            x = 100 * index / max(len(running) - 1, 1)
            points.append(f"{x:.1f},{26 - 24 * value / top:.1f}")
        budget_y = 26 - 24 * limit / top
        rows.append('<span>tokens so far</span><svg class=spark viewBox="0 0 100 26" preserveAspectRatio=none>'
                    f'<line x1=0 x2=100 y1="{budget_y:.1f}" y2="{budget_y:.1f}" stroke="#c92a2a" '
                    'stroke-dasharray="2 2" stroke-width=".6"/>'
                    f'<polyline fill=none stroke="#1c7ed6" stroke-width="1.2" points="{" ".join(points)}"/></svg>'
                    f"<span>step by step (dashed: budget)</span>")
    return f'<div class=bars>{"".join(rows)}</div>' if rows else ""


def _cut_point(steps: list[Step], verdict: Verdict) -> int | None:
    """Where enforce mode stops (observe mode: would stop) for the stop reason's alert: the
    next model call after it, where every tool call asked for has its result."""
    alert = next((alert for alert in verdict.alerts if alert.probe == verdict.stop_reason), None)
    if alert is None:
        return None
    if any(step.sequence == alert.sequence and step.kind != TOOL and step.final for step in steps):
        return alert.sequence  # a final answer: refused where it is given
    return next((step.sequence for step in steps if step.kind != TOOL and step.sequence > alert.sequence), None)


def _repeat_groups(steps: list[Step]) -> dict[str, tuple[str, str, int]]:
    """The tool calls that share their arguments' fingerprint with another (a repeat group): by
    fingerprint, a colour, the tool's name and how many calls."""
    calls = Counter(step.args_fingerprint for step in steps if step.kind == TOOL and step.args_fingerprint)
    names: dict[str, str] = {}
    for step in steps:
        if step.kind == TOOL and step.args_fingerprint:
            names.setdefault(step.args_fingerprint, step.name)
    repeated = [fingerprint for fingerprint, count in calls.most_common() if count > 1]
    return {fingerprint: (_REPEAT_COLOURS[i % len(_REPEAT_COLOURS)], names[fingerprint], calls[fingerprint])
            for i, fingerprint in enumerate(repeated)}


def _tip(step: Step, label: str, duration_ns: int) -> str:
    what = f"{step.kind} {step.name}"
    parts = [f"step {label}: {what}", f"{duration_ns / 1e6:.1f} ms"]
    if step.agent:
        parts.append(f"agent {step.agent}")
    if step.kind == TOOL and step.args_fingerprint:
        parts.append(f"arguments {step.args_fingerprint.rsplit(':', 1)[-1][:8]}")
    if step.failed:
        parts.append("failed")
    if step.input_tokens or step.output_tokens:
        parts.append(f"{step.input_tokens + step.output_tokens} tokens")
    return " | ".join(parts)


def _reason_badge(reason: str) -> str:
    kind = "stalled" if reason in A.PROBE_NAMES else "fine" if reason in (A.COMPLETED, "explicit_finish") else "other"
    return f'<span class="reason {kind}">{_e(reason)}</span>'


def _amount(label: str, limit: float) -> str:
    return f"${limit:.2f}" if label == "cost" else f"{int(limit):,}"


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)
