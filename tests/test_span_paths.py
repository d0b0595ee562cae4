"""The compiled span paths start and end a span as the processor's Python methods do, or leave it to them.

``AgentGuardSpanProcessor.on_start`` asks the compiled start (``_span_paths.c``, where the package
was built with a C compiler) first for a span whose attributes may make it a step or name a
session: it numbers and stamps a step of a live session, stamps a span inside one, and returns
False, having changed nothing, for anything else (the caller then runs ``_start_marked``, the
reference). ``on_end`` asks the compiled end first for a span of a session: it reads a step of a
live session, releases it in order and judges it (a usual tool step in C, any other through
``LiveSessions``), and returns False, having changed nothing, for anything else (the caller then
runs ``_session_span_ended``). Here the same generated span trees run through two providers, one
with the compiled paths and one without: every span they export, and every verdict, must be
equal. Every other test of the package runs with the compiled paths in place.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Any

import pytest
from compiled_modules import assert_frees_what_it_takes, python_code_run, skip_unless_built
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import baggage, trace
from opentelemetry import context as context_api
from opentelemetry.context import Context
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, Status, TraceFlags

from otel_agentguard import _internal_errors, span_stamp
from otel_agentguard import attributes as A
from otel_agentguard import processor as processor_module
from otel_agentguard._context import SessionContext, with_session
from otel_agentguard._store import SessionStore
from otel_agentguard.live_session import LiveSession
from otel_agentguard.live_sessions import LiveSessions
from otel_agentguard.policy import parse_policy
from otel_agentguard.processor import VERDICT_SPAN_NAME, AgentGuardSpanProcessor

COMPILED = processor_module._compiled_start
COMPILED_END = processor_module._compiled_end
POLICY = parse_policy("[profiles.default]\nrepeat_threshold = 3\nmax_steps = 12\n")
# Generated trees also run out of failures in a row and of wall time (their spans take seconds).
GENERATED_POLICY = parse_policy("[profiles.default]\nrepeat_threshold = 3\nmax_steps = 12\nerror_streak = 2\n"
                                "max_wall_time_s = 9\n")
SECOND = 1_000_000_000


@pytest.fixture(autouse=True)
def compiled() -> None:
    skip_unless_built(COMPILED is not None, "otel_agentguard._span_paths", "spans start and end in Python")


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
def paths(compiled: bool) -> Iterator[None]:
    """The compiled paths (and the stamps they write) in place, or the Python methods alone."""
    saved = (processor_module._compiled_start, processor_module._compiled_end, span_stamp._compiled_stamp,
             span_stamp._compiled_stamp_starting)
    if not compiled:
        processor_module._compiled_start = processor_module._compiled_end = None
        span_stamp._compiled_stamp = span_stamp._compiled_stamp_starting = None
    try:
        yield
    finally:
        (processor_module._compiled_start, processor_module._compiled_end, span_stamp._compiled_stamp,
         span_stamp._compiled_stamp_starting) = saved


class Run:
    """One provider with the guard (observe mode) and an in-memory exporter."""

    def __init__(self, limits: SpanLimits | None = None, mode: str = "observe",
                 processor_type: type = AgentGuardSpanProcessor, policy: Any = POLICY,
                 ids: IdGenerator | None = None):
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(id_generator=ids or CountingIds(), span_limits=limits)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.processor = processor_type(policy, mode, tracer_provider=self.provider)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("span-start-test")

    def exported(self) -> list[tuple[Any, ...]]:
        """Each span's name, parent, attributes and events, attributes in their order (which decides
        what a full span drops)."""
        return [(span.name, span.parent.span_id if span.parent else None, list((span.attributes or {}).items()),
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
    "finish": st.sampled_from([None, "stop", "tool_calls"]),  # a model step's; "stop" ends a session
    "response": st.sampled_from([None, "r1", "r2"]),  # a repeated one is the same model call seen twice
    "result": st.sampled_from(["r-a1", "r-b2", ""]),
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
        span = run.tracer.start_span("invoke_agent", context=Context(), start_time=SECOND,
                                     attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.SESSION_ID: session_id})
        return with_session(SessionContext(session_id), trace.set_span_in_context(span, Context())), span, session_id
    if kind == "nested_session":  # a session of the user's inside another's agent span: the inner one wins
        span = run.tracer.start_span("invoke_agent", context=Context(), start_time=SECOND,
                                     attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                 A.GEN_AI_CONVERSATION_ID: f"outer-{index}"})
        return with_session(SessionContext(session_id), trace.set_span_in_context(span, Context())), span, session_id
    if kind == "foreign_agent":
        span = run.tracer.start_span("invoke_agent", context=Context(), start_time=SECOND,
                                     attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                 A.GEN_AI_CONVERSATION_ID: session_id})
        return trace.set_span_in_context(span, Context()), span, session_id
    if kind == "baggage":
        return baggage.set_baggage("session.id", session_id, Context()), None, session_id
    if kind == "odd_baggage":  # an empty session id, then another entry
        return baggage.set_baggage("session.id", "", baggage.set_baggage("other", "x", Context())), None, session_id
    if kind == "plain":
        span = run.tracer.start_span("GET /orders", context=Context(), start_time=SECOND)
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
    with paths(compiled):
        run = Run(limits, policy=GENERATED_POLICY)
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
                    span = run.tracer.start_span("step", attributes=attributes, start_time=(2 + index) * SECOND)
                finally:
                    context_api.detach(token)
            else:
                span = run.tracer.start_span("step", context=parent_context, attributes=attributes,
                                             start_time=(2 + index) * SECOND)
            spans.append(span)
            contexts.append(trace.set_span_in_context(span, parent_context))
            ends.append((max(index, spec["ends_after"]), index, index))
        for _, _, index in sorted(ends):
            spec = script["spans"][index]
            if spec["operation"] == A.OP_EXECUTE_TOOL:
                spans[index].set_attribute(A.TOOL_RESULT_FINGERPRINT, spec["result"])
                spans[index].set_attribute(A.TOOL_RESULT_EMPTY, not spec["result"])
            if spec["operation"] == "chat":
                if spec["finish"] is not None:
                    spans[index].set_attributes({A.GEN_AI_RESPONSE_FINISH_REASONS: (spec["finish"],),
                                                 A.RESPONSE_TOOL_CALLS: int(spec["finish"] == "tool_calls"),
                                                 A.GEN_AI_USAGE_INPUT_TOKENS: 100 + index})
                if spec["response"] is not None:
                    spans[index].set_attribute(A.GEN_AI_RESPONSE_ID, spec["response"])
            if spec["error"]:
                spans[index].set_status(trace.Status(trace.StatusCode.ERROR))
            spans[index].end(end_time=(3 + index + spec["ends_after"]) * SECOND)
        for _, span, _ in roots:
            if span is not None:
                run.processor.end_session(span)
                span.end(end_time=40 * SECOND)
        run.provider.shutdown()
        return run.exported()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SCRIPTS)
def test_generated_span_trees_export_the_same_spans_and_verdicts(script):
    assert drive(script, compiled=True) == drive(script, compiled=False)


# --- what the compiled start does itself, and what it leaves to Python ---------------------------


@contextmanager
def left_to_python(path: str) -> Iterator[list[str]]:
    """The names of the spans the compiled ``path`` (``"_compiled_start"`` or ``"_compiled_end"``)
    left to the Python method, verdict spans aside."""
    names: list[str] = []
    compiled = getattr(processor_module, path)

    def counted(processor: Any, span: Any, attrs: Any, last: Any) -> bool:
        done = compiled(processor, span, attrs, last)
        if not done and span.name != VERDICT_SPAN_NAME:
            names.append(span.name)
        return done

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(processor_module, path, counted)
    try:
        yield names
    finally:
        monkeypatch.undo()


def _session(run: Run, session_id: str) -> tuple[Any, Context]:
    span = run.tracer.start_span("agent", attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                      A.GEN_AI_CONVERSATION_ID: session_id})
    return span, trace.set_span_in_context(span)


def _tool(run: Run, context: Context, name: str = "tool", **extra: Any) -> Any:
    return _tool_span(run.tracer, context, name, **extra)


def _tool_span(tracer: Any, context: Context, name: str = "tool", **extra: Any) -> Any:
    return tracer.start_span(name, context=context, attributes={
        A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup", **extra})


def test_steps_of_a_live_session_are_started_in_c_and_numbered_in_order():
    run = Run()
    with left_to_python("_compiled_start") as python:
        agent, context = _session(run, "s1")
        steps = [_tool(run, context, f"tool {n}") for n in range(4)]
        for step in steps:
            step.end()
        agent.end()
    assert python == []  # the session span too: its session opened, the span attached to it
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
    with left_to_python("_compiled_start") as python:
        model = run.tracer.start_span("chat", context=Context(), attributes={A.GEN_AI_OPERATION_NAME: "chat"})
        inside = trace.set_span_in_context(model, Context())
        early, late = _tool(run, inside, "early"), _tool(run, inside, "late")
        early.end()
        model.end()  # the trace's root: its session ends only once "late" has ended too
        late.end()
    run.processor.shutdown()  # its session ends (before the exporter's processor does)
    run.provider.shutdown()
    # The lone call started in C; "early" claimed its session (Python); "late" started in C, in it.
    assert python == ["early"]
    [verdict] = [span for span in run.exporter.get_finished_spans() if span.name == VERDICT_SPAN_NAME]
    assert verdict.attributes[A.STEPS] == 2  # both tool calls (a model call counts as no step)


class OneTrace(CountingIds):
    """Every trace the same id: a second lone call of it finds the first still running."""

    def generate_trace_id(self) -> int:
        return 7 << 64


def _lone_calls_of_one_trace() -> list[tuple[Any, ...]]:
    run = Run(ids=OneTrace())
    first = _tool(run, Context(), "first")  # judged alone at its end
    second = _tool(run, Context(), "second")  # its trace is a lone call already: it opens a session
    first.end()
    _tool(run, Context(), "third").end()
    second.end()
    run.processor.shutdown()
    run.provider.shutdown()
    return run.exported()


def test_a_lone_call_starts_in_c_and_one_its_session_declines_opens_a_session_as_in_python():
    with left_to_python("_compiled_start") as python:
        exported = _lone_calls_of_one_trace()
    assert python == []
    with paths(compiled=False):
        assert exported == _lone_calls_of_one_trace()
    numbers = {name: dict(attributes).get(A.SEQUENCE) for name, _, attributes, _ in exported}
    # The second joined the session the first lone call would have opened, its step 1 running.
    assert (numbers["first"], numbers["second"], numbers["third"]) == (1, 2, 3)


def _lone_call_ends(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[Any, ...]], dict[str, int]]:
    """Lone calls of every kind ending, in a provider of their own: what it exported, and the
    internal errors counted meanwhile."""
    from otel_agentguard.policy import Policy

    real = Policy.fingerprinter

    def failing(self: Policy, tool: str) -> Any:
        if tool == "broken":
            raise ValueError("no fingerprinter")
        return real(self, tool)

    monkeypatch.setattr(Policy, "fingerprinter", failing)
    before = dict(_internal_errors.counts())
    run = Run()
    _tool(run, Context(), "lone tool").end()  # judged alone: a tool step makes a verdict span
    run.tracer.start_span("lone answer", context=Context(), attributes={
        A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",)}).end()
    run.tracer.start_span("lone request", context=Context(), attributes={  # names a call: its session derives it
        A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_OUTPUT_MESSAGES: json.dumps([{"role": "assistant", "parts": [
            {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"q": 1}}]}])}).end()
    _tool(run, Context(), "marked", **{A.NESTED_STEP: False}).end()  # a mark, even a False one: Python reads it
    _tool(run, Context(), "broken", **{A.GEN_AI_TOOL_NAME: "broken",  # its reader fails: Python keeps its session
                                       A.GEN_AI_TOOL_CALL_ARGUMENTS: '{"order": "A1"}'}).end()
    model = run.tracer.start_span("claimed", context=Context(), attributes={A.GEN_AI_OPERATION_NAME: "chat"})
    _tool(run, trace.set_span_in_context(model, Context()), "inside").end()  # claims the lone call's session
    model.end()  # judged in that session, as a step of it
    run.processor.shutdown()
    run.provider.shutdown()
    monkeypatch.undo()
    after = _internal_errors.counts()
    return run.exported(), {kind: after[kind] - before.get(kind, 0) for kind in after if after[kind] != before.get(kind, 0)}


def test_a_lone_calls_usual_end_is_judged_in_c_as_in_python(monkeypatch):
    with left_to_python("_compiled_end") as python:
        exported, errors = _lone_call_ends(monkeypatch)
    assert python == ["lone request", "marked", "broken", "claimed"]  # (the claimed session is stored)
    with paths(compiled=False):
        assert (exported, errors) == _lone_call_ends(monkeypatch)
    assert errors == {"processor.step": 1}  # the broken one, reported once, by Python
    # A verdict span where a tool step ran ("lone tool", "marked", "claimed" with "inside"); the
    # model calls' verdicts go to the metrics alone, and the broken call lost its only step.
    verdicts = [dict(attributes) for name, _, attributes, _ in exported if name == VERDICT_SPAN_NAME]
    assert [(verdict[A.STOP_REASON], verdict[A.STEPS]) for verdict in verdicts] == [("abandoned", 1)] * 3


def test_what_needs_python_is_left_to_it():
    run = Run()
    with left_to_python("_compiled_start") as python:
        _tool(run, Context(), "lone call").end()  # no session anywhere: its trace stands in (started in C)
        _tool(run, trace.set_span_in_context(run.tracer.start_span("plain")), "implicit").end()  # not the root
        agent, context = _session(run, "s2")  # a session span: its session opened and attached in C
        run.tracer.start_span("marked agent", context=context, attributes={  # a duplicate's mark: Python
            A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.GEN_AI_CONVERSATION_ID: "s2", A.NESTED_STEP: True}).end()
        first = _tool(run, context, "outer")
        _tool(run, trace.set_span_in_context(first, context), "duplicate").end()  # a tool inside the same tool
        _tool(run, baggage.set_baggage("session.id", "fresh"), "new session").end()
        _tool(run, context, "odd id", **{A.GEN_AI_CONVERSATION_ID: 5}).end()
        first.end()
        agent.end()
    run.provider.shutdown()
    assert python == ["implicit", "marked agent", "duplicate", "new session", "odd id"]
    assert run.processor._sessions.peek("s2") is None  # ended with its span, which it was attached to


@pytest.mark.parametrize("how", ["enforce", "subclass"])
def test_an_enforcing_or_subclassed_processor_starts_spans_in_python(how):
    class Custom(AgentGuardSpanProcessor):
        pass

    run = Run(mode="enforce") if how == "enforce" else Run(processor_type=Custom)
    with left_to_python("_compiled_start") as python:
        agent, context = _session(run, "s3")
        _tool(run, context, "step").end()
        agent.end()
    assert python == ["agent", "step"]


def test_a_span_with_attribute_limits_is_stamped_through_the_sdk():
    run = Run(SpanLimits(max_span_attributes=3))
    with left_to_python("_compiled_start") as python:
        agent, context = _session(run, "s4")
        step = _tool(run, context, "step")  # 2 attributes of its own and 2 stamps: the oldest is dropped
        step.end()
        agent.end()
    assert python == []
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
             (_tool_span(tracer, context, **{A.GEN_AI_CONVERSATION_ID: 1}), context),
             (_tool_span(tracer, Context()), Context())]  # a lone call
    store = processor._sessions.store

    def calls() -> None:
        for round in range(200):
            for span, parent in spans:
                attributes = span._attributes._dict
                attributes.pop(A.SESSION_ID, None)
                attributes.pop(A.SEQUENCE, None)
                COMPILED(processor, span, attributes, parent)
            processor._sessions.lone.clear()  # the lone call's entry: its end would take it
            if round % 50 == 0:  # the error path too
                clock, store._clock = store._clock, FailingClock()
                with pytest.raises(OSError):
                    COMPILED(processor, spans[0][0], spans[0][0]._attributes._dict, context)
                store._clock = clock

    assert_frees_what_it_takes(calls)
    provider.shutdown()


def _model(run: Run, context: Context, finish: str) -> Any:
    span = run.tracer.start_span("chat", context=context, attributes={A.GEN_AI_OPERATION_NAME: "chat"})
    span.set_attributes({A.GEN_AI_RESPONSE_FINISH_REASONS: (finish,), A.RESPONSE_TOOL_CALLS: int(finish != "stop")})
    return span


def verdict_of(run: Run, session_id: str) -> dict[str, Any]:
    """The attributes of a session's verdict (on a verdict span: its session span was another's)."""
    [span] = [span for span in run.exporter.get_finished_spans()
              if span.name == VERDICT_SPAN_NAME and span.attributes[A.SESSION_ID] == session_id]
    return dict(span.attributes)


def test_steps_of_a_live_session_end_in_c_and_are_judged():
    run = Run()
    with left_to_python("_compiled_end") as python:
        agent, context = _session(run, "e1")
        for _ in range(3):
            _model(run, context, "tool_calls").end()
            tool = _tool(run, context, **{A.TOOL_ARGS_FINGERPRINT: "same"})
            tool.set_attribute(A.TOOL_RESULT_FINGERPRINT, "same")
            tool.end()
        _model(run, context, "stop").end()  # the final answer: a session without a span of its own would end
        agent.end()
    run.provider.shutdown()
    assert python == ["agent"]  # the session's own span, whose end ends the session
    verdict = verdict_of(run, "e1")
    assert (verdict[A.STOP_REASON], verdict[A.STEPS]) == ("tool_loop", 4)
    assert [event.name for event in agent.events] == [A.STALL_EVENT]  # written while the agent's span was open


def test_a_step_its_reader_cannot_read_is_lost_and_reported_not_its_session(monkeypatch):
    from otel_agentguard.policy import Policy

    real = Policy.fingerprinter

    def failing(self: Policy, tool: str) -> Any:
        if tool == "broken":
            raise ValueError("no fingerprinter")
        return real(self, tool)

    monkeypatch.setattr(Policy, "fingerprinter", failing)  # called by the compiled reader for raw arguments
    run = Run()
    agent, context = _session(run, "e2")
    before = _internal_errors.counts().get("processor.step", 0)
    with left_to_python("_compiled_end") as python:
        broken = run.tracer.start_span("tool", context=context, attributes={
            A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "broken",
            A.GEN_AI_TOOL_CALL_ARGUMENTS: '{"order": "A1"}'})
        broken.end()
        for _ in range(3):  # its place is filled: the steps after it are judged
            _tool(run, context, **{A.TOOL_ARGS_FINGERPRINT: "same"}).end()
    assert python == []
    assert _internal_errors.counts()["processor.step"] == before + 1
    agent.end()
    run.provider.shutdown()
    assert verdict_of(run, "e2")[A.STOP_REASON] == "tool_loop"


def test_a_replaced_function_the_paths_stand_for_sends_spans_to_python(monkeypatch):
    """A fault injected into the Python code, or a patch of the user's, is met: the compiled paths
    step aside while any function they stand for or call round is not the one they were built on."""
    run = Run()
    agent, context = _session(run, "e13")
    step = _tool(run, context, "before")
    attrs = step._attributes._dict
    monkeypatch.setattr(processor_module, "stamp_starting", processor_module.stamp_starting)  # the same, rebound
    assert COMPILED(run.processor, _tool_span(run.tracer, context), {A.GEN_AI_OPERATION_NAME: "chat"}, context) is True
    for module, name in ((processor_module, "stamp_starting"), (processor_module, "enclosing_step")):
        monkeypatch.setattr(module, name, lambda *args: None)
        assert COMPILED(run.processor, _tool_span(run.tracer, context), {A.GEN_AI_OPERATION_NAME: "chat"}, context) \
            is False
        monkeypatch.undo()
    monkeypatch.setattr(processor_module, "step_from_attributes", lambda *args, **kwargs: None)
    assert COMPILED_END(run.processor, step._readable_span(), attrs, "e13") is False
    monkeypatch.undo()
    monkeypatch.setattr(AgentGuardSpanProcessor, "_step", lambda *args: None)
    assert COMPILED_END(run.processor, step._readable_span(), attrs, "e13") is False
    monkeypatch.undo()
    # A lone call's end stands for these too.
    lone = _tool(run, Context(), "lone")
    lone_attrs, lone_id = lone._attributes._dict, lone._attributes._dict[A.SESSION_ID]
    for owner, name in ((AgentGuardSpanProcessor, "_lone_call_ended"), (processor_module, "step_kind"),
                        (LiveSessions, "asks_for_no_calls")):
        monkeypatch.setattr(owner, name, vars(owner)[name])  # the same, but another object: rebound
        monkeypatch.setattr(owner, name, lambda *args, **kwargs: None)
        assert COMPILED_END(run.processor, lone._readable_span(), lone_attrs, lone_id) is False, name
        monkeypatch.undo()
    assert COMPILED_END(run.processor, lone._readable_span(), lone_attrs, lone_id) is True  # judged alone
    assert lone_id not in run.processor._sessions.lone
    # The SDK's properties the end reads at their fields instead: the context's span_id, the status's code.
    for owner, name in ((SpanContext, "span_id"), (Status, "status_code")):
        monkeypatch.setattr(owner, name, property(vars(owner)[name].fget))  # reads the same, as Python
        assert COMPILED_END(run.processor, step._readable_span(), attrs, "e13") is False, name
        monkeypatch.undo()
    step.end()
    agent.end()
    run.provider.shutdown()


def _compiled_start_of_a_tool_span(run: Run, context: Context) -> bool:
    """Whether the compiled start does a new tool span's start (False: Python does)."""
    span = _tool_span(run.tracer, context)
    try:
        return COMPILED(run.processor, span, {A.GEN_AI_OPERATION_NAME: "chat"}, context)  # type: ignore[no-any-return]
    finally:
        span.end()


