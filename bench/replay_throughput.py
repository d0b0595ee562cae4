"""(5) Replay throughput: ``agentguard replay`` on a large OTLP JSON lines file, one core.

The file is generated once (cached under ``bench/.cache/``) in the shape the package's
exporter and the Collector's file exporter write: batches of 512 spans per line, sessions
of an ``invoke_agent`` span and ~10 model and tool spans each, interleaved across sessions.
Each repeat runs the real command line (``agentguard replay --format json --compact``,
stdout discarded) in a child process and divides the spans in the file by its wall time.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from bench._harness import Report, cache_dir, progress
from bench.workload import session_steps
from otel_agentguard import attributes as A
from otel_agentguard.exporters import encode_attributes

_BATCH = 512
# The shape of the generated spans: bumped when they change (the workload's attributes, say), so a
# cached file of the old shape is not replayed as if it were the new one.
_SHAPE = 2
_WARM_UP_SPANS = 2_000


def _span(trace_id: str, span_id: str, parent: str | None, name: str, attrs: dict, start: int, end: int) -> dict:
    span = {
        "traceId": trace_id, "spanId": span_id, "name": name, "kind": 1,
        "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
        "attributes": encode_attributes(attrs), "status": {"code": 0},
    }
    if parent:
        span["parentSpanId"] = parent
    return span


def generate(path: Path, spans: int, seed: int = 3) -> None:
    """Write ``spans`` spans (about 11 per session, 64 sessions open at once) as OTLP JSON lines."""
    rnd = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    written = 0
    clock = 1_700_000_000_000_000_000
    batch: list[dict] = []
    with tmp.open("w", encoding="utf-8") as out:
        def flush() -> None:
            out.write(json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [
                {"scope": {"name": "bench"}, "spans": batch}]}]}, separators=(",", ":")))
            out.write("\n")
            batch.clear()

        session_index = 0
        while written < spans:
            group = []
            for _ in range(64):
                session_index += 1
                steps = session_steps(rnd, 10, looping=rnd.random() < 0.1)
                group.append((f"{rnd.getrandbits(128):032x}", f"{rnd.getrandbits(64):016x}",
                              f"replay-{session_index}", steps))
            cursors = [0] * len(group)
            live = list(range(len(group)))
            while live and written < spans:
                pick = rnd.randrange(len(live))
                which = live[pick]
                trace_id, root, session_id, steps = group[which]
                spec = steps[cursors[which]]
                cursors[which] += 1
                clock += 1_000_000
                attrs = {**spec.start, **spec.end, A.SESSION_ID: session_id, A.SEQUENCE: cursors[which]}
                batch.append(_span(trace_id, f"{rnd.getrandbits(64):016x}", root, spec.name, attrs,
                                   clock, clock + 500_000))
                written += 1
                if cursors[which] == len(steps):
                    batch.append(_span(trace_id, root, None, "invoke_agent bench",
                                       {A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.SESSION_ID: session_id},
                                       clock - 20_000_000, clock + 1_000_000))
                    written += 1
                    live[pick] = live[-1]
                    live.pop()
                if len(batch) >= _BATCH:
                    flush()
        if batch:
            flush()
    os.replace(tmp, path)


def trace_file(spans: int) -> Path:
    path = cache_dir() / f"replay-{spans}-shape{_SHAPE}.jsonl"
    if not path.exists():
        progress(f"replay: generating {spans:,} spans into {path} (cached for later runs)")
        generate(path, spans)
    return path


def replay(path: Path, write_bytecode: bool = False) -> tuple[float, float]:
    """One run of the command line on ``path``: its wall time (s) and its peak RSS (MiB)."""
    env = {**os.environ, "OTEL_AGENTGUARD_FINGERPRINT_KEY": "bench"}
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-m", "otel_agentguard", "replay", "--format", "json", "--compact",
                              str(path)], stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(child.pid, 0)  # this child's own resource usage
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, child.args)
    return seconds, usage.ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)  # bytes there, KiB on Linux


def run(report: Report, repeats: int, quick: bool, spans: int) -> None:
    path = trace_file(spans)
    size = path.stat().st_size
    progress(f"replay: {spans:,} spans ({size / 2**20:.0f} MiB), {repeats} repeats")
    # An installed package has its modules' bytecode cached (pip compiles what it installs): an
    # untimed run on a small file writes the caches, so that no timed run compiles the sources,
    # even where PYTHONDONTWRITEBYTECODE is set (it was, on the machine of the results).
    replay(trace_file(_WARM_UP_SPANS), write_bytecode=True)
    rates = []
    peaks = []
    for index in range(repeats):
        seconds, peak = replay(path)
        rates.append(spans / seconds)
        peaks.append(peak)
        progress(f"replay: repeat {index + 1}: {seconds:.1f} s, {rates[-1]:,.0f} spans/s, peak RSS {peak:,.0f} MiB")
    report.add("5 replay", f"agentguard replay, {spans:,} spans ({size / 2**20:.{0 if size >= 2**20 else 1}f} MiB), "
               "one core", rates,
               "spans/s", ">= 40,000", lambda m: m >= 40_000)
    report.add("5 replay", "  the same: peak RSS of the replay", peaks, "MiB")
