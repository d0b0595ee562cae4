"""A memory limit in bytes for ``agentguard serve``, as the Collector's ``memory_limiter`` has.

Span and trace counts bound nothing in practice (spans differ in size by orders of magnitude),
so the service watches its resident memory:

- above the soft limit (``limit - spike``) new requests are refused with 503 and ``Retry-After``
  (gRPC ``UNAVAILABLE``): the senders keep their spans and retry, and memory stops growing;
- above the hard limit the service also sheds what it holds: it forgets the judged traces it
  kept for amending, then judges the oldest open traces early, and collects garbage.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 1000**2, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1000**3, "gib": 1 << 30}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """``512MiB``, ``1.5G``, ``400000000``: a number of bytes; ValueError names what is wrong."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 512MiB, 2GiB, 800MB, or bytes)")
    return int(float(match.group(1)) * _UNITS[unit])


def resident_bytes() -> int:
    """This process's resident memory now (Linux); elsewhere, its peak so far."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


class MemoryLimit:
    """Soft and hard thresholds on resident memory (see the module's docstring)."""

    def __init__(self, limit_bytes: int, spike_bytes: int | None = None,
                 measure: Callable[[], int] = resident_bytes):
        if spike_bytes is None:
            spike_bytes = limit_bytes // 5
        if not 0 <= spike_bytes < limit_bytes:
            raise ValueError("the spike must be smaller than the limit")
        self.hard = limit_bytes
        self.soft = limit_bytes - spike_bytes
        self._measure = measure

    def above_soft(self) -> bool:
        return self._measure() > self.soft

    def above_hard(self) -> bool:
        return self._measure() > self.hard