def test_pins_found_unchanged_are_checked_again_after_any_change_to_their_namespaces(monkeypatch):
    """The pins found unchanged are remembered with their namespaces' dict versions: a replacement
    made afterwards, in a module or on a class, and its undoing are each seen at the next span."""
    run = Run()
    agent, context = _session(run, "e14")
    starts = partial(_compiled_start_of_a_tool_span, run, context)

    assert starts() is True and starts() is True  # checked, then remembered
    monkeypatch.setattr(processor_module, "_not_pinned", 1, raising=False)  # another name in a pinned module
    assert starts() is True
    for namespace, name in ((processor_module, "enclosing_step"), (LiveSessions, "open"), (SessionStore, "get"),
                            (LiveSession, "start_step"), (LiveSession, "attach_span"), (SpanContext, "span_id")):
        monkeypatch.setattr(namespace, name, lambda *args: None)
        assert starts() is False, name
        monkeypatch.undo()
        assert starts() is True, name
    agent.end()
    run.provider.shutdown()


def test_a_field_replaced_on_its_class_sends_spans_to_python(monkeypatch):
    """The processor's, its live sessions' and their store's fields are slots loaded at their
    offsets, which stands for getattr only while the class holds the slot: a property or a value
    set on the class in its place is what Python reads, so the compiled paths step aside."""
    run = Run()
    agent, context = _session(run, "e15")
    starts = partial(_compiled_start_of_a_tool_span, run, context)

    assert starts() is True
    for owner, name in ((AgentGuardSpanProcessor, "_enforcement"), (AgentGuardSpanProcessor, "_sessions"),
                        (LiveSessions, "store"), (SessionStore, "_entries")):
        slot = vars(owner)[name]
        monkeypatch.setattr(owner, name, property(slot.__get__, slot.__set__))  # reads the same slot, as Python
        assert starts() is False, name
        monkeypatch.undo()
        assert starts() is True, name
    agent.end()
    run.provider.shutdown()


