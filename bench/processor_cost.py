"""(1) Processor cost per span and (6) its scaling with live sessions and window size.

(1) The SDK with a BatchSpanProcessor and a dropping exporter, with and without the
agentguard processor, on 1,000 concurrent sessions of model and tool spans (a tenth of
them looping); each repeat builds both providers afresh and drives the same spans.

(6) Live sessions stay open (long-run budgets, new arguments every call, so every probe
keeps working); after an untimed warm-up that fills their windows, each repeat times the
same number of steps spread over 10 / 1,000 / 100,000 sessions, and at windows 6 and 64.
"""

from __future__ import annotations

import random
import time

from bench._harness import Report, interleave, per_repeat, progress
from bench.workload import Driver, long_run_policy, make_sessions, run_concurrent, session_steps


def processor_cost(report: Report, repeats: int, quick: bool) -> None:
    sessions, steps = (200, 10) if quick else (1000, 10)
    progress(f"processor cost: {sessions} concurrent sessions x ~{steps} spans, {repeats} repeats")
    workload = make_sessions(sessions, steps, seed=1)

    def variant(guard: bool):  # noqa: ANN202
        def measure() -> float:
            driver = Driver(guard)
            seconds, spans = run_concurrent(driver, workload, seed=2)
            driver.shutdown()
            return seconds / spans * 1e6

        return measure

    samples = interleave({"sdk": variant(False), "guard": variant(True)}, repeats)
    report.add("1 processor", "SDK + BatchSpanProcessor, per span", samples["sdk"], "us")
    report.add("1 processor", "same + agentguard processor, per span", samples["guard"], "us")
    report.add("1 processor", "agentguard adds, per span", per_repeat(samples["guard"], samples["sdk"],
                                                                      lambda a, b: a - b), "us")
    report.add("1 processor", "agentguard adds / SDK cost", per_repeat(samples["guard"], samples["sdk"],
                                                                     lambda a, b: (a - b) / b * 100), "%",
               "<= 10 %", lambda m: m <= 10)


class _LiveSessions:
    """A provider with ``count`` open sessions whose windows are full, stepped at random."""

    def __init__(self, count: int, window: int, guard: bool, warmup_steps: int, seed: int):
        self.driver = Driver(guard, policy=long_run_policy(window), max_sessions=max(count * 2, 10_000))
        self.rnd = random.Random(seed)
        self.contexts = []
        for index in range(count):
            span, context = self.driver.open(f"live-{seed}-{index}")
            self.contexts.append(context)
        self.step_rnd = random.Random(seed + 1)
        for context in self.contexts:
            for spec in session_steps(self.step_rnd, warmup_steps, looping=False, unique=True):
                self.driver.step(context, spec)
        self.pool = [spec for spec in session_steps(self.step_rnd, 4000, looping=False, unique=True) if spec]

    def measure(self, steps: int) -> float:
        rnd, contexts, pool, step = self.rnd, self.contexts, self.pool, self.driver.step
        picks = [(contexts[rnd.randrange(len(contexts))], pool[rnd.randrange(len(pool))]) for _ in range(steps)]
        start = time.perf_counter()
        for context, spec in picks:
            step(context, spec)
        return (time.perf_counter() - start) / steps * 1e6


def scaling(report: Report, repeats: int, quick: bool) -> None:
    steps = 4000 if quick else 20_000
    big = 10_000 if quick else 100_000
    configs = {
        "sdk only": (1000, 6, False, 12),
        "10 sessions, window 6": (10, 6, True, 12),
        "1,000 sessions, window 6": (1000, 6, True, 12),
        f"{big:,} sessions, window 6": (big, 6, True, 2),
        "1,000 sessions, window 64": (1000, 64, True, 130),
    }
    live = {}
    for name, (count, window, guard, warmup) in configs.items():
        progress(f"scaling: warming up {name}")
        live[name] = _LiveSessions(count, window, guard, warmup, seed=len(live) + 10)
    progress(f"scaling: {steps} steps per figure, {repeats} repeats")
    samples = interleave({name: (lambda s=state: s.measure(steps)) for name, state in live.items()}, repeats)
    for state in live.values():
        state.driver.shutdown()
    base = samples.pop("sdk only")
    report.add("6 scaling", "SDK only, per span", base, "us")
    for name, values in samples.items():
        report.add("6 scaling", f"{name}: agentguard adds", per_repeat(values, base, lambda a, b: a - b), "us")
    # Against 10 sessions (whose state stays in the CPU caches) and against 1,000 (the usual case):
    # an O(1) probe stays flat from 1,000 to 100,000 sessions and from window 6 to window 64.
    for reference in ("10 sessions, window 6", "1,000 sessions, window 6"):
        first = samples[reference]
        for name, values in samples.items():
            if name == reference or (reference.startswith("1,000") and name.startswith("10 sessions")):
                continue
            label = reference.split(" sessions")[0] + " sessions"
            report.add("6 scaling", f"{name} / {label}, total per span",
                       per_repeat(values, first, lambda a, b: a / b), "x", "flat (<= 1.25 x)", lambda m: m <= 1.25)
