"""The compiled span start stamps a span as the processor's Python start does, or leaves it to it.

``AgentGuardSpanProcessor.on_start`` asks the compiled start (``_span_start.c``, where the package
was built with a C compiler) first for a span whose attributes may make it a step or name a
session; it numbers and stamps a step of a live session, stamps a span inside one, and returns
False, having changed nothing, for anything else (the caller then runs ``_start_marked``, the
reference). Here the same generated span trees run through two providers, one with the compiled
start and one without: every span they export, and every verdict, must be equal. Every other
test of the package starts spans with the compiled start in place.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from compiled_modules import assert_frees_what_it_takes, skip_unless_built
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard import processor as processor_module
from otel_agentguard._context import SessionContext, with_session
from otel_agentguard.policy import parse_policy
from otel_agentguard.processor import VERDICT_SPAN_NAME, AgentGuardSpanProcessor

COMPILED = processor_module._compiled_start
POLICY = parse_policy("[profiles.default]\nrepeat_threshold = 3\nmax_steps = 12\n")


@pytest.fixture(autouse=True)
def compiled() -> None:
    skip_unless_built(COMPILED is not None, "otel_agentguard._span_start", "spans start in Python")


class CountingIds(IdGenerator):
    """The same ids, in the same order, in both runs: a trace's session (its trace id) is comparable."""

    def __init__(self) -> None:
        self.last = 0

    def generate_span_id(self) -> int:
        self.last += 1
        return self.last

    def generate_trace_id(self) -> int:
        self.last += 1
        return self.last << 64


@contextmanager
def start(compiled: bool) -> Iterator[None]:
    saved = processor_module._compiled_start
    processor_module._compiled_start = COMPILED if compiled else None
    try:
        yield
    finally:
        processor_module._compiled_start = saved


class Run:
    """One provider with the guard (observe mode) and an in-memory exporter."""

    def __init__(self, limits: SpanLimits | None = None, mode: str = "observe", processor_type: type = AgentGuardSpanProcessor):
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(id_generator=CountingIds(), span_limits=limits)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.processor = processor_type(POLICY, mode, tracer_provider=self.provider)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("span-start-test")

    def exported(self) -> list[tuple[Any, ...]]:
        """Each span's name, attributes and events, attributes in their order (which decides what a
        full span drops)."""
        return [(span.name, list((span.attributes or {}).items()),
                 [(event.name, dict(event.attributes or {})) for event in span.events])
                for span in self.exporter.get_finished_spans()]


# --- generated span trees ------------------------------------------------------------------------

ROOTS = ["ag_session", "nested_session", "foreign_agent", "baggage", "odd_baggage", "plain", "remote", "none"]
OPERATIONS = [A.OP_EXECUTE_TOOL, "chat", A.OP_INVOKE_AGENT, "create_agent", 3, None]
# How a span names its session: "ROOT" is its root's session id.
NAMINGS = [None, None, (A.GEN_AI_CONVERSATION_ID, "conv-1"), (A.GEN_AI_CONVERSATION_ID, "ROOT"), ("session.id", ""),
           (A.SESSION_ID, "ROOT"), (A.SESSION_ID, "other"), (A.SESSION_ID, 7), ("session.id", 0), (A.SEQUENCE, 4)]
SPANS = st.lists(st.fixed_dictionaries({
    "parent": st.integers(-2, 12),  # another span, when one is there; else (negative) a root
    "operation": st.sampled_from(OPERATIONS),
    "naming": st.sampled_from(NAMINGS),
    "nested": st.sampled_from([None, None, True, False, "yes"]),
    "tool": st.sampled_from(["lookup", "refund"]),
    "args": st.sampled_from(["a1", "a1", "b2"]),
    "via_current": st.booleans(),
    "ends_after": st.integers(0, 14),
    "error": st.booleans(),
}), min_size=1, max_size=14)
SCRIPTS = st.fixed_dictionaries({
    "roots": st.lists(st.sampled_from(ROOTS), min_size=1, max_size=3),
    "spans": SPANS,
    "verdict_at": st.one_of(st.none(), st.integers(0, 13)),
    "limited": st.sampled_from([None, None, None, 2, 9]),
    "end_roots_first": st.booleans(),
})