def _calls_named_by_a_model(compiled: bool) -> list[tuple[Any, ...]]:
    with paths(compiled):
        run = Run()
        agent, context = _session(run, "e3")
        _tool(run, context).end()
        _model(run, context, "tool_calls").end()
        naming = _model(run, context, "tool_calls")  # its reply recorded: the calls it asks for are read from it
        naming.set_attribute(A.GEN_AI_OUTPUT_MESSAGES, json.dumps([{"role": "assistant", "parts": [
            {"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": {"order": "A1"}},
            {"type": "tool_call", "id": "call_2", "name": "refund", "arguments": {"order": "A1"}}]}]))
        naming.end()
        assert run.processor._sessions.get("e3").derived is not None  # derived calls wait for tool spans
        answering = _tool(run, context, "answering")
        answering.set_attribute(A.GEN_AI_TOOL_CALL_ID, "call_1")
        answering.end()
        agent.end()  # call_2, never answered by a span, is judged as a step of its own
        run.provider.shutdown()
        return run.exported()


def test_calls_a_model_span_names_are_derived_as_in_python():
    assert _calls_named_by_a_model(compiled=True) == _calls_named_by_a_model(compiled=False)


def test_a_span_of_an_earlier_run_of_the_session_id_changes_nothing():
    run = Run()
    first_run, context = _session(run, "again")
    straggler = _tool(run, context, "straggler")  # numbered 1 in the first run
    first_run.end()  # the first run ends with its span; the id's numbers go on
    second_run, context = _session(run, "again")
    _tool(run, context).end()  # the second run's first step: number 2
    session = run.processor._sessions.get("again")
    assert session.judge.totals.steps == 1
    straggler.end()
    assert session.judge.totals.steps == 1
    second_run.end()
    run.provider.shutdown()


