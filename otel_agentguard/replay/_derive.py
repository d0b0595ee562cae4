"""Replay's side of tool steps derived from model spans: the live processor's order, re-run.

Live, a step span takes its sequence number when it starts, and the calls a
model span asked for take theirs when it ends. Replaying a session's spans as
start and end events in time order gives each span and each derived step the
number it had live (or, for spans the guard never numbered, would have had).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, Protocol

from otel_agentguard import attributes as A
from otel_agentguard.judge.derived import DerivedTools
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.steps import MODEL, TOOL, Step
from otel_agentguard.judge.tool_calls import records_requested_calls
from otel_agentguard.live.duplicates import same_response


class StepSpan(Protocol):
    kind: str
    attrs: dict[str, Any]
    name: str
    start_ns: int
    end_ns: int


def with_derived_steps(
    members: Sequence[tuple[Hashable, StepSpan]],
    *,
    numbered: bool,
    session_id: str,
    policy: Policy,
    build: Callable[[StepSpan, int], Step],
) -> list[tuple[Hashable, StepSpan | None, Step]]:
    """Each member's step and the derived ones between them, as (run, span or None, step) in sequence order."""
    if numbered and not any(span.kind == MODEL and records_requested_calls(span.attrs) for _, span in members):
        return _numbered_without_derived(members, build)
    # The spans' start and end events in time order; at one instant, an end before a start (a
    # tool span starts after the model span that asked). A start only numbers its span, so the
    # starts are taken lazily: before each end, those that came earlier.
    spans = [span for _, span in members]
    # Stable sorts: at one instant, in member order.
    ends = sorted(range(len(spans)), key=[span.end_ns for span in spans].__getitem__)
    starts = sorted(range(len(spans)), key=[span.start_ns for span in spans].__getitem__)
    counter = 0

    def next_sequence() -> int:
        nonlocal counter
        counter += 1
        return counter

    numbers: dict[int, int] = {}

    def take_number(index: int) -> None:
        """A span's start: its sequence number (once; a span numbered at its end keeps that one)."""
        nonlocal counter
        if index in numbers:
            return
        if numbered:
            numbers[index] = number = spans[index].attrs[A.SEQUENCE]
            if number > counter:
                counter = number
        else:
            numbers[index] = next_sequence()

    started = 0
    derived = DerivedTools(session_id, policy)
    waiting = False  # whether a requested call waits in derived (asked once per change, not per test)
    derived_run: Hashable = None
    last_response: str | None = None
    result: list[tuple[Hashable, StepSpan | None, Step]] = []
    for order in ends:
        run, span = members[order]
        end_ns = span.end_ns
        while started < len(starts) and spans[starts[started]].start_ns < end_ns:
            take_number(starts[started])
            started += 1
        if order not in numbers:  # it ends when it starts (or, clocks skewed, before): numbered now
            take_number(order)
        if waiting and run != derived_run:  # live, the run that asked ended and flushed them
            result.extend((derived_run, None, step) for step in derived.flush())
            waiting = False
        kind = span.kind
        if kind == MODEL:
            repeated, last_response = same_response(kind, span.attrs, last_response)
            if repeated:  # the same model call seen a second time: no step, as live
                continue
        step = build(span, numbers[order])
        if kind != TOOL or waiting:  # a tool span with no call waiting leaves nothing to derive
            released, _ = derived.on_step(
                kind, span.attrs, span_name=span.name, start_ns=span.start_ns, end_ns=end_ns,
                next_sequence=next_sequence,
            )
            if released:
                result.extend((run, None, extra) for extra in released)
            waiting = bool(derived)
        result.append((run, span, step))
        if waiting:
            derived_run = run
    result.extend((derived_run, None, step) for step in derived.flush())
    result.sort(key=_sequence)
    return result


def _numbered_without_derived(
    members: Sequence[tuple[Hashable, StepSpan]], build: Callable[[StepSpan, int], Step],
) -> list[tuple[Hashable, StepSpan | None, Step]]:
    """What :func:`with_derived_steps` gives when no model span names a call it asked for (our
    own spans without captured content; most sessions): each span keeps its own number, and
    only a model call's second span is left out (found in the same end order)."""
    ends = sorted(range(len(members)), key=[span.end_ns for _, span in members].__getitem__)
    last_response: str | None = None
    result: list[tuple[Hashable, StepSpan | None, Step]] = []
    for order in ends:
        run, span = members[order]
        if span.kind == MODEL:
            repeated, last_response = same_response(MODEL, span.attrs, last_response)
            if repeated:
                continue
        result.append((run, span, build(span, span.attrs[A.SEQUENCE])))
    result.sort(key=_sequence)
    return result


def _sequence(entry: tuple[Hashable, StepSpan | None, Step]) -> int:
    return entry[2].sequence
