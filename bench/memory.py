"""(4) Memory: bytes per live session, and RSS while a million sessions stream through.

Run in a child process (``python -m bench.memory``) so each measurement starts clean.
``bytes per live session``: tracemalloc's growth after K sessions of 6 steps each stay
live in the processor (spans exported and dropped, garbage collected), divided by K; each
session's fingerprints are strings of its own, as in real traffic.
``stream``: sessions of one tool step each, named by ``agentguard.session.id`` and never
finished, so only the store's bound (10,000 by default, least recently used evicted and
ended as ``abandoned``) keeps memory in check; RSS is sampled at every tenth.
"""

from __future__ import annotations

import gc
import json
import os
import random
import sys
import time
import tracemalloc

from bench._harness import Report, progress


def _rss_mib() -> float:
    with open("/proc/self/statm", encoding="utf-8") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def bytes_per_session(count: int) -> float:
    from bench.workload import Driver, model_step, tool_step

    driver = Driver(True, max_sessions=count * 2)
    rnd = random.Random(5)
    specs = [tool_step(rnd, "get_order", f"{i:032x}", f"{i + 1:032x}") for i in range(3)] + [model_step(rnd, 1)] * 3
    warm = Driver(True)  # import-time and first-use allocations happen outside the measurement
    for spec in specs:
        warm.step(None, _named(spec, "warm"))
    warm.shutdown()
    gc.collect()
    tracemalloc.start()
    driver.provider.force_flush()
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for index in range(count):
        for spec in specs:
            driver.step(None, _named(spec, f"mem-{index}", index))
    driver.provider.force_flush()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(driver.processor.live_session_ids()) == count  # type: ignore[union-attr]
    return (after - before) / count


def _named(spec, session_id: str, index: int | None = None):  # noqa: ANN001, ANN202
    """The step in session ``session_id``; with ``index``, its fingerprints are the session's
    own strings, as the spans of real sessions carry (a shared string would hide what a
    session keeps of them)."""
    from bench.workload import StepSpec
    from otel_agentguard import attributes as A

    start, end = {**spec.start, A.SESSION_ID: session_id}, spec.end
    if index is not None and A.TOOL_ARGS_FINGERPRINT in start:
        start[A.TOOL_ARGS_FINGERPRINT] = f"{index:016x}" + start[A.TOOL_ARGS_FINGERPRINT][16:]
        end = {**end, A.TOOL_RESULT_FINGERPRINT: f"{index:016x}" + end[A.TOOL_RESULT_FINGERPRINT][16:]}
    return StepSpec(spec.name, start, end)


_TOOL_NAMES = 10_000


def stream(sessions: int) -> dict[str, object]:
    """Sessions of one tool step each, over 10,000 tool names whose raw arguments carry a key
    unique to the session: the fingerprint caches must stay bounded too."""
    from bench.workload import Driver, StepSpec, tool_step
    from otel_agentguard import attributes as A

    driver = Driver(True)
    rnd = random.Random(6)
    spec = tool_step(rnd, "get_order", "a" * 32, "b" * 32)
    base = {key: value for key, value in spec.start.items() if key != A.TOOL_ARGS_FINGERPRINT}
    checkpoints = []
    every = max(sessions // 10, 1)
    start = time.perf_counter()
    for index in range(sessions):
        tool = f"tool_{index % _TOOL_NAMES}"
        raw = {**base, A.GEN_AI_TOOL_NAME: tool, A.SESSION_ID: f"s{index}",
               A.GEN_AI_TOOL_CALL_ARGUMENTS: json.dumps({f"field_{index}": index, "order_id": "A1"})}
        driver.step(None, StepSpec(f"{A.OP_EXECUTE_TOOL} {tool}", raw, spec.end))
        if (index + 1) % every == 0:
            gc.collect()
            checkpoints.append({"sessions": index + 1, "rss_mib": round(_rss_mib(), 1),
                                "live": len(driver.processor.live_session_ids())})  # type: ignore[union-attr]
            print(f"[bench] memory stream: {index + 1:,} sessions, RSS {checkpoints[-1]['rss_mib']} MiB",
                  file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    driver.shutdown()
    return {"checkpoints": checkpoints, "seconds": seconds, "exported": driver.exporter.spans}


def main(argv: list[str]) -> int:
    what, count = argv[0], int(argv[1])
    if what == "per-session":
        print(json.dumps({"bytes": bytes_per_session(count)}))
    else:
        print(json.dumps(stream(count)))
    return 0


def run(report: Report, repeats: int, quick: bool, stream_sessions: int) -> None:
    import subprocess

    def child(*args: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "bench.memory", *args], capture_output=False,
                              stdout=subprocess.PIPE, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    count = 2000 if quick else 10_000
    progress(f"memory: bytes per live session ({count} sessions, {repeats} repeats)")
    per_session = [child("per-session", str(count))["bytes"] for _ in range(repeats)]
    report.add("4 memory", f"bytes per live session ({count:,} live)", per_session, "B", "<= 2,048 B",
               lambda m: m <= 2048)
    progress(f"memory: streaming {stream_sessions:,} sessions through the processor (one run)")
    result = child("stream", str(stream_sessions))
    points = result["checkpoints"]
    rss = [point["rss_mib"] for point in points]
    report.add("4 memory", f"RSS after each tenth of {stream_sessions:,} sessions over {_TOOL_NAMES:,} tool names",
               rss, "MiB")
    report.add("4 memory", "RSS growth, last tenth / first tenth", [rss[-1] / rss[0]], "x", "flat (<= 1.10 x)",
               lambda m: m <= 1.10)
    report.add("4 memory", "live sessions in the store at the end", [points[-1]["live"]], "", "<= 10,000",
               lambda m: m <= 10_000)
    report.note(f"memory stream: {stream_sessions:,} sessions in {result['seconds']:.0f} s; RSS per tenth (MiB): "
                + ", ".join(f"{value:g}" for value in rss))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