def test_a_trace_whose_root_step_ends_last_ends_its_session_then():
    run = Run()
    model = run.tracer.start_span("chat", context=Context(), attributes={A.GEN_AI_OPERATION_NAME: "chat"})
    inside = trace.set_span_in_context(model, Context())
    first, second = _tool(run, inside, "first"), _tool(run, inside, "second")
    first.end()
    second.end()  # the steps inside end in C: the trace's session no longer counts them as running
    model.end()
    after = run.tracer.start_span("unrelated")
    after.end()
    run.provider.shutdown()
    assert [span.name for span in run.exporter.get_finished_spans()][-2:] == [VERDICT_SPAN_NAME, "unrelated"]


def test_an_ended_session_judges_no_more_steps():
    run = Run()
    agent, context = _session(run, "e6")
    session = run.processor._sessions.get("e6")
    session.ended = True  # as if another thread ended it between the lookup and the lock
    _tool(run, context).end()
    assert session.judge.totals.steps == 0
    session.ended = False
    agent.end()
    run.provider.shutdown()


def test_a_numbered_span_that_is_no_step_at_its_end_fills_its_place():
    run = Run()
    agent, context = _session(run, "e7")
    changed = _tool(run, context, "changed")  # numbered 1 as a tool call
    later = [_tool(run, context, **{A.TOOL_ARGS_FINGERPRINT: "same"}) for _ in range(3)]
    for span in later:
        span.end()
    changed.set_attribute(A.GEN_AI_OPERATION_NAME, "create_agent")  # no step after all
    changed.end()
    assert run.processor._sessions.get("e7").judge.totals.steps == 3  # released, not held back behind it
    agent.end()
    run.provider.shutdown()


