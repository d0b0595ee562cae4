"""Agents in Node.js, judged by `agentguard serve`: the OpenTelemetry JS SDK with its OTLP/HTTP
protobuf exporter, and the Vercel AI SDK (`ai`) with its telemetry on, run against its own mock
model. The packages are pinned in tests/js/package-lock.json and installed by
scripts/install-js-tests.sh (run by `make test`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from serve_support import REPO, service_in_thread, wait_for

pytest.importorskip("aiohttp")

JS = REPO / "tests" / "js"
if shutil.which("node") is None:
    pytest.skip("node is not installed: the Node.js client tests need node 18+ and npm", allow_module_level=True)
if not (JS / "node_modules" / "ai").is_dir():
    pytest.skip("tests/js/node_modules is missing: run scripts/install-js-tests.sh (make test does)",
                allow_module_level=True)


def _node(script: str, *args: str) -> str:
    done = subprocess.run(["node", script, *args], cwd=JS, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_opentelemetry_js_sdk_genai_sessions_are_judged():
    with service_in_thread(settle_s=0.3) as running:
        _node("genai_sessions.mjs", running.url)
        wait_for(lambda: len(running.verdicts()) == 3)
        verdicts = running.verdicts()
    assert {sid: v["agentguard.stop_reason"] for sid, v in verdicts.items()} == {
        "js-loop": "tool_loop", "js-clean": "completed", "js-fake": "fake_completion"}
    assert verdicts["js-loop"]["agentguard.steps"] == 7  # six searches and the answer
    assert verdicts["js-clean"]["agentguard.tokens"] == 4 * 150  # four model calls
    assert [alert["agentguard.probe"] for alert in verdicts["js-fake"]["alerts"]] == ["fake_completion"]


@pytest.mark.parametrize(("mode", "stop_reason", "steps"), [("loop", "tool_loop", 6), ("clean", "completed", 3)])
def test_vercel_ai_sdk_tool_calls_are_read_as_steps(mode, stop_reason, steps):
    """generateText with a tool and telemetry on: its ai.toolCall spans (name, arguments,
    result) are the tool steps, its ai.generateText.doGenerate spans the model steps."""
    with service_in_thread(settle_s=0.3) as running:
        out = _node("vercel_ai_agent.mjs", running.url, mode)
        assert '"text":"It is sunny everywhere you asked about."' in out
        wait_for(lambda: len(running.verdicts()) == 1)
        ((session_id, verdict),) = running.verdicts().items()
    assert verdict["agentguard.stop_reason"] == stop_reason
    assert verdict["agentguard.steps"] == steps  # tool calls plus the final answer
    assert verdict["agentguard.tokens"] == (steps if mode == "loop" else 3) * 120
    assert len(session_id) == 32  # no session attribute: the trace is the session
