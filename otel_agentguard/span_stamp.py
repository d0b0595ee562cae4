"""The guard's own attributes, written onto a span as it starts.

The SDK's ``set_attributes`` validates every value through its generic cleaner
(any value, nested sequences and mappings) under two locks: for the session id
and sequence number a step span gets, that was over half of what the guard spent
on the span's start. The guard's values are a ``str`` and an ``int``, valid by
construction, and a span in ``on_start`` is not yet shared with any other
thread: they go straight into the SDK's attribute dict when the span keeps its
attributes there with no limit they could cross. Any other span (another SDK,
attribute count or length limits, a span already ended) takes the public API.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.util.types import AttributeValue


def stamp(span: Any, attributes: dict[str, AttributeValue]) -> None:
    """Write ``attributes`` (exact ``str`` and ``int`` values) onto ``span`` in ``on_start``."""
    store = getattr(span, "_attributes", None)
    if (
        type(store) is BoundedAttributes
        and type(inner := getattr(store, "_dict", None)) is dict
        and store.max_value_len is None
        and (store.maxlen is None or len(inner) + len(attributes) <= store.maxlen)
        and not getattr(store, "_immutable", True)
        and getattr(span, "_end_time", 0) is None
    ):
        inner.update(attributes)
    else:
        span.set_attributes(attributes)