def test_failed_tool_calls_in_a_row_raise_error_streak():
    run = Run(policy=GENERATED_POLICY)
    agent, context = _session(run, "e8")
    for n in range(2):
        span = _tool(run, context, **{A.TOOL_ARGS_FINGERPRINT: f"a{n}"})
        span.set_status(trace.Status(trace.StatusCode.ERROR))
        span.end()
    agent.end()
    run.provider.shutdown()
    assert verdict_of(run, "e8")[A.STOP_REASON] == "error_streak"


def test_a_step_past_the_wall_time_budget_raises_budget():
    run = Run(policy=GENERATED_POLICY)
    agent, context = _session(run, "e9")
    span = run.tracer.start_span("tool", context=context, start_time=SECOND, attributes={
        A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup"})
    span.end(end_time=agent.start_time + 20 * SECOND)
    assert run.processor._sessions.get("e9").judge.alerts[0].probe == "budget_exceeded"
    agent.end()
    run.provider.shutdown()


def test_the_verdict_span_of_a_session_without_a_span_is_parented_on_its_last_step():
    run = Run()
    context = baggage.set_baggage("session.id", "parented")
    _model(run, context, "tool_calls").end()
    last = _tool(run, context, "last")
    last.end()
    run.processor.shutdown()  # the session ends unfinished, its verdict on a span of its own
    run.provider.shutdown()
    [verdict] = [span for span in run.exporter.get_finished_spans() if span.name == VERDICT_SPAN_NAME]
    assert verdict.parent.span_id == last.get_span_context().span_id


def test_a_final_answer_released_by_the_tool_step_before_it_ends_the_session():
    run = Run()
    context = baggage.set_baggage("session.id", "final")
    tool = _tool(run, context)  # number 1
    _model(run, context, "stop").end()  # number 2, the final answer: held back until 1 ends
    assert run.processor._sessions.get("final") is not None
    tool.end()  # releases both: the final answer ends the session (it has no span of its own)
    assert run.processor._sessions.get("final") is None
    run.provider.shutdown()


def test_a_root_step_of_a_session_no_id_names_ends_it_with_its_trace(monkeypatch):
    from otel_agentguard import live_sessions

    run = Run()
    # Lone calls at their limit: a step started outside any span opens a session like any other.
    monkeypatch.setattr(live_sessions, "_MAX_LONE_CALLS", 1)
    run.processor._sessions.lone["held"] = (time.time_ns(), None, None)
    root = _tool(run, Context(), "root")
    session_id = root.attributes[A.SESSION_ID]
    assert run.processor._sessions.get(session_id) is not None
    root.end()
    assert run.processor._sessions.get(session_id) is None
    run.processor._sessions.lone.clear()
    run.provider.shutdown()


def test_a_duplicate_with_a_number_of_its_own_fills_its_place_and_is_no_step():
    run = Run()
    agent, context = _session(run, "e10")
    duplicate = _tool(run, context, **{A.NESTED_STEP: True, A.SEQUENCE: 1})  # marked by its instrumentation
    duplicate.end()
    assert run.processor._sessions.get("e10").judge.totals.steps == 0
    agent.end()
    run.provider.shutdown()


def test_a_model_call_reported_twice_is_one_step():
    run = Run()
    agent, context = _session(run, "e11")
    for response in ("r1", "r1", "r2"):  # the second span of r1 (another instrumentation's) is no step
        span = _model(run, context, "tool_calls")
        span.set_attributes({A.GEN_AI_RESPONSE_ID: response, A.GEN_AI_USAGE_INPUT_TOKENS: 100})
        span.end()
    assert run.processor._sessions.get("e11").judge.totals.tokens == 200
    agent.end()
    run.provider.shutdown()


class FailingJudge:
    """Stands in for a session's judge: every step it is handed fails."""

    def __init__(self, judge: Any) -> None:
        self.judge = judge

    def observe(self, step: Any) -> list[Any]:
        raise RuntimeError("judge down")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.judge, name)


def test_a_failure_while_the_session_is_locked_is_reported_and_releases_the_lock():
    run = Run()
    agent, context = _session(run, "e4")
    session = run.processor._sessions.get("e4")
    session.judge = FailingJudge(session.judge)
    before = _internal_errors.counts().get("processor.on_end", 0)
    _tool(run, context).end()
    assert _internal_errors.counts()["processor.on_end"] == before + 1
    assert not session.lock.locked()
    session.judge = session.judge.judge
    _tool(run, context).end()  # judged as usual
    assert session.judge.totals.steps == 1
    agent.end()
    run.provider.shutdown()


def _processor_in_a_session(session_id: str) -> tuple[Any, AgentGuardSpanProcessor, Any, Context]:
    """A provider, a guard called directly (not added to the provider), a tracer and the context of
    a session's agent span, for the leak tests."""
    provider = TracerProvider()
    processor = AgentGuardSpanProcessor(POLICY, tracer_provider=provider)
    tracer = provider.get_tracer("leak")
    agent = tracer.start_span("agent", attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                   A.GEN_AI_CONVERSATION_ID: session_id})
    processor.on_start(agent, None)
    return provider, processor, tracer, trace.set_span_in_context(agent)


