"""Interleaved repeats, summaries and the printed table."""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

# ``python -m bench --smoke``: every section at sizes too small to measure anything, in seconds,
# so that the test suite runs the benchmark and it never rots. Sections read it for their sizes.
SMOKE = False


def cache_dir() -> Path:
    """Where generated inputs are kept between runs: ``bench/.cache``, or $AGENTGUARD_BENCH_CACHE."""
    path = Path(os.environ.get("AGENTGUARD_BENCH_CACHE") or Path(__file__).resolve().parent / ".cache")
    path.mkdir(parents=True, exist_ok=True)
    return path


def guard_stayed_in(where: str) -> None:
    """Stop the benchmark if the guard has failed open: it logs the error once and steps aside, and
    every figure after that would time a guard doing nothing (a change that breaks the processor
    would look like a speed-up)."""
    from otel_agentguard import _internal_errors

    failures = _internal_errors.counts()
    if failures:
        raise SystemExit(f"{where}: the guard failed open ({failures}): the figures would time a guard that "
                         "stepped aside")


def interleave(variants: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Run every variant once per repeat, alternating the order; returns each variant's samples."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else reversed(names):
            gc.collect()
            samples[name].append(variants[name]())
    return samples


def per_repeat(a: list[float], b: list[float], op: Callable[[float, float], float]) -> list[float]:
    """A derived figure computed within each repeat (a difference or a ratio of its own samples)."""
    return [op(x, y) for x, y in zip(a, b, strict=True)]


@dataclass
class Row:
    section: str
    figure: str
    samples: list[float]
    unit: str
    target: str = ""
    met: bool | None = None  # None: no target

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        return min(self.samples)

    @property
    def high(self) -> float:
        return max(self.samples)


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, section: str, figure: str, samples: Iterable[float], unit: str, target: str = "",
            met: Callable[[float], bool] | None = None) -> Row:
        values = list(samples)
        row = Row(section, figure, values, unit, target)
        if met is not None:
            row.met = met(row.median)
        self.rows.append(row)
        return row

    def note(self, text: str) -> None:
        self.notes.append(text)

    def table(self) -> str:
        header = ("section", "figure", "median", "min", "max", "unit", "target", "met")
        lines = [header]
        for row in self.rows:
            lines.append((row.section, row.figure, _fmt(row.median), _fmt(row.low), _fmt(row.high), row.unit,
                          row.target, {True: "yes", False: "NO", None: ""}[row.met]))
        widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
        out = []
        for index, line in enumerate(lines):
            cells = [str(cell).rjust(widths[i]) if i in (2, 3, 4) else str(cell).ljust(widths[i])
                     for i, cell in enumerate(line)]
            out.append("| " + " | ".join(cells) + " |")
            if index == 0:
                out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        return "\n".join(out)


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def machine() -> dict[str, str]:
    """What ran the benchmark: cores, CPU model, memory, Python and package versions."""
    cpu = "?"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory = "?"
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal"):
                    memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                    break
    except OSError:
        pass
    from importlib import metadata

    versions = {}
    for name in ("otel-agentguard", "opentelemetry-sdk", "openai", "opentelemetry-instrumentation-openai-v2",
                 "opentelemetry-instrumentation-openai", "orjson", "msgspec"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "nproc": str(os.cpu_count()),
        "pinned to CPUs": ",".join(map(str, affinity)),
        "cpu": cpu,
        "memory": memory,
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        **versions,
    }


def progress(text: str) -> None:
    """A line on stderr while the benchmark runs (stdout holds only the results)."""
    print(f"[bench] {text}", file=sys.stderr, flush=True)