def _root(run: Run, kind: str, index: int) -> tuple[Context, Any, str]:
    """(context, span to end or None, the root's session id)."""
    session_id = f"{kind}-{index}"
    if kind == "ag_session":
        span = run.tracer.start_span("invoke_agent", context=Context(), start_time=1_000,
                                     attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.SESSION_ID: session_id})
        return with_session(SessionContext(session_id), trace.set_span_in_context(span, Context())), span, session_id
    if kind == "nested_session":  # a session of the user's inside another's agent span: the inner one wins
        span = run.tracer.start_span("invoke_agent", context=Context(), start_time=1_000,
                                     attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                 A.GEN_AI_CONVERSATION_ID: f"outer-{index}"})
        return with_session(SessionContext(session_id), trace.set_span_in_context(span, Context())), span, session_id
    if kind == "foreign_agent":
        span = run.tracer.start_span("invoke_agent", context=Context(), start_time=1_000,
                                     attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                 A.GEN_AI_CONVERSATION_ID: session_id})
        return trace.set_span_in_context(span, Context()), span, session_id
    if kind == "baggage":
        return baggage.set_baggage("session.id", session_id, Context()), None, session_id
    if kind == "odd_baggage":  # an empty session id, then another entry
        return baggage.set_baggage("session.id", "", baggage.set_baggage("other", "x", Context())), None, session_id
    if kind == "plain":
        span = run.tracer.start_span("GET /orders", context=Context(), start_time=1_000)
        return trace.set_span_in_context(span, Context()), span, session_id
    if kind == "remote":
        parent = SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=True, trace_flags=TraceFlags(1))
        return trace.set_span_in_context(NonRecordingSpan(parent), Context()), None, session_id
    return Context(), None, session_id


def _attributes(spec: dict[str, Any], root_session: str, verdict: bool) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if spec["operation"] is not None:
        attributes[A.GEN_AI_OPERATION_NAME] = spec["operation"]
    if spec["operation"] == A.OP_EXECUTE_TOOL:
        attributes[A.GEN_AI_TOOL_NAME] = spec["tool"]
        attributes[A.TOOL_ARGS_FINGERPRINT] = spec["args"]
    if spec["naming"] is not None:
        key, value = spec["naming"]
        attributes[key] = root_session if value == "ROOT" else value
    if spec["nested"] is not None:
        attributes[A.NESTED_STEP] = spec["nested"]
    if verdict:
        attributes[A.VERDICT] = True
    return attributes


def drive(script: dict[str, Any], compiled: bool) -> list[tuple[Any, ...]]:
    limits = SpanLimits(max_span_attributes=script["limited"]) if script["limited"] else None
    with start(compiled):
        run = Run(limits)
        roots = [_root(run, kind, index) for index, kind in enumerate(script["roots"])]
        spans: list[Any] = []
        contexts: list[Context] = []
        ends: list[tuple[int, int, int]] = []  # (after the start of, draw order, span)
        for index, spec in enumerate(script["spans"]):
            if 0 <= spec["parent"] < len(spans):
                parent_context, root_session = contexts[spec["parent"]], script["roots"][0]
            else:
                root = roots[(-spec["parent"] - 1) % len(roots)]
                parent_context, root_session = root[0], root[2]
            attributes = _attributes(spec, root_session, script["verdict_at"] == index)
            if spec["via_current"]:  # the SDK hands on_start no context: the current one is read
                token = context_api.attach(parent_context)
                try:
                    span = run.tracer.start_span("step", attributes=attributes, start_time=2_000 + index)
                finally:
                    context_api.detach(token)
            else:
                span = run.tracer.start_span("step", context=parent_context, attributes=attributes,
                                             start_time=2_000 + index)
            spans.append(span)
            contexts.append(trace.set_span_in_context(span, parent_context))
            ends.append((max(index, spec["ends_after"]), index, index))
        for _, _, index in sorted(ends):
            spec = script["spans"][index]
            if spec["operation"] == A.OP_EXECUTE_TOOL:
                spans[index].set_attribute(A.TOOL_RESULT_FINGERPRINT, "r-" + spec["args"])
            if spec["error"]:
                spans[index].set_status(trace.Status(trace.StatusCode.ERROR))
            spans[index].end(end_time=5_000 + index)
        for _, span, _ in roots:
            if span is not None:
                run.processor.end_session(span)
                span.end(end_time=9_000)
        run.provider.shutdown()
        return run.exported()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCRIPTS)