def test_the_compiled_end_frees_what_it_takes():
    provider, processor, tracer, context = _processor_in_a_session("e5")
    ended = []
    for attributes in ({}, {A.NESTED_STEP: True}, {A.SEQUENCE: 0}, {A.GEN_AI_OPERATION_NAME: 3}):
        span = _tool_span(tracer, context, **attributes)  # (not seen by the guard: made to be ended below)
        span._attributes._dict[A.SESSION_ID] = "e5"
        span._attributes._dict.setdefault(A.SEQUENCE, 1)
        ended.append(span)
    late = _tool_span(tracer, context)
    late._attributes._dict.update({A.SESSION_ID: "no such session", A.SEQUENCE: 1})
    session = processor._sessions.get("e5")
    session.first_sequence = 1
    sequence = iter(range(1, 10**6))

    def calls() -> None:
        for _ in range(200):
            span = ended[0]
            span._attributes._dict[A.SEQUENCE] = next(sequence)  # the same step, again and again: in order
            span._attributes._dict[A.TOOL_ARGS_FINGERPRINT] = "same"
            COMPILED_END(processor, span._readable_span(), span._attributes._dict, "e5")
            for other in (*ended[1:], late):
                COMPILED_END(processor, other._readable_span(), other._attributes._dict,
                             other._attributes._dict[A.SESSION_ID])

    calls()  # past what the session keeps of its first steps, and its one alert
    assert_frees_what_it_takes(calls)
    processor.shutdown()
    provider.shutdown()


