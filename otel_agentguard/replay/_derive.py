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
from otel_agentguard.derived import DerivedTools
from otel_agentguard.duplicate_spans import same_response
from otel_agentguard.policy import Policy
from otel_agentguard.steps import Step


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
    events = sorted(
        [(span.start_ns, 1, order) for order, (_, span) in enumerate(members)]
        + [(span.end_ns, 0, order) for order, (_, span) in enumerate(members)]
    )  # at one instant, an end before a start: a tool span starts after the model span that asked
    counter = 0

    def next_sequence() -> int:
        nonlocal counter
        counter += 1
        return counter

    numbers: dict[int, int] = {}
    derived = DerivedTools(session_id, policy)
    derived_run: Hashable = None
    last_response: str | None = None
    result: list[tuple[Hashable, StepSpan | None, Step]] = []
    for _, is_start, order in events:
        run, span = members[order]
        if is_start:
            if numbered:
                numbers[order] = span.attrs[A.SEQUENCE]
                counter = max(counter, numbers[order])
            else:
                numbers[order] = next_sequence()
            continue
        if derived and run != derived_run:  # live, the run that asked ended and flushed them
            result.extend((derived_run, None, step) for step in derived.flush())
        repeated, last_response = same_response(span.kind, span.attrs, last_response)
        if repeated:  # the same model call seen a second time: no step, as live
            continue
        step = build(span, numbers[order])
        released, _ = derived.on_step(
            span.kind, span.attrs, span_name=span.name, start_ns=span.start_ns, end_ns=span.end_ns,
            next_sequence=next_sequence,
        )
        result.extend((run, None, extra) for extra in released)
        result.append((run, span, step))
        if derived:
            derived_run = run
    result.extend((derived_run, None, step) for step in derived.flush())
    result.sort(key=lambda entry: entry[2].sequence)
    return result
