"""Which session a span belongs to, read on the hot path without the API's frames.

The processor reads the current context through the context variable the API
keeps it in, and a parent span's attributes through the SDK's dict. These tests
hold both reads to the public API's answers wherever a context can be: attached
and detached, in a fresh thread, in asyncio tasks, in copied contexts, and with
parents that are no SDK span.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.context import Context
from opentelemetry.context.context import _RuntimeContext
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agentguard import attributes as A
from otel_agentguard.live import resolution as session_resolution
from otel_agentguard.live._context import SessionContext, with_session
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.live.resolution import current_context, session_in_context


def test_current_context_is_the_apis_current_context_as_it_is_attached_and_detached() -> None:
    outer = context_api.set_value("k", "outer")
    inner = context_api.set_value("k", "inner", outer)
    assert current_context() is context_api.get_current()
    token = context_api.attach(outer)
    try:
        assert current_context() is outer
        nested = context_api.attach(inner)
        assert current_context() is inner
        context_api.detach(nested)
        assert current_context() is outer
    finally:
        context_api.detach(token)
    assert current_context() is context_api.get_current()


def test_current_context_follows_threads_tasks_and_copied_contexts() -> None:
    attached = context_api.set_value("k", "main")
    token = context_api.attach(attached)
    try:
        seen: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: seen.update(thread=(current_context(), context_api.get_current())))
        thread.start()
        thread.join()
        assert seen["thread"][0] is seen["thread"][1]  # a fresh thread: the API's default context
        assert seen["thread"][0] is not attached

        copied = contextvars.copy_context().run(current_context)
        assert copied is attached

        async def in_task(value: str) -> tuple[Context, Context]:
            own = context_api.attach(context_api.set_value("k", value))
            await asyncio.sleep(0)
            try:
                return current_context(), context_api.get_current()
            finally:
                context_api.detach(own)

        async def both() -> list[tuple[Context, Context]]:
            return list(await asyncio.gather(in_task("a"), in_task("b")))

        for fast, api in asyncio.run(both()):
            assert fast is api
        assert {fast.get("k") for fast, _ in asyncio.run(both())} == {"a", "b"}
        assert current_context() is attached
    finally:
        context_api.detach(token)


class _DictRuntimeContext(_RuntimeContext):
    """A runtime context that keeps the current context in no context variable."""

    def __init__(self) -> None:
        self.current = Context()

    def attach(self, context: Context) -> object:
        previous, self.current = self.current, context
        return previous

    def get_current(self) -> Context:
        return self.current

    def detach(self, token: object) -> None:
        self.current = token  # type: ignore[assignment]


def test_the_default_runtime_context_is_read_through_its_context_variable() -> None:
    current_context()
    runtime, read = session_resolution._probed
    assert runtime is context_api._RUNTIME_CONTEXT
    assert read is not context_api.get_current and read() is context_api.get_current()


def test_a_runtime_context_outside_context_variables_keeps_the_apis_function(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context_api, "_RUNTIME_CONTEXT", _DictRuntimeContext())
    token = context_api.attach(context_api.set_value("k", "v"))
    try:
        assert current_context() is context_api.get_current() and current_context().get("k") == "v"
        assert session_resolution._probed[1] is context_api.get_current
    finally:
        context_api.detach(token)


def test_a_runtime_context_swapped_after_import_is_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Libraries replace the API's runtime context at their own start (Sentry's OpenTelemetry
    mode, vLLM): sessions, stamps and suppression must follow the new one."""
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    from otel_agentguard.config import instrumentation_suppressed

    current_context()  # probed on the runtime of import time
    monkeypatch.setattr(context_api, "_RUNTIME_CONTEXT", ContextVarsRuntimeContext())
    provider, exporter = _provider()
    try:
        tracer = provider.get_tracer("t")
        token = context_api.attach(with_session(SessionContext("after-swap")))
        try:
            assert current_context() is context_api.get_current()
            assert session_in_context() == "after-swap"
            with tracer.start_as_current_span("inside a session"):
                pass
        finally:
            context_api.detach(token)
        suppressed = context_api.attach(context_api.set_value(context_api._SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            assert instrumentation_suppressed()
        finally:
            context_api.detach(suppressed)
        assert _stamps(exporter) == {"inside a session": "after-swap"}
    finally:
        provider.shutdown()


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(AgentGuardSpanProcessor(tracer_provider=provider))
    return provider, exporter


def _stamps(exporter: InMemorySpanExporter) -> dict[str, Any]:
    return {span.name: (span.attributes or {}).get(A.SESSION_ID) for span in exporter.get_finished_spans()}


def test_ordinary_spans_join_the_session_of_their_context_and_only_then() -> None:
    provider, exporter = _provider()
    tracer = provider.get_tracer("t")
    try:
        _start_ordinary_spans(tracer)
    finally:
        provider.shutdown()
    assert _stamps(exporter) == {
        "root, empty context": None, "child of an unstamped span": None, "root with baggage": "from-baggage",
        "inside a session": "enclosing", "child of a stamped span": "enclosing",
    }


def _start_ordinary_spans(tracer: trace.Tracer) -> None:
    with tracer.start_as_current_span("root, empty context"):
        with tracer.start_as_current_span("child of an unstamped span"):
            pass
    with tracer.start_as_current_span("root with baggage", context=baggage.set_baggage("session.id", "from-baggage")):
        pass
    token = context_api.attach(with_session(SessionContext("enclosing")))
    try:
        with tracer.start_as_current_span("inside a session"):
            with tracer.start_as_current_span("child of a stamped span", context=trace.set_span_in_context(
                    trace.get_current_span(), Context())):  # the parent span only: its stamp decides
                pass
    finally:
        context_api.detach(token)


class _ForeignSpan(trace.NonRecordingSpan):
    """Another SDK's span: attributes under ``_attributes``, but no dict inside."""

    def __init__(self, attributes: dict[str, Any]) -> None:
        super().__init__(trace.INVALID_SPAN_CONTEXT)
        self._attributes = attributes
        self.attributes = attributes


@pytest.mark.parametrize(("parent", "expected"), [
    (trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT), None),  # a remote parent: no attributes at all
    (_ForeignSpan({A.SESSION_ID: "foreign"}), "foreign"),
    (_ForeignSpan({}), None),
])
def test_a_parent_that_is_no_sdk_span_is_read_through_the_public_api(parent: Any, expected: str | None) -> None:
    assert session_in_context(trace.set_span_in_context(parent, Context())) == expected
