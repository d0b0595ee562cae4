"""The guard's own attributes, written onto a span that is still recording.

The SDK's ``set_attributes`` validates every value through its generic cleaner
(any value, nested sequences and mappings) under two locks: for the session id
and sequence number a step span gets at its start, that was over half of what
the guard spent there, most of what writing a verdict cost, and more than
the rest of the guard's work on a model call when it wrote the response's
attributes. The guard's values are plain ``str``, ``int``, ``float`` and
``bool`` or tuples of ``str``, which the SDK would store as they are: they go
straight into the SDK's attribute dict when the span is the SDK's
and keeps its attributes there with no limit they could cross (the
layout is checked once, at import). Any other span (another SDK, attribute
count or length limits, a span that has ended) and any other value takes the
public API. Where the package was built with its compiled span paths, they write
the stamps (or hand them back, having done nothing, to the functions here). The
guard's events (alerts) go the same way: on the SDK's span, stored as its
``add_event`` stores them, without its generic cleaner.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace import Span as SDKSpan
from opentelemetry.util.types import AttributeValue

_SCALARS = frozenset({str, int, float, bool})
_STRINGS = frozenset({str})


def _layout_known() -> bool:
    """Whether this SDK keeps attributes as the fast paths below expect."""
    try:
        store = BoundedAttributes(maxlen=4, attributes={"k": "v"}, immutable=False)
        return type(store._dict) is dict and store._immutable is False and store.max_value_len is None
    except Exception:  # deliberate: any surprise means the public API
        return False


_DIRECT = _layout_known()
# Events too: the SDK's span adds one through _add_event (which takes its lock and checks its end).
_DIRECT_EVENTS = _DIRECT and callable(getattr(SDKSpan, "_add_event", None))
_SDK_ADD_EVENT = SDKSpan.add_event  # a subclass with its own (to redact, say) is written through it
_sdk_span_types: dict[type, bool] = {}  # span classes seen: the SDK's (its tracer makes a subclass) or not


def _compiled_writers() -> tuple[Any, Any]:
    """The compiled twins of stamp and stamp_starting (in the processor's compiled span paths,
    which write its stamps so): each writes as the function does, or returns False, having done
    nothing, for the function to write. None where the package has no compiled code."""
    if not _DIRECT:
        return None, None
    try:
        from otel_agentguard import _span_paths
    except ImportError:  # built without a C compiler, or a free-threaded Python
        return None, None
    return _span_paths.stamp, _span_paths.stamp_starting


_compiled_stamp, _compiled_stamp_starting = _compiled_writers()


def writes_as_the_sdk(kind: type) -> bool:
    """Whether spans of this class keep their attributes where the SDK's do, written as it writes
    them: the SDK's span, or a subclass that does not override the writers (one that does, to
    redact say, is written through them)."""
    return (_DIRECT and issubclass(kind, SDKSpan) and kind.set_attributes is SDKSpan.set_attributes
            and kind.set_attribute is SDKSpan.set_attribute)


def _sdk_span(span: Any) -> bool:
    kind = type(span)
    known = _sdk_span_types.get(kind)
    if known is None:
        known = writes_as_the_sdk(kind)
        if len(_sdk_span_types) < 64:
            _sdk_span_types[kind] = known
    return known


def _writable(store: Any, attributes: dict[str, Any]) -> bool:
    """Whether writing ``attributes`` into the store's dict is what the SDK would do: no limit to
    apply, and no key already there (the SDK moves a rewritten key to the end, which decides what a
    full span drops later; an update in place would not)."""
    return (type(store) is BoundedAttributes and store.max_value_len is None and not store._immutable
            and (store.maxlen is None or len(store._dict) + len(attributes) <= store.maxlen)
            and store._dict.keys().isdisjoint(attributes))


def stamp_starting(span: Any, attributes: dict[str, AttributeValue]) -> None:
    """Write the guard's ``str``/``int``/``bool`` stamps onto a span in ``on_start`` (not yet
    shared with any other thread, so no lock is taken)."""
    if _compiled_stamp_starting is not None and _compiled_stamp_starting(span, attributes):
        return
    store = getattr(span, "_attributes", None) if _sdk_span(span) else None
    if store is not None and _writable(store, attributes):
        store._dict.update(attributes)
    else:
        span.set_attributes(attributes)


def _stored_as_is(values: Iterable[Any], items: frozenset[type] = _STRINGS) -> bool:
    """Whether the SDK would store each value unchanged (or, a tuple, as an equal tuple): an exact
    scalar, or a tuple of exact ``items`` of one type (strings: finish reasons, claim categories;
    an SDK before 1.45 drops a tuple of mixed types)."""
    # (A plain loop: for the half-dozen values of a stamp it is faster than gathering their types
    # with map and set, although it runs more bytecodes.)
    for value in values:
        kind = type(value)
        if kind in _SCALARS:
            continue
        if kind is not tuple:
            return False
        if value:
            first = type(value[0])
            if first not in items:
                return False
            for item in value:
                if type(item) is not first:
                    return False
    return True


def _plain_keys(attributes: dict[str, Any]) -> bool:
    """Whether every key is a non-empty str (the SDK drops or converts others)."""
    for key in attributes:  # (a loop: all() over a generator is a call per key)
        if type(key) is not str or not key:
            return False
    return True


def stamp(span: Any, attributes: dict[str, Any]) -> None:
    """Write the guard's ``attributes`` (scalars, tuples of strings) onto a recording ``span``
    any thread may hold."""
    if _compiled_stamp is not None and _compiled_stamp(span, attributes):
        return
    lock = getattr(span, "_lock", None) if _sdk_span(span) else None
    if lock is not None and _stored_as_is(attributes.values()):
        with lock:  # the span's own lock: its end and every attribute write take it
            store = getattr(span, "_attributes", None)
            if getattr(span, "_end_time", 0) is None and _writable(store, attributes):
                store._dict.update(attributes)  # type: ignore[union-attr]  # _writable checked its type
                return
    span.set_attributes(attributes)


def add_event(span: Any, name: str, attributes: dict[str, Any]) -> None:
    """An event of the guard's ``attributes`` (scalars, tuples of scalars) on ``span``: on the SDK's
    span with no attribute length limit, stored as its ``add_event`` stores them, without passing
    each value through its generic cleaner (most of what an alert's event cost); on any other span,
    or past the event's attribute count limit, through the public API."""
    limits = (getattr(span, "_limits", None)
              if _DIRECT_EVENTS and _sdk_span(span) and type(span).add_event is _SDK_ADD_EVENT else None)
    if (limits is not None and limits.max_attribute_length is None and _stored_as_is(attributes.values(), _SCALARS)
            and _plain_keys(attributes)):
        most = limits.max_event_attributes
        if most is None or len(attributes) <= most:
            store = BoundedAttributes(most, None, immutable=True)
            store._dict.update(attributes)  # (immutable: to the public API, as the SDK's own are)
            span._add_event(Event(name, store))
            return
    span.add_event(name, attributes)
