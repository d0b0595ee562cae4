"""The guard's own attributes, written onto a span that is still recording.

The SDK's ``set_attributes`` validates every value through its generic cleaner
(any value, nested sequences and mappings) under two locks: for the session id
and sequence number a step span gets at its start, that was over half of what
the guard spent there, and most of what writing a verdict cost. The guard's
values are plain ``str``, ``int``, ``float`` and ``bool``, valid as they are:
they go straight into the SDK's attribute dict, under the span's lock, when the
span keeps its attributes there with no limit they could cross. Any other span
(another SDK, attribute count or length limits, a span that has ended) and any
other value takes the public API.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.util.types import AttributeValue

_SCALARS = frozenset({str, int, float, bool})


def stamp(span: Any, attributes: dict[str, AttributeValue]) -> None:
    """Write the guard's ``attributes`` onto a recording ``span``."""
    store = getattr(span, "_attributes", None)
    lock = getattr(span, "_lock", None)
    if (
        type(store) is BoundedAttributes
        and lock is not None
        and type(inner := getattr(store, "_dict", None)) is dict
        and store.max_value_len is None
        and not getattr(store, "_immutable", True)
        and _SCALARS.issuperset(map(type, attributes.values()))
    ):
        with lock:  # the span's own lock: its end and every attribute write take it
            if getattr(span, "_end_time", 0) is None and (
                store.maxlen is None or len(inner) + len(attributes) <= store.maxlen
            ):
                inner.update(attributes)
                return
    span.set_attributes(attributes)
