"""(3) An instrumented ``openai`` chat call: the real SDK over a mock transport.

Each repeat runs one child process per variant (``bench._openai_worker``), in alternating
order: uninstrumented, the official openai-v2 instrumentation, OpenLLMetry's, and
otel_agentguard in observe mode (its instrumentor and its processor). The response asks
for two tool calls. Each child warms up, then times the same number of calls; a variant's
added time is its per-call time minus the uninstrumented one of the same repeat.

That difference between processes carries their noise (memory layout, the machine's drift
between children) at the size of the difference sought, so the comparison with openai-v2,
whose target is parity, is also measured in paired blocks: one child per variant alternates
blocks of calls with the instrumentation switched on and off (both instrumentors unpatch
cleanly; OpenLLMetry's leaves its wrappers behind, so it has no paired figure), and its added
time is the median difference within a pair. The target is checked on the paired ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from bench import _harness
from bench._harness import Report, per_repeat, progress

VARIANTS = ("none", "openai_v2", "openllmetry", "agentguard")
PAIRED = ("openai_v2", "agentguard")  # their instrumentors switch off and on cleanly
LABELS = {"openai_v2": "openai-v2 2.4b0", "openllmetry": "OpenLLMetry", "agentguard": "agentguard (observe)"}


def _worker(variant: str, *args: int | str) -> dict:
    """One child process of ``bench._openai_worker`` (arguments after the variant as it takes them)."""
    env = {**os.environ, "OTEL_AGENTGUARD_FINGERPRINT_KEY": "bench"}
    done = subprocess.run([sys.executable, "-m", "bench._openai_worker", variant, *map(str, args)],
                          stdout=subprocess.PIPE, text=True, check=True, env=env)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if variant != "none" and not result["spans"]:
        raise RuntimeError(f"{variant} made no spans: the instrumentation did not patch this openai")
    return result


def _child(variant: str, calls: int, warmup: int) -> float:
    return float(_worker(variant, calls, warmup)["per_call_us"])


def _paired_child(variant: str, calls: int, warmup: int, pairs: int) -> float:
    """Median added microseconds per call, over ``pairs`` pairs of blocks in one process."""
    result = _worker(variant, calls, warmup, pairs)
    return statistics.median(on - off for on, off in zip(result["instrumented_us"], result["bare_us"], strict=True))


def run(report: Report, repeats: int, quick: bool) -> None:
    try:
        import opentelemetry.instrumentation.openai  # noqa: F401
        import opentelemetry.instrumentation.openai_v2  # noqa: F401
    except ImportError:
        report.note("3 openai: skipped, the anchors (openai-v2, OpenLLMetry) are not installed "
                    "(run through `make bench`)")
        return
    calls, warmup = (10, 3) if _harness.SMOKE else (150, 30) if quick else (400, 60)
    progress(f"openai call: {len(VARIANTS)} variants x {repeats} repeats, {calls} calls each")
    samples: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for repeat in range(repeats):
        for variant in VARIANTS if repeat % 2 == 0 else reversed(VARIANTS):
            samples[variant].append(_child(variant, calls, warmup))
    base = samples["none"]
    report.add("3 openai", "uninstrumented chat call (2 tool calls)", base, "us")
    added = {}
    for variant in VARIANTS[1:]:
        added[variant] = per_repeat(samples[variant], base, lambda a, b: a - b)
        report.add("3 openai", f"{LABELS[variant]} adds", added[variant], "us")
    report.add("3 openai", "agentguard added / openai-v2 added (separate processes)",
               per_repeat(added["agentguard"], added["openai_v2"], lambda a, b: a / b), "x")
    report.add("3 openai", "agentguard added / OpenLLMetry added", per_repeat(added["agentguard"],
               added["openllmetry"], lambda a, b: a / b), "x", "< 0.25", lambda m: m < 0.25)
    block, pairs = (3, 2) if _harness.SMOKE else (25, 8) if quick else (50, 16)
    progress(f"openai call, paired blocks: {len(PAIRED)} variants x {repeats} repeats, {pairs} pairs of {block} calls")
    paired: dict[str, list[float]] = {variant: [] for variant in PAIRED}
    for repeat in range(repeats):
        for variant in PAIRED if repeat % 2 == 0 else reversed(PAIRED):
            paired[variant].append(_paired_child(variant, block, warmup, pairs))
    for variant in PAIRED:
        report.add("3 openai", f"{LABELS[variant]} adds, paired blocks in one process", paired[variant], "us")
    report.add("3 openai", "agentguard added / openai-v2 added (paired blocks)",
               per_repeat(paired["agentguard"], paired["openai_v2"], lambda a, b: a / b), "x", "<= 1.0",
               lambda m: m <= 1.0)
    # The Python bytecodes of a call, counted (the machine's drift does not change them): what
    # the timed figures follow, noise aside.
    counted_calls = 5 if _harness.SMOKE else 50 if quick else 100
    progress(f"openai call: Python bytecodes of {counted_calls} calls per variant, counted")
    bytecodes = {variant: _worker(variant, counted_calls, warmup, "--bytecodes")["bytecodes_per_call"]
                 for variant in VARIANTS}
    report.add("3 openai", "uninstrumented chat call, Python bytecodes per call", [bytecodes["none"]], "bytecodes")
    for variant in VARIANTS[1:]:
        report.add("3 openai", f"{LABELS[variant]} adds, Python bytecodes per call",
                   [bytecodes[variant] - bytecodes["none"]], "bytecodes")
    report.add("3 openai", "agentguard added / openai-v2 added, bytecodes",
               [(bytecodes["agentguard"] - bytecodes["none"]) / (bytecodes["openai_v2"] - bytecodes["none"])], "x")
    report.note("3 openai: each instrumentation with its defaults (openai-v2 records no message content; "
                "OpenLLMetry records prompts and completions unless TRACELOOP_TRACE_CONTENT=false)")
