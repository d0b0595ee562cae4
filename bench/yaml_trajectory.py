"""(7) A 10 MB YAML trajectory: ``agentguard check`` wall time and peak memory, one core.

The file is generated once (cached under ``bench/.cache/``): labelled sessions of tool
calls with arguments and results, model turns and a final answer, as people write
regression suites by hand, in block style, without aliases. Each repeat runs the real
command line (``agentguard check --allow-empty --format json``, stdout discarded) in a
child process; its peak resident memory comes from ``wait4``, so earlier children do
not count. A file over the YAML size cap would be refused before parsing: that refusal
is timed too, since it is the other acceptable outcome.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

from bench import _harness
from bench._harness import Report, cache_dir, progress

TOOLS = ("search_kb", "get_order", "query_logistics", "refund", "lookup_customer")


def generate(path: Path, target_bytes: int, seed: int = 7) -> int:
    """Write sessions until the file holds ``target_bytes``; return the number of sessions."""
    rnd = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    written = 0
    sessions = 0
    with tmp.open("w", encoding="utf-8") as out:
        out.write("sessions:\n")
        while written < target_bytes:
            sessions += 1
            looping = rnd.random() < 0.3
            lines = [f"  - id: S{sessions:06d}", f"    title: generated session {sessions}",
                     "    expect: " + ("{stop: [tool_loop]}" if looping else "pass"), "    steps:"]
            for index in range(1, 11):
                tool = TOOLS[0] if looping else rnd.choice(TOOLS)
                order = "A1" if looping else f"A{rnd.randrange(10_000)}"
                if index % 3 == 0:
                    lines += [f"      - id: s{index:02d}", "        model: gpt-4o-mini",
                              f"        input_tokens: {rnd.randrange(100, 2000)}",
                              f"        output_tokens: {rnd.randrange(10, 200)}", "        tool_calls: 1"]
                else:
                    lines += [f"      - id: s{index:02d}", f"        tool: {tool}",
                              f"        args: {{order: {order}, page: {0 if looping else index}}}",
                              f"        result: \"status of {order}: {'pending' if looping else rnd.random()}\"",
                              f"        duration_s: {rnd.random():.3f}"]
            lines += ["      - id: s11", "        model: gpt-4o-mini", "        answer: Here is what I found.",
                      "        tokens: 120"]
            text = "\n".join(lines) + "\n"
            out.write(text)
            written += len(text.encode("utf-8"))
    os.replace(tmp, path)
    return sessions


def trajectory_file(megabytes: float) -> Path:
    path = cache_dir() / f"trajectory-{megabytes:g}mb.yaml"
    if not path.exists():
        progress(f"yaml: generating a {megabytes:g} MB trajectory into {path} (cached for later runs)")
        generate(path, int(megabytes * 1_000_000))
    return path


def check_run(path: Path) -> tuple[float, float, int]:
    """Wall seconds, peak RSS in MiB and exit status of one ``agentguard check`` child."""
    env = {**os.environ, "OTEL_AGENTGUARD_FINGERPRINT_KEY": "bench"}
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "otel_agentguard", "check", "--allow-empty", "--format", "json", "--compact", str(path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    error = child.stderr.read().decode("utf-8", "replace").strip() if child.stderr else ""
    child.stderr and child.stderr.close()
    if child.returncode not in (0, 1):
        progress(f"yaml: check exited {child.returncode}: {error[-200:]}")
    return seconds, usage.ru_maxrss / 1024, child.returncode  # ru_maxrss is in KiB on Linux


def run(report: Report, repeats: int, quick: bool) -> None:
    megabytes = 0.2 if _harness.SMOKE else 10
    path = trajectory_file(megabytes)
    size = path.stat().st_size
    progress(f"yaml: {size / 1e6:.1f} MB trajectory, {repeats} repeats")
    seconds, peaks = [], []
    for index in range(repeats):
        elapsed, peak, status = check_run(path)
        seconds.append(elapsed)
        peaks.append(peak)
        progress(f"yaml: repeat {index + 1}: {elapsed:.1f} s, peak RSS {peak:,.0f} MiB, exit {status}")
    label = f"agentguard check, {size / 1e6:.{0 if size >= 1e6 else 1}f} MB YAML trajectory, one core"
    report.add("yaml", label + ": wall time", seconds, "s", "< 30", lambda m: m < 30)
    report.add("yaml", label + ": peak RSS", peaks, "MiB", "< 1,024", lambda m: m < 1024)
