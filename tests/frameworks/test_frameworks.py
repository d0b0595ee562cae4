"""Agent frameworks that trace themselves, judged live and on replay with no code of ours in them.

Live: each framework runs its own agent class against the scripted model server, in the
frameworks' environment (``AGENTGUARD_TEST_FRAMEWORKS_PYTHON``, which ``make test`` builds from
``requirements.txt``), with ``ag.install()`` the only line added. Replay: the traces those
frameworks recorded alone, committed under ``tests/data/frameworks/``, judged in this environment.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from framework_agents import FRAMEWORKS, POLICY_TOML, verdicts

from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.replay.runner import replay_files

HERE = Path(__file__).parent
DRIVER = HERE / "framework_agents.py"
RECORDINGS = HERE.parent / "data" / "frameworks"
# (made absolute: each run happens in its own working directory)
FRAMEWORKS_PYTHON = os.path.abspath(os.environ["AGENTGUARD_TEST_FRAMEWORKS_PYTHON"]) \
    if os.environ.get("AGENTGUARD_TEST_FRAMEWORKS_PYTHON") else None
MISSING = "AGENTGUARD_TEST_FRAMEWORKS_PYTHON is not set (make test builds .venv-frameworks and sets it)"
needs_frameworks = pytest.mark.skipif(not FRAMEWORKS_PYTHON, reason=MISSING)

# What each scenario must end with. A cycle of two tools that always return the same is a
# tool loop as well (each call repeats): the loop probe outranks the cycle one.
EXPECTED = {"loop": {"tool_loop"}, "cycle": {"cycle", "tool_loop"}, "fake": {"fake_completion"},
            "clean": {"completed"}, "distinct": {"completed"}}


def run_live(framework: str, scenario: str, outdir: Path, *, content: bool, env: dict[str, str] | None = None):
    """One agent run with the guard installed, in a fresh process; the verdicts it exported."""
    command = [FRAMEWORKS_PYTHON, str(DRIVER), "--child", "live", framework, scenario, str(outdir)]
    done = subprocess.run(command + (["--content"] if content else []), capture_output=True, text=True,
                          timeout=300, cwd=outdir, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    requests = json.loads((outdir / "requests-live.json").read_text())
    assert requests["rejected"] == [], requests["rejected"]  # the run followed its script
    return verdicts(outdir / "live.jsonl"), done.stderr


@needs_frameworks
@pytest.mark.parametrize("scenario", ["loop", "cycle", "fake", "clean"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_framework_run_is_judged_live_when_it_ends(framework, scenario, tmp_path):
    found, _ = run_live(framework, scenario, tmp_path, content=True)
    # one run, one verdict (written when the run ended: the driver's provider shuts down last,
    # after a closed exporter would have lost it)
    assert [v["stop_reason"] in EXPECTED[scenario] for v in found] == [True], found
    (verdict,) = found
    if scenario != "fake":  # every tool call is a step, numbered once
        # (CrewAI itself refuses a sixth identical call and asks for the answer without tools)
        loop = 6 if framework == "crewai" else 7
        assert verdict["steps"] == {"loop": loop, "cycle": 7, "clean": 3}[scenario], verdict


@needs_frameworks
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_with_content_off_a_run_still_ends_with_one_verdict_and_the_log_says_what_is_missing(framework, tmp_path):
    found, stderr = run_live(framework, "distinct", tmp_path, content=False)
    assert [v["stop_reason"] for v in found] == ["completed"], found  # no false loop from names alone
    if framework != "llamaindex":  # (OpenInference keeps a LlamaIndex tool's input with content off)
        assert "tool calls arrive without their arguments" in stderr


@needs_frameworks
@pytest.mark.parametrize(("framework", "env"), [
    ("strands", {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}),
    ("agent-framework", {"FRAMEWORK_AGENTS_AF_CLIENT": "chat"}),
], ids=["strands-latest-conventions", "agent-framework-chat-completions"])
def test_a_framework_variant_is_judged_live(framework, env, tmp_path):
    found, _ = run_live(framework, "loop", tmp_path, content=True, env=env)
    assert [v["stop_reason"] for v in found] == ["tool_loop"], found


def recordings() -> list[Path]:
    return sorted(RECORDINGS.glob("*/*.jsonl"))


@pytest.mark.parametrize("recording", recordings(), ids=lambda p: f"{p.parent.name}-{p.stem}")
def test_a_recorded_framework_trace_is_judged_on_replay(recording):
    scenario, _, capture = recording.stem.partition("-")
    judged = [verdict for _, verdict in replay_files([recording], parse_policy(POLICY_TOML))]
    assert len(judged) == 1, [(v.session_id, v.stop_reason) for v in judged]  # one session per run
    (verdict,) = judged
    if capture == "content" or scenario in ("clean", "distinct"):
        assert verdict.stop_reason in EXPECTED[scenario], verdict
    else:  # no arguments, results or answer on the spans: nothing tells a loop from distinct calls
        assert verdict.stop_reason == "completed", verdict


def test_every_framework_has_its_recordings():
    found = {(p.parent.name, p.stem) for p in recordings()}
    wanted = {(f, f"{s}-content") for f in FRAMEWORKS for s in ("loop", "cycle", "fake", "clean")}
    wanted |= {(f, s) for f in FRAMEWORKS for s in ("loop", "distinct")}
    assert wanted <= found, sorted(wanted - found)


@pytest.mark.parametrize(("framework", "agent"), [("strands", "Strands Agents"), ("adk", "order_agent"),
                                                  ("agent-framework", "order_agent")])
def test_the_agent_of_each_step_is_read_from_the_agent_span_around_it(framework, agent):
    """What handoff_loop follows: these frameworks name the agent on their invoke_agent span only."""
    from otel_agentguard.replay.sources import read_files

    (session,) = read_files([RECORDINGS / framework / "loop-content.jsonl"], parse_policy(POLICY_TOML))
    assert {step.agent for step in session.steps} == {agent}
