"""(2) Fingerprint cost: small, medium and 10 KB nested arguments, beside the naive
``json.dumps(sort_keys=True)`` + sha256 (which has none of the canonical semantics)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from bench import payloads
from bench._harness import Report, interleave, per_repeat, progress
from otel_agentguard.fingerprint import Fingerprinter

TARGETS_US = {"small": 3.0, "10 KB": 100.0}


def _per_call_us(fn: Callable[[], Any], calls: int) -> Callable[[], float]:
    def measure() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls * 1e6

    return measure


def run(report: Report, repeats: int, quick: bool) -> None:
    fingerprinter = Fingerprinter("search_orders")
    cases = {
        "small": (payloads.small(), 2000),
        "medium": (payloads.medium(), 500),
        "10 KB": (payloads.big(), 40),
    }
    for name, (value, calls) in cases.items():
        if quick:
            calls = max(calls // 4, 10)
        size = len(json.dumps(value))
        progress(f"fingerprint {name} ({size} bytes of JSON)")
        ours = lambda value=value: fingerprinter.arguments(value)  # noqa: E731
        naive = lambda value=value: hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()  # noqa: E731
        ours()
        samples = interleave({"ours": _per_call_us(ours, calls), "naive": _per_call_us(naive, calls)}, repeats)
        target = TARGETS_US.get(name)
        report.add("2 fingerprint", f"{name} ({size} B): agentguard", samples["ours"], "us",
                   f"<= {target:g} us" if target else "", (lambda m, t=target: m <= t) if target else None)
        report.add("2 fingerprint", f"{name}: naive json.dumps+sha256", samples["naive"], "us")
        report.add("2 fingerprint", f"{name}: agentguard / naive", per_repeat(samples["ours"], samples["naive"],
                                                                             lambda a, b: a / b), "x")
