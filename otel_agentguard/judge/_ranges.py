"""The ranges of numbers read from outside: provider responses, foreign spans, trace and policy files.

A number out of range (10**400 tokens, an infinite cost, a timestamp past the year
2554) would otherwise travel on until some arithmetic raises ``OverflowError``
far from where it came in, or turn a total into ``inf`` or ``NaN``. Each number is
checked where it is read, against one of the ranges below:

- in files it is an error naming the file, line and field (:class:`OutOfRange`
  carries the field and what was expected);
- live it is dropped and counted once as an internal error (:func:`live_count`):
  the application never notices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from otel_agentguard import _internal_errors

MAX_COUNT = 2**63 - 1  # tokens, tool calls, sequence numbers, thresholds: OTLP's int64
MAX_UNIX_NANO = 2**64 - 1  # OTLP's fixed64 timestamps
MAX_SECONDS = MAX_COUNT / 1e9  # a duration whose nanoseconds still fit an int64 (292 years)
MAX_USD = 1e12  # a cost, spend or budget in US dollars
MAX_USD_PER_MTOK = 1e6  # a model price: a dollar per token

LIVE_KIND = "number_out_of_range"  # the internal-error kind of a dropped live value


@dataclass(frozen=True)
class Range:
    maximum: float
    integer: bool
    expected: str  # what the error message says was expected


COUNT = Range(MAX_COUNT, True, "an integer from 0 to 2**63-1")
UNIX_NANO = Range(MAX_UNIX_NANO, True, "nanoseconds since 1970 from 0 to 2**64-1")
SECONDS = Range(MAX_SECONDS, False, f"a number of seconds from 0 to {MAX_SECONDS:.3g}")
USD = Range(MAX_USD, False, f"a number of US dollars from 0 to {MAX_USD:.0e}")
USD_PER_MTOK = Range(
    MAX_USD_PER_MTOK, False, f"a number of US dollars per million tokens from 0 to {MAX_USD_PER_MTOK:.0e}")


class OutOfRange(ValueError):
    """A number outside its range; ``str()`` is ``field: expected ..., got ...``."""

    def __init__(self, field: str, value: Any, expected: str):
        self.field = field
        self.expected = expected
        super().__init__(f"{field}: expected {expected}, got {describe(value)}")


def within(value: Any, allowed: Range) -> bool:
    """Whether ``value`` is a number (not a bool) in ``allowed``; integral when it must be."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if isinstance(value, float):
        if not 0.0 <= value <= allowed.maximum:  # also refuses NaN
            return False
        return not allowed.integer or value.is_integer()
    return 0 <= value <= allowed.maximum


def check(value: Any, field: str, allowed: Range) -> Any:
    """``value`` itself when it is in ``allowed``, else :class:`OutOfRange`."""
    if not within(value, allowed):
        raise OutOfRange(field, value, allowed.expected)
    return value


def live_count(value: Any) -> int | None:
    """A count from a provider response or a span: ``None`` when absent or out of range.

    A dropped value is counted once as an internal error (``number_out_of_range``):
    a server that reports 10**400 tokens must not break the judge, nor write a
    trace that cannot be read back.
    """
    if type(value) is int and 0 <= value <= MAX_COUNT:  # the usual case, in one type test
        return value
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value  # a subclass of int (an IntEnum member, say)
    drop()
    return None


def drop() -> None:
    """Count a live value dropped for being out of range (one internal error each)."""
    _internal_errors.report(LIVE_KIND)


def describe(value: Any) -> str:
    """A short, safe rendering of a bad value for an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**20:
        try:
            return f"an integer of {len(str(abs(value))):,} digits"
        except ValueError:  # beyond Python's 4,300-digit conversion limit: estimate from the bits
            return f"an integer of about {int(abs(value).bit_length() * math.log10(2)) + 1:,} digits"
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
