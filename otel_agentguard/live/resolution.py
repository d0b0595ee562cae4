"""Which session a span or a call belongs to: one answer, used everywhere.

A span names its session itself (``agentguard.session.id``,
``gen_ai.conversation.id``, ``session.id``, OpenLLMetry's association
property), or takes it from its context, in this order:

1. the session of an enclosing :func:`otel_agentguard.session` (kept in the
   OpenTelemetry context, so it follows asyncio tasks and copied contexts);
2. a session id in OpenTelemetry baggage (``session.id`` or
   ``gen_ai.conversation.id``: it crosses process boundaries);
3. the session stamped on the parent span when it started.

A step span with no session anywhere is judged in its trace's session
(``implicit``). The span processor, the enforcement hooks and the framework
instrumentations all ask here, so they never disagree.

Hot path: every span of the service passes through :func:`session_in_context`,
so it reads the context as the dict it is, with the keys the API itself uses
(found once, through the public API), and the current context straight from
the context variable that holds it (found by attaching a marker, and again
whenever a library swaps the API's runtime context).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Mapping
from typing import Any

from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.context import Context

from otel_agentguard import attributes as A
from otel_agentguard.attributes import SESSION_ID  # a module global: read for every span
from otel_agentguard.live._context import SESSION_KEY, SessionContext

#: Attributes by which a span names its session, most specific first.
SESSION_ATTRIBUTES = (A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, A.SESSION_ID_SEMCONV, A.TRACELOOP_SESSION_ID)
SESSION_ATTRIBUTE_SET = frozenset(SESSION_ATTRIBUTES)
#: Baggage entries that carry a session id across processes.
SESSION_BAGGAGE = (A.SESSION_ID_SEMCONV, A.GEN_AI_CONVERSATION_ID)


def _context_key(context: Context) -> str:
    """The one key a fresh context gained: how the API stores its value (no private import)."""
    (key,) = context.keys()
    return key


_SPAN_KEY = _context_key(trace.set_span_in_context(trace.INVALID_SPAN, Context()))
_BAGGAGE_KEY = _context_key(baggage.set_baggage("k", "v", Context()))


def _probe() -> tuple[Any, Callable[[], Context]]:
    """The API's runtime context now, and how to read its current context: the ``get`` of
    the context variable it keeps the context in (found by attaching a marker in a
    throwaway copy of the context), else the API's own function."""
    runtime = context_api._RUNTIME_CONTEXT  # noqa: SLF001 - which runtime was probed, nothing else

    def find() -> Callable[[], Context]:
        marker = Context()
        token = context_api.attach(marker)
        try:
            held = [var for var, value in contextvars.copy_context().items() if value is marker]
            found = len(held) == 1 and held[0].get() is marker and context_api.get_current() is marker
        finally:
            context_api.detach(token)
        if found and held[0].get() is context_api.get_current():
            return held[0].get
        return context_api.get_current

    try:
        read = contextvars.copy_context().run(find)
    except Exception:  # deliberate: any surprise means the public API
        read = context_api.get_current
    global _probed
    _probed = (runtime, read)
    return _probed


_probed: tuple[Any, Callable[[], Context]] = (None, context_api.get_current)


def _current_context() -> Context:
    runtime, read = _probed
    if runtime is not context_api._RUNTIME_CONTEXT:  # noqa: SLF001 - a library swapped it (Sentry, vLLM do)
        read = _probe()[1]
    return read()


#: ``context.get_current()``, without its three Python frames while the API keeps the
#: context in a context variable; probed again whenever the API's runtime context changes.
current_context: Callable[[], Context] = (
    _current_context if hasattr(context_api, "_RUNTIME_CONTEXT") else context_api.get_current
)


def named_session(entries: Mapping[str, Any], keys: tuple[str, ...] = SESSION_ATTRIBUTES) -> str | None:
    """The session a span's attributes name (or, with ``keys``, other entries: baggage)."""
    if keys is SESSION_ATTRIBUTES and SESSION_ATTRIBUTE_SET.isdisjoint(entries):
        return None  # the usual step span: one C-level test instead of a lookup per spelling
    for key in keys:
        value = entries.get(key)
        if value:
            return str(value)
    return None


def session_in_context(ctx: Context | None = None) -> str | None:
    """The session id the context carries (enclosing session, baggage, parent span), or None."""
    if ctx is None:
        ctx = current_context()
    carried = _carried_session(ctx)
    if carried is not None:
        return carried
    parent = ctx.get(_SPAN_KEY)
    if parent is None:
        return None
    stamped = span_attributes(parent).get(SESSION_ID)  # the session the guard stamped on the parent at its start
    return str(stamped) if stamped else None


def session_and_parent(ctx: Context) -> tuple[str | None, Any, Mapping[str, Any] | None]:
    """:func:`session_in_context`, with the parent span and its attributes (None where the context
    holds no span): a starting step reads its parent once, for its session and to tell whether it
    duplicates the parent's step."""
    parent = ctx.get(_SPAN_KEY)
    parent_attrs = span_attributes(parent) if parent is not None else None
    carried = _carried_session(ctx)
    if carried is not None:
        return carried, parent, parent_attrs
    stamped = parent_attrs.get(SESSION_ID) if parent_attrs else None
    return (str(stamped) if stamped else None), parent, parent_attrs


def _carried_session(ctx: Context) -> str | None:
    """The session of an enclosing :func:`otel_agentguard.session`, else one in baggage."""
    enclosing = ctx.get(SESSION_KEY)
    if enclosing is not None:
        return enclosing.session_id  # type: ignore[no-any-return,attr-defined]  # only SessionContext is stored
    carried = ctx.get(_BAGGAGE_KEY)
    if carried:
        return named_session(carried, SESSION_BAGGAGE)  # type: ignore[arg-type]  # the API stores a mapping
    return None


def parent_span(ctx: Context | None = None) -> Any:
    """The span the context holds (the parent of a span starting in it), or None."""
    return (ctx if ctx is not None else current_context()).get(_SPAN_KEY)


def enclosing_session(ctx: Context | None = None) -> SessionContext | None:
    """The :func:`otel_agentguard.session` the context is inside (its profile and task type too)."""
    value = (ctx if ctx is not None else current_context()).get(SESSION_KEY)
    return value if isinstance(value, SessionContext) else None


def baggage_session(ctx: Context | None = None) -> str | None:
    """A session id in the context's baggage (default: the current context)."""
    return named_session(baggage.get_all(ctx), SESSION_BAGGAGE)


def session_of_current_call(ctx: Context | None = None) -> str | None:
    """The session a call made now is judged in: the context's, else the current trace's."""
    if ctx is None:
        ctx = current_context()
    found = session_in_context(ctx)
    if found is not None:
        return found
    span_context = trace.get_current_span(ctx).get_span_context()
    return trace.format_trace_id(span_context.trace_id) if span_context.is_valid else None


def span_attributes(span: Any) -> Mapping[str, Any]:
    """A span's attributes, read cheaply.

    ``span.attributes`` of an SDK span is a ``MappingProxyType`` over a
    ``BoundedAttributes``, whose every ``get`` runs three Python frames; the
    processor reads a dozen attributes per span. The SDK keeps them in a plain
    dict (``_attributes._dict``) that is read here directly when present (reading
    a dict is atomic under the GIL); any other span falls back to the public API.
    """
    try:
        inner = span._attributes._dict  # plain attribute reads: far cheaper than getattr() with a default
    except AttributeError:
        inner = None
    if type(inner) is dict:
        return inner
    return getattr(span, "attributes", None) or {}
