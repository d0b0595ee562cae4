"""The incident page (``agentguard replay FILE --html OUT.html``): self-contained, private, and
loaded in a real headless browser (Debian's chromium) with no console error and no request."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from html_sessions import SECRET, write_sessions

from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.replay.cli import run
from otel_agentguard.replay.html import render_page
from otel_agentguard.replay.runner import replay_files

# (no_progress is held back so that the cycle is what the second session ends with)
POLICY = parse_policy("[profiles.default]\nmax_steps = 12\nmax_tokens = 8000\nmax_cost_usd = 0.05\n"
                      "no_progress_steps = 12\n")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed "
                                    "(scripts/apt-install.sh chromium chromium)")


@pytest.fixture
def judged(tmp_path):
    return replay_files([write_sessions(tmp_path)], POLICY)


def test_the_page_shows_each_session_its_alerts_evidence_and_cut_point(judged):
    page = render_page(judged, POLICY)
    verdicts = {verdict.session_id: verdict for _, verdict in judged}
    assert verdicts["parcel-tool-loop"].stop_reason == "tool_loop" and verdicts["policy-cycle"].stop_reason == "cycle"
    for session_id, verdict in verdicts.items():
        section = page[page.index(f">{session_id} <"):]
        section = section[:section.index("</section>")]
        marked = {int(n) for n in re.findall(r'class="step [^"]*evidence[^"]*"[^>]*data-seq="(\d+)"', section)}
        assert marked == {s for alert in verdict.alerts for s in alert.evidence}
        (cut,) = re.findall(r'class="step [^"]*\bcut\b[^"]*"[^>]*data-seq="(\d+)"', section)
        first = next(a for a in verdict.alerts if a.probe == verdict.stop_reason)
        assert int(cut) == first.sequence + 1  # the model call after the alert: every call has its result
        assert "of 8,000" in section and "of 12" in section  # budgets


def test_the_page_loads_nothing_and_carries_no_content(judged):
    page = render_page(judged, POLICY)
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "http://" not in page and "https://" not in page
    assert SECRET not in page and "on its way" not in page  # arguments and answers stay out


def test_a_thousand_sessions_make_one_page_of_bounded_size(tmp_path):
    one = json.loads(write_sessions(tmp_path).read_text())["sessions"]
    many = tmp_path / "many.json"
    many.write_text(json.dumps({"sessions": [dict(one[i % 2], id=f"s{i}") for i in range(1000)]}))
    page = render_page(replay_files([many], POLICY), POLICY)
    assert page.count("<section") == 1000 and page.count('<a href="#s') == 1000
    assert len(page.encode()) < 8 << 20


def test_replay_and_report_write_the_page(tmp_path, capsys):
    sessions = write_sessions(tmp_path)
    assert run(["replay", str(sessions), "--html", str(tmp_path / "replay.html")]) == 0
    assert run(["report", str(sessions), "--html", str(tmp_path / "report.html")]) == 0
    for name in ("replay.html", "report.html"):
        assert "parcel-tool-loop" in (tmp_path / name).read_text()
    assert "the page of 2 sessions is in" in capsys.readouterr().err
    assert run(["replay", str(sessions), "--html", str(tmp_path / "no" / "such" / "dir.html")]) == 2


def _chromium(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--enable-logging=stderr", "--v=0", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@needs_chromium
def test_in_a_real_browser_the_page_loads_with_no_console_error_and_no_request(judged, tmp_path):
    page = tmp_path / "page.html"
    # A page that broke a rule would show it: this one asks for an image over the network.
    bad = tmp_path / "bad.html"
    bad.write_text(render_page(judged, POLICY).replace("</body>", '<img src="http://example.invalid/x.png"></body>'))
    page.write_text(render_page(judged, POLICY))
    done = _chromium("--dump-dom", page.as_uri(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "parcel-tool-loop" in done.stdout and "policy-cycle" in done.stdout
    console = [line for line in done.stderr.splitlines() if "CONSOLE" in line or "Refused to" in line]
    assert console == [], console
    refused = _chromium("--dump-dom", bad.as_uri(), cwd=tmp_path)
    assert any("Content Security Policy" in line or "Refused to" in line for line in refused.stderr.splitlines()), \
        "the browser check would not see a request"


@needs_chromium
@pytest.mark.parametrize("session_id", ["parcel-tool-loop", "policy-cycle"])
def test_a_screenshot_of_each_stalled_session(judged, tmp_path, session_id):
    page = tmp_path / f"{session_id}.html"
    page.write_text(render_page([pair for pair in judged if pair[1].session_id == session_id], POLICY))
    shot = tmp_path / f"{session_id}.png"
    done = _chromium("--window-size=1000,560", f"--screenshot={shot}", page.as_uri(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
    committed = Path(__file__).resolve().parents[1] / "docs" / "images" / f"incident-{session_id}.png"
    if os.environ.get("AGENTGUARD_UPDATE_SCREENSHOTS"):  # the docs show the page as it looks
        shutil.copyfile(shot, committed)
    assert committed.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
