"""(1) The Python bytecodes a span runs on the thread that ends it, with and without the guard.

The timed ratios of section 1 drift with the shared machine's speed; this count does not (the
same spans from the same seeds, counted one by one). It is what those ratios follow: the SDK's
span and the guard's work on it are both Python, and a bytecode costs about the same in either.
The instruction counts of a simulator follow them less well (much of the SDK's work per span is
dictionary work in C, fast per instruction; the guard's is the interpreter's dispatch, slow).

Counted with ``sys.settrace`` opcode events on the calling thread only (the batch processor's
export thread is not counted), after an untimed warm-up on the same provider.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from bench import _harness
from bench._harness import Report, progress
from bench.workload import Driver, foreign_step, make_sessions, run_concurrent


def counted(run: Callable[[], int]) -> tuple[int, int]:
    """(bytecodes executed on this thread, spans) of ``run()``, which returns its span count."""
    executed = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal executed
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            executed += 1
        return trace

    previous = sys.gettrace()  # a coverage tool's, say: put back afterwards
    sys.settrace(trace)
    try:
        spans = run()
    finally:
        sys.settrace(previous)
    return executed, spans


def _per_span(guard: bool, foreign: bool, sessions: int) -> float:
    def workload(count: int, seed: int) -> list[Any]:
        made = make_sessions(count, 10, seed=seed)
        return [(sid, [foreign_step(step) for step in steps]) for sid, steps in made] if foreign else made

    driver = Driver(guard)
    try:
        run_concurrent(driver, workload(max(sessions // 4, 5), seed=9), seed=5, foreign=foreign)  # warm-up
        measured = workload(sessions, seed=4 if foreign else 1)
        executed, spans = counted(lambda: run_concurrent(driver, measured, seed=5, foreign=foreign)[1])
    finally:
        driver.shutdown()
    return executed / spans


def run(report: Report, quick: bool) -> None:
    sessions = 10 if _harness.SMOKE else 50 if quick else 200
    progress(f"bytecodes per span: {sessions} sessions x ~10 spans, own and foreign spans, counted")
    for foreign, what in ((False, "our own step spans"), (True, "foreign GenAI spans, raw tool arguments")):
        sdk = _per_span(False, foreign, sessions)
        guard = _per_span(True, foreign, sessions)
        report.add("1 processor", f"{what}: SDK + BatchSpanProcessor, Python bytecodes per span", [sdk], "bytecodes")
        report.add("1 processor", f"{what}: agentguard adds, Python bytecodes per span", [guard - sdk], "bytecodes")
        report.add("1 processor", f"{what}: bytecodes with agentguard / without", [guard / sdk], "x")