def test_generated_span_trees_export_the_same_spans_and_verdicts(script):
    assert drive(script, compiled=True) == drive(script, compiled=False)


# --- what the compiled start does itself, and what it leaves to Python ---------------------------


@contextmanager
def counting_python_starts() -> Iterator[list[str]]:
    """The span names _start_marked (the Python start) was called for, verdict spans aside."""
    names: list[str] = []
    original = AgentGuardSpanProcessor._start_marked

    def counted(self: AgentGuardSpanProcessor, span: Any, attrs: Any, parent_context: Any) -> None:
        if span.name != VERDICT_SPAN_NAME:
            names.append(span.name)
        original(self, span, attrs, parent_context)

    AgentGuardSpanProcessor._start_marked = counted  # type: ignore[method-assign]
    try:
        yield names
    finally:
        AgentGuardSpanProcessor._start_marked = original  # type: ignore[method-assign]


def _session(run: Run, session_id: str) -> tuple[Any, Context]:
    span = run.tracer.start_span("agent", attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                      A.GEN_AI_CONVERSATION_ID: session_id})
    return span, trace.set_span_in_context(span)


def _tool(run: Run, context: Context, name: str = "tool", **extra: Any) -> Any:
    return run.tracer.start_span(name, context=context, attributes={
        A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup", **extra})


def test_steps_of_a_live_session_are_started_in_c_and_numbered_in_order():
    run = Run()
    with counting_python_starts() as python:
        agent, context = _session(run, "s1")
        steps = [_tool(run, context, f"tool {n}") for n in range(4)]
        for step in steps:
            step.end()
        agent.end()
    assert python == ["agent"]  # the session span, which its session attaches
    assert [span.attributes[A.SEQUENCE] for span in steps] == [1, 2, 3, 4]
    assert {span.attributes[A.SESSION_ID] for span in steps} == {"s1"}
    assert list(steps[0].attributes)[-2:] == [A.SESSION_ID, A.SEQUENCE]  # written in the Python order


def test_a_step_counts_its_session_as_used():
    run = Run()
    first, first_context = _session(run, "first")
    second, _ = _session(run, "second")
    store = run.processor._sessions.store
    seen = store._seen["first"]
    assert list(store._entries) == ["first", "second"]
    _tool(run, first_context).end()
    assert list(store._entries) == ["second", "first"]  # the least recently used is evicted first
    assert store._seen["first"] > seen  # and the idle timeout counts from now
    first.end()
    second.end()
    run.provider.shutdown()


def test_a_step_inside_a_lone_call_keeps_its_trace_open_until_it_ends():
    """A session no id names ends with its trace's root step, unless a step of it still runs:
    the compiled start counts the steps it numbers as running."""
    run = Run()
    with counting_python_starts() as python:
        model = run.tracer.start_span("chat", context=Context(), attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        inside = trace.set_span_in_context(model, Context())
        early, late = _tool(run, inside, "early"), _tool(run, inside, "late")
        early.end()
        model.end()  # the trace's root: its session ends only once "late" has ended too
        late.end()
    run.processor.shutdown()  # its session ends (before the exporter's processor does)
    run.provider.shutdown()
    assert python == ["chat", "early"]  # "late" started in C, in the session "early" opened
    [verdict] = [span for span in run.exporter.get_finished_spans() if span.name == VERDICT_SPAN_NAME]
    assert verdict.attributes[A.STEPS] == 2  # both tool calls (a model call counts as no step)


def test_what_needs_python_is_left_to_it():
    run = Run()
    with counting_python_starts() as python:
        _tool(run, Context(), "lone call").end()  # no session anywhere: its trace stands in
        _tool(run, trace.set_span_in_context(run.tracer.start_span("plain")), "implicit").end()
        agent, context = _session(run, "s2")
        first = _tool(run, context, "outer")
        _tool(run, trace.set_span_in_context(first, context), "duplicate").end()  # a tool inside the same tool
        _tool(run, baggage.set_baggage("session.id", "fresh"), "new session").end()
        _tool(run, context, "odd id", **{A.GEN_AI_CONVERSATION_ID: 5}).end()
        first.end()
        agent.end()
    run.provider.shutdown()
    assert python == ["lone call", "implicit", "agent", "duplicate", "new session", "odd id"]


@pytest.mark.parametrize("how", ["enforce", "subclass"])
def test_an_enforcing_or_subclassed_processor_starts_spans_in_python(how):
    class Custom(AgentGuardSpanProcessor):
        pass

    run = Run(mode="enforce") if how == "enforce" else Run(processor_type=Custom)
    with counting_python_starts() as python:
        agent, context = _session(run, "s3")
        _tool(run, context, "step").end()
        agent.end()
    assert python == ["agent", "step"]


def test_a_span_with_attribute_limits_is_stamped_through_the_sdk():
    run = Run(SpanLimits(max_span_attributes=3))
    with counting_python_starts() as python:
        agent, context = _session(run, "s4")
        step = _tool(run, context, "step")  # 2 attributes of its own and 2 stamps: the oldest is dropped
        step.end()
        agent.end()
    assert python == ["agent"]
    assert dict(step.attributes) == {A.GEN_AI_TOOL_NAME: "lookup", A.SESSION_ID: "s4", A.SEQUENCE: 1}
    assert step.dropped_attributes == 1


class FailingClock:
    def __call__(self) -> float:
        raise OSError("no clock")


def test_a_failure_midway_is_reported_and_leaves_no_lock_held():
    run = Run()
    agent, context = _session(run, "s5")
    store = run.processor._sessions.store
    clock, store._clock = store._clock, FailingClock()
    before = _internal_errors.counts().get("processor.on_start", 0)
    step = _tool(run, context, "step")  # the guard reports, the span starts all the same
    assert _internal_errors.counts()["processor.on_start"] == before + 1
    assert not store._lock.locked()
    assert A.SEQUENCE not in step.attributes
    step.end()
    store._clock = clock
    after = _tool(run, context, "after")
    assert after.attributes[A.SEQUENCE] == 1
    after.end()
    agent.end()


def test_threads_number_one_session_without_losing_a_number():
    run = Run()
    agent, context = _session(run, "s6")
    started: list[Any] = []

    def work() -> None:
        for _ in range(200):
            span = _tool(run, context)
            started.append(span)
            span.end()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    agent.end()
    assert sorted(span.attributes[A.SEQUENCE] for span in started) == list(range(1, 801))


def test_the_compiled_start_frees_what_it_takes():
    provider = TracerProvider()
    processor = AgentGuardSpanProcessor(POLICY, tracer_provider=provider)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("leak")
    agent = tracer.start_span("agent", attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                   A.GEN_AI_CONVERSATION_ID: "s7"})
    context = trace.set_span_in_context(agent)
    remote = trace.set_span_in_context(NonRecordingSpan(SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(1))))
    # One span each, started again and again (its stamps taken off): a session's steps are its memory.
    spans = [(_tool_span(tracer, context), context), (_tool_span(tracer, remote), remote),
             (_tool_span(tracer, context, **{A.NESTED_STEP: True}), context),
             (_tool_span(tracer, context, **{A.GEN_AI_CONVERSATION_ID: 1}), context)]
    store = processor._sessions.store

    def calls() -> None:
        for round in range(200):
            for span, parent in spans:
                attributes = span._attributes._dict
                attributes.pop(A.SESSION_ID, None)
                attributes.pop(A.SEQUENCE, None)
                COMPILED(processor, span, attributes, parent)
            if round % 50 == 0:  # the error path too
                clock, store._clock = store._clock, FailingClock()
                with pytest.raises(OSError):
                    COMPILED(processor, spans[0][0], spans[0][0]._attributes._dict, context)
                store._clock = clock

    assert_frees_what_it_takes(calls)
    provider.shutdown()


def _tool_span(tracer: Any, context: Context, **extra: Any) -> Any:
    return tracer.start_span("tool", context=context, attributes={
        A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup", **extra})


def test_configure_refuses_what_it_cannot_read_and_runs_once():
    from otel_agentguard import _span_start

    arguments = list(processor_module.compiled_start_configuration())
    with pytest.raises(RuntimeError, match="configured once"):
        _span_start.configure(*arguments)
    for at, wrong in ((0, "not a class"), (3, dict), (9, ("too", "few")), (12, []), (14, None), (18, 1)):
        changed = [*arguments]
        changed[at] = wrong
        with pytest.raises(TypeError, match="configure"):
            _span_start.configure(*changed)
    with pytest.raises(TypeError, match="19 arguments"):
        _span_start.configure(*arguments[:-1])
    with pytest.raises(TypeError, match="4 arguments"):
        _span_start.start_marked(None)
