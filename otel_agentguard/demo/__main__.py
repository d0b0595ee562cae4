"""``python -m otel_agentguard.demo`` (and ``agentguard demo``): the whole loop in one command.

1. runs :mod:`otel_agentguard.demo.agent` under ``opentelemetry-instrument``, the
   way users run their agents, writing the trace as OTLP JSON lines into the
   output folder (``--out``, default ``./agentguard-demo``, kept afterwards);
2. replays that file through the same judge (``agentguard replay``) and prints
   the command that replays it again;
3. shows that both feeds agree, session by session;
4. checks the bundled regression suite (``agentguard check``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from otel_agentguard.judge.policy import load_policy
from otel_agentguard.replay import render
from otel_agentguard.replay.runner import judge_recorded
from otel_agentguard.replay.sources import read_files

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SUITES = ("support_sessions.yaml", "more_shapes.yaml")
DEFAULT_OUT = "agentguard-demo"
# What the demo imports beyond the core install: module -> the distribution that brings it.
NEEDS = {"openai": "openai", "opentelemetry.distro": "opentelemetry-distro", "yaml": "PyYAML"}


class DemoError(Exception):
    """Something the user can fix, said in one line (exit status 2)."""


def missing_packages() -> list[str]:
    missing = []
    for module, distribution in NEEDS.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(distribution)
    return missing


def _launcher() -> str:
    found = Path(sys.executable).with_name("opentelemetry-instrument")
    return str(found) if found.exists() else (shutil.which("opentelemetry-instrument") or "opentelemetry-instrument")


def run_live(trace_file: Path, policy_file: Path) -> dict[str, dict[str, Any]]:
    env = {
        **os.environ,
        "OTEL_SERVICE_NAME": "agentguard-demo",
        "OTEL_TRACES_EXPORTER": "agentguard_jsonl",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_AGENTGUARD_JSONL_PATH": str(trace_file),
        "OTEL_AGENTGUARD_POLICY": str(policy_file),
        "OTEL_AGENTGUARD_FINGERPRINT_KEY": os.environ.get("OTEL_AGENTGUARD_FINGERPRINT_KEY", "agentguard-demo"),
    }
    command = [_launcher(), sys.executable, "-m", "otel_agentguard.demo.agent"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"the demo agent failed (exit {done.returncode})")
    verdicts: dict[str, dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return verdicts


def prepare(out: str) -> tuple[Path, Path]:
    """The output folder with the policy copied in; an earlier demo's trace there is replaced."""
    missing = missing_packages()
    if missing:
        raise DemoError(f"the demo needs {', '.join(missing)}: pip install 'otel-agentguard[demo]'")
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        trace_file = folder / "trace.jsonl"
        trace_file.unlink(missing_ok=True)  # the exporter appends: start from an empty file
        policy_file = folder / "policy.toml"
        shutil.copyfile(EXAMPLES / "policy.toml", policy_file)
    except OSError as exc:
        raise DemoError(f"{out}: cannot write the demo's files there: {exc.strerror or exc}") from None
    return trace_file, policy_file


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentguard demo", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv).out)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                        help=f"folder for the trace and policy files, kept afterwards (default: ./{DEFAULT_OUT})")


def run(out: str) -> int:
    try:
        trace_file, policy_file = prepare(out)
    except DemoError as exc:
        print(f"agentguard: {exc}", file=sys.stderr)
        return 2
    policy = load_policy(policy_file)
    print("== 1. a support agent on the real openai SDK, run under opentelemetry-instrument ==\n")
    live = run_live(trace_file, policy_file)
    print(f"  {'session':<16} {'stop_reason':<16} {'steps':>5} {'tokens':>7}  alerts (probe: evidence)")
    for name, verdict in live.items():
        alerts = ", ".join(f"{a['probe']}: seq {' '.join(map(str, a['evidence']))}" for a in verdict["alerts"])
        print(f"  {name:<16} {verdict['stop_reason']:<16} {verdict['steps']:>5} {verdict['tokens']:>7}  "
              f"{alerts or '-'}")
    print("\n  steps: tool calls + final answer (what max_steps limits); "
          "seq: sequence numbers, which count model and tool calls")
    spans = sum(len(ss["spans"]) for line in trace_file.read_text().splitlines()
                for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"])
    print(f"  {spans} spans written as OTLP JSON lines to {trace_file}\n")

    command = (f"{_agentguard()} replay {shlex.quote(_shown(trace_file))} "
               f"--policy {shlex.quote(_shown(policy_file))}")
    print(f"== 2. {command} ==\n")
    judged = [(s, judge_recorded(s, policy)) for s in read_files([trace_file], policy)]
    print(render.replay_table(judged))

    print("\n== 3. the live judge and the replay agree ==\n")
    replayed = {verdict.session_id: verdict for _, verdict in judged}
    agree = True
    for name, verdict in live.items():
        again = replayed.get(name)
        same = again is not None and again.stop_reason == verdict["stop_reason"] and [
            {"probe": a.probe, "evidence": list(a.evidence)} for a in again.alerts] == verdict["alerts"]
        agree = agree and same
        print(f"  {name:<16} {'same stop_reason and alerts at the same sequence numbers' if same else 'DIFFERENT'}")

    print("\n== 4. agentguard check: the bundled regression suite ==\n")
    files = [str(EXAMPLES / name) for name in SUITES]
    suite = [(s, judge_recorded(s, policy)) for s in read_files(files, policy)]
    outcomes, unlabelled = render.check_outcomes(suite)
    print(render.check_table(outcomes, unlabelled))
    print(f"\nThe trace is kept in {trace_file.parent}/. Judge it again, or with your own policy:\n\n  {command}")
    return 0 if agree and all(outcome.ok for outcome in outcomes) else 1


def _agentguard() -> str:
    """How to run ``agentguard`` from the user's shell: its name where PATH finds this one,
    else its path (a virtual environment that is not activated: ``.venv/bin/agentguard``)."""
    here = Path(sys.executable).parent / "agentguard"
    found = shutil.which("agentguard")
    if found and Path(found).resolve() == here.resolve():
        return "agentguard"
    if here.exists():
        return shlex.quote(_shown(here))
    return f"{shlex.quote(sys.executable)} -m otel_agentguard"


def _shown(path: Path) -> str:
    """A path as the user would type it: relative to the current folder when inside it."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    raise SystemExit(main())
