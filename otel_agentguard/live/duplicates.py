"""One call, two spans: telling a duplicate step span from a step.

Two instrumentations of one request (ours and openai-v2, OpenLLMetry or
OpenInference), or an MCP server's span under the client's, make a step span
directly inside a step span of the same call. The enclosing span is the step;
the inner one is marked ``agentguard.nested_step`` and judged as no step. What
the judge reads that only the inner one recorded (ours enriches the span right
around the SDK) is carried onto the step span when the inner one ends.

An instrumentation that opens its span only after the call has returned
(OpenLLMetry's for the Responses API) makes a sibling, not a child: there is no
open span to enrich. Such a model span reports the response the session's
previous model span already reported (``gen_ai.response.id``), and is judged as
no step either, live and on replay alike (:func:`same_response`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, Span

from otel_agentguard import attributes as A
from otel_agentguard.judge.steps import KIND_OF_OPERATION, MODEL, nested_step, step_kind
from otel_agentguard.live.resolution import span_attributes

_CARRIED_TO_STEP = (
    A.RESPONSE_TOOL_CALLS, A.FINAL_CLAIMS, A.GEN_AI_RESPONSE_FINISH_REASONS,
    A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS,
)
_MAX_OPEN_DUPLICATES = 10_000


def enclosing_step(kind: str, attrs: Mapping[str, Any], parent: Any, parent_attrs: Mapping[str, Any] | None) -> Any:
    """The step span a starting step span duplicates (its recording ``parent``, whose attributes are
    ``parent_attrs``), or None.

    A model span right inside a model span is one call; a tool span right inside a
    tool span of the same tool is one call too (a tool that calls other tools has
    other names)."""
    if parent is None:
        return None
    # The usual parent (an agent span, a model span around a tool span) names an operation of
    # another kind: nested_step's first test, made here without its calls.
    operation = parent_attrs.get(A.GEN_AI_OPERATION_NAME) if parent_attrs else None
    if type(operation) is str and KIND_OF_OPERATION.get(operation) != kind:
        return None
    if not parent_attrs or not nested_step(kind, attrs, step_kind(parent_attrs), parent_attrs):
        return None
    return parent if parent.is_recording() else None


def response_id(attrs: Mapping[str, Any]) -> str | None:
    value = attrs.get(A.GEN_AI_RESPONSE_ID)
    return value if type(value) is str and value else None


def same_response(kind: str, attrs: Mapping[str, Any], previous: str | None) -> tuple[bool, str | None]:
    """Whether a step span is a model call whose response the session's previous model step
    already reported, and the response id to remember as the previous one from now on."""
    if kind != MODEL:
        return False, previous
    current = response_id(attrs)
    return current is not None and current == previous, current


class DuplicateSpans:
    """Open duplicate spans, by span id, and the step span each one duplicates."""

    def __init__(self) -> None:
        self._steps: dict[int, Any] = {}

    def __bool__(self) -> bool:
        return bool(self._steps)

    def remember(self, duplicate: Span, step: Any) -> None:
        steps = self._steps
        steps[duplicate.get_span_context().span_id] = step
        if len(steps) > _MAX_OPEN_DUPLICATES:
            steps.pop(next(iter(steps)), None)  # the oldest: a span that never ended

    def ended(self, span: ReadableSpan, attrs: Mapping[str, Any]) -> None:
        """A duplicate ended: what it knows and its step span lacks goes on the step span."""
        context = span.get_span_context()
        step = self._steps.pop(context.span_id, None) if context is not None else None
        if step is None or not step.is_recording():
            return
        present = span_attributes(step)
        carried = {key: attrs[key] for key in _CARRIED_TO_STEP if key in attrs and key not in present}
        if carried:
            step.set_attributes(carried)