def test_the_compiled_end_of_a_lone_call_frees_what_it_takes():
    run = Run()
    model = run.tracer.start_span("lone", context=Context(), attributes={  # started: its trace a lone call
        A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",),
        A.GEN_AI_USAGE_INPUT_TOKENS: 412})
    attrs = model._attributes._dict
    session_id = attrs[A.SESSION_ID]
    lone = run.processor._sessions.lone
    entry = lone[session_id]

    def calls() -> None:
        for _ in range(200):
            lone[session_id] = entry  # running again: judged alone again, its verdict to the metrics only
            assert COMPILED_END(run.processor, model._readable_span(), attrs, session_id) is True
            assert session_id not in lone

    calls()
    assert_frees_what_it_takes(calls)
    run.provider.shutdown()


def test_configure_refuses_what_it_cannot_read_and_runs_once():
    from otel_agentguard import _span_paths

    given = processor_module.compiled_span_paths_configuration()
    with pytest.raises(RuntimeError, match="configured once"):
        _span_paths.configure(given)
    for key, wrong in (("processor", "not a class"), ("session", dict), ("names", ("too", "few")),
                       ("kind_of_operation", []), ("kind_of_operation", {"execute_tool": "".join(["to", "ol"])}),
                       ("current_context", None), ("numbering_name", 1), ("step", int)):
        with pytest.raises(TypeError, match="configure"):
            _span_paths.configure({**given, key: wrong})
    with pytest.raises(TypeError, match="report is missing"):
        _span_paths.configure({name: value for name, value in given.items() if name != "report"})
    with pytest.raises(TypeError, match="expected a dict"):
        _span_paths.configure(list(given))
    with pytest.raises(TypeError, match="4 arguments"):
        _span_paths.start_marked(None)
    with pytest.raises(TypeError, match="4 arguments"):
        _span_paths.end_in_session(None)


# --- on_start and on_end themselves ---------------------------------------------------------------

HOOKS = AgentGuardSpanProcessor.__dict__["on_start"], AgentGuardSpanProcessor.__dict__["on_end"]
PYTHON_HOOKS = processor_module._python_on_start, processor_module._python_on_end


def _python_hooks_run(run: Run) -> list[str]:
    """Which of the Python methods on_start and on_end ran, in order, for a session of one tool call."""
    python = {hook.__code__ for hook in PYTHON_HOOKS}

    def session_of_one_call() -> None:
        agent, context = _session(run, "s9")
        _tool(run, context).end()
        agent.end()

    _, ran = python_code_run(session_of_one_call)
    return [code.co_name for code in ran if code in python]


def test_on_start_and_on_end_are_compiled_and_call_the_python_methods_for_anything_else():
    assert all(type(hook).__name__ == "method_descriptor" for hook in HOOKS)

    class Custom(AgentGuardSpanProcessor):
        pass

    # The agent span and its tool's start and end; then, as the agent span ends, the verdict span's.
    in_python = ["on_start", "on_start", "on_end", "on_end", "on_start", "on_end"]
    assert _python_hooks_run(Run()) == []
    assert _python_hooks_run(Run(processor_type=Custom)) == in_python
    assert _python_hooks_run(Run(mode="enforce")) == in_python
    with paths(compiled=False):  # a replaced function they stand for
        assert _python_hooks_run(Run()) == in_python
    run = Run()
    with pytest.raises(TypeError):  # arguments the Python method refuses are refused as it refuses them
        run.processor.on_start(_tool(run, Context()), None, "extra")


def test_on_start_takes_its_context_by_position_or_by_name():
    run = Run()
    agent, context = _session(run, "s10")
    for how in ("position", "name"):
        span = run.tracer.start_span("plain", context=Context())  # started outside: stamped below
        span._attributes._dict.pop(A.SESSION_ID, None)
        if how == "position":
            run.processor.on_start(span, context)
        else:
            run.processor.on_start(span, parent_context=context)
        assert span.attributes[A.SESSION_ID] == "s10", how
        span.end()
    agent.end()


class FailingContext(Context):
    def get(self, key: str, default: Any = None) -> Any:
        raise RuntimeError("unreadable")


