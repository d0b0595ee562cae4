"""(2) Fingerprint cost: small, medium and 10 KB nested arguments, beside the naive
``json.dumps(sort_keys=True)`` + sha256 (which has none of the canonical semantics).

Measured with orjson (the ``fast`` extra) when it is installed and, in the same interleaved
run, without it (the standard library's encoder), so the figures come from one machine state."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from typing import Any

from bench import payloads
from bench._harness import Report, interleave, per_repeat, progress
from otel_agentguard.judge.fingerprints import _plain_json
from otel_agentguard.judge.fingerprints.canonical import Fingerprinter

TARGETS_US = {"small": 3.0, "10 KB": 120.0}


def _per_call_us(fn: Callable[[], Any], calls: int) -> Callable[[], float]:
    def measure() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls * 1e6

    return measure


def _without_orjson(measure: Callable[[], float]) -> Callable[[], float]:
    """``measure`` with the standard library's encoder in place of orjson."""
    def measured() -> float:
        saved = _plain_json._orjson_agrees
        _plain_json._orjson_agrees = False
        try:
            return measure()
        finally:
            _plain_json._orjson_agrees = saved

    return measured


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
        variants = {"ours": _per_call_us(ours, calls), "naive": _per_call_us(naive, calls)}
        with_orjson = _plain_json._orjson_agrees
        if with_orjson:
            variants["stdlib"] = _without_orjson(_per_call_us(ours, calls))
        samples = interleave(variants, repeats)
        target = TARGETS_US.get(name)
        label = "agentguard with orjson" if with_orjson else "agentguard (no orjson)"
        report.add("2 fingerprint", f"{name} ({size} B): {label}", samples["ours"], "us",
                   f"<= {target:g} us" if target else "", (lambda m, t=target: m <= t) if target else None)
        if with_orjson:
            report.add("2 fingerprint", f"{name}: agentguard without orjson", samples["stdlib"], "us")
        report.add("2 fingerprint", f"{name}: naive json.dumps+sha256", samples["naive"], "us")
        report.add("2 fingerprint", f"{name}: agentguard / naive", per_repeat(samples["ours"], samples["naive"],
                                                                             lambda a, b: a / b), "x")


def worst_case(report: Report, quick: bool) -> None:
    """The most one guarded call can cost, whatever the application passes: every container
    kind shares one element budget, strings and buffers one byte budget, and objects the guard
    does not read cost nothing."""
    import itertools
    from collections.abc import Mapping

    class Endless(Mapping):  # a lazy mapping that never ends
        def __getitem__(self, key: Any) -> int:
            return 1

        def __iter__(self) -> Any:
            return itertools.count()

        def __len__(self) -> int:
            return 2**62

    size = 200_000 if quick else 2_000_000
    cases: dict[str, Callable[[], Any]] = {
        f"dict of {size:,} keys": lambda: {f"k{i}": i for i in range(size)},
        f"list of {size:,} ints": lambda: list(range(size)),
        f"set of {size:,} ints": lambda: set(range(size)),
        "string of 64 MiB": lambda: "x" * (64 << 20),
        "endless lazy mapping": Endless,
    }
    try:
        import numpy

        cases["numpy array of 64 MiB"] = lambda: numpy.zeros(64 << 20, dtype=numpy.uint8)
    except ImportError:
        pass
    fingerprinter = Fingerprinter("worst_case")
    for name, build in cases.items():
        value = build()
        progress(f"fingerprint worst case: {name}")
        samples = []
        for _ in range(3):
            start = time.perf_counter()
            fingerprinter.arguments({"value": value})
            samples.append((time.perf_counter() - start) * 1e3)
        report.add("2 fingerprint", f"worst case, {name}", samples, "ms", "bounded (<= 100 ms)", lambda m: m <= 100)