class FailingFlag:
    def __bool__(self) -> bool:
        raise RuntimeError("neither")


def test_a_failure_in_on_start_or_on_end_is_reported_not_raised():
    run = Run()
    before = _internal_errors.counts()
    span = run.tracer.start_span("plain", context=Context())
    run.processor.on_start(span, FailingContext({"a": 1}))  # read by session_in_context, which raises
    span._attributes._dict.update({A.SESSION_ID: "s11", A.VERDICT: FailingFlag()})
    run.processor.on_end(span)
    after = _internal_errors.counts()
    assert after.get("processor.on_start", 0) == before.get("processor.on_start", 0) + 1
    assert after.get("processor.on_end", 0) == before.get("processor.on_end", 0) + 1


def test_on_start_and_on_end_free_what_they_take(monkeypatch):
    # (Each processor an earlier test left open listens to the failures reported, and counts them
    # in its metrics, which may keep what they are given: only this test's work is measured.)
    monkeypatch.setattr(_internal_errors, "_listeners", [])
    provider, processor, tracer, context = _processor_in_a_session("s12")
    plain, step = tracer.start_span("plain", context=context), _tool_span(tracer, context)
    failing = tracer.start_span("failing")
    failing._attributes._dict.update({A.SESSION_ID: "s12", A.VERDICT: FailingFlag()})

    def calls() -> None:
        for _ in range(200):
            for span in (plain, step):
                span._attributes._dict.pop(A.SESSION_ID, None)
                span._attributes._dict.pop(A.SEQUENCE, None)
                processor.on_start(span, context)
                processor.on_start(span, parent_context=context)
            processor.on_start(plain, None)
            processor.on_start(plain, FailingContext({"a": 1}))
            processor.on_end(plain)
            processor.on_end(failing)

    assert_frees_what_it_takes(calls)
    provider.shutdown()


def test_a_span_class_with_writers_of_its_own_is_stamped_through_them():
    from opentelemetry.sdk.trace import Span as SDKSpan

    class Redacting(SDKSpan):
        def set_attributes(self, attributes: Any) -> None:
            super().set_attributes({key: "<redacted>" for key in attributes})

    run = Run()
    agent, context = _session(run, "s13")
    span = Redacting("plain", SpanContext(trace_id=1, span_id=2, is_remote=False))
    span.start()
    run.processor.on_start(span, context)  # inside the session: stamped with its id, through its writers
    assert dict(span.attributes or {}) == {A.SESSION_ID: "<redacted>"}
    agent.end()



def test_a_span_class_the_hooks_cannot_ask_about_is_started_by_the_python_method():
    from opentelemetry.sdk.trace import Span as SDKSpan

    class Guarded(type(SDKSpan)):  # type: ignore[misc]
        def __getattribute__(cls, name: str) -> Any:
            if name == "parent":
                raise RuntimeError("not to be asked")
            return super().__getattribute__(name)

    class Odd(SDKSpan, metaclass=Guarded):
        pass

    run = Run()
    agent, context = _session(run, "s15")
    before = _internal_errors.counts().get("processor.on_start", 0)
    span = Odd("plain", SpanContext(trace_id=1, span_id=2, is_remote=False))
    span.start()
    run.processor.on_start(span, context)
    assert dict(span.attributes or {}) == {A.SESSION_ID: "s15"}  # stamped as Python stamps it
    assert _internal_errors.counts().get("processor.on_start", 0) == before
    agent.end()


def test_a_session_span_keeps_its_session_id_while_code_runs_in_the_opening() -> None:
    """The session id of a session span is its attribute dict's own str: opening the session runs
    Python code (here the store's clock), which may replace that attribute and free the str; the id
    stamped is still the one read."""
    starting: list[Any] = []

    class Recorder(SpanProcessor):  # runs before the guard: the span, as it starts
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            starting[:] = [span]

    provider = TracerProvider()
    provider.add_span_processor(Recorder())
    guard = AgentGuardSpanProcessor(POLICY, "observe", tracer_provider=provider)
    provider.add_span_processor(guard)
    tracer = provider.get_tracer("test")

    def fresh_id() -> str:  # built at each call: only the dict it goes into holds it
        return "".join(["sess-", "held", "-", "x" * 40])

    class AgentAttributes(Mapping[str, Any]):  # a fresh id at each read: the span's dict holds the only one
        def __getitem__(self, key: str) -> Any:
            return fresh_id() if key == A.GEN_AI_CONVERSATION_ID else A.OP_INVOKE_AGENT

        def __iter__(self) -> Iterator[str]:
            return iter((A.GEN_AI_OPERATION_NAME, A.GEN_AI_CONVERSATION_ID))

        def __len__(self) -> int:
            return 2

    def agent_attributes() -> Mapping[str, Any]:
        return AgentAttributes()

    first = tracer.start_span("first", context=Context(), attributes=agent_attributes())  # the session is live
    clock, reused = guard._sessions.store._clock, []

    def meddling() -> float:
        if starting and starting[0].name == "agent":
            starting[0]._attributes._dict[A.GEN_AI_CONVERSATION_ID] = "replaced"  # the id's last reference
            reused.extend(bytearray(b"Z" * 80) for _ in range(200))  # its memory, reused
        return float(clock())

    guard._sessions.store._clock = meddling
    for _ in range(3):
        span = tracer.start_span("agent", context=Context(), attributes=agent_attributes())
        assert span.attributes[A.SESSION_ID] == fresh_id()
        span.end()
    first.end()
    provider.shutdown()
