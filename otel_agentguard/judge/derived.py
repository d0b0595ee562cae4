"""Tool steps derived from model spans, for agents whose tools leave no span.

When a model span asks for tool calls, each call waits here. A tool span that
answers it (the same ``gen_ai.tool.call.id``, else the same tool name) ends
the wait: the real span is the step, one step per call. A call still waiting
when the next model span of the session ends becomes a tool step of its own,
with the name and argument fingerprint from the request and, when that model
call's input carries the tool's answer, its result fingerprint and error
state. A call still waiting when the session ends becomes a step with no
known result.

Numbering matches the order the agent ran things in: when a model span ends,
each call it asked for takes the session's next sequence number, so derived
steps sit between the model call that asked for them and the one after. The
live processor and the replay drive the same :class:`DerivedTools`, so both
derive the same steps under the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.steps import MODEL, TOOL, Step, step_from_attributes, tool_name
from otel_agentguard.judge.tool_calls import RequestedCall, ToolOutcome, requested_calls, tool_outcomes


@dataclass(slots=True)
class _Waiting:
    call: RequestedCall
    sequence: int
    requested_ns: int


class DerivedTools:
    """One session's requested tool calls that no tool span has answered yet.

    Not thread-safe: the caller serialises (the processor under the session lock).
    """

    __slots__ = ("session_id", "policy", "_waiting")

    def __init__(self, session_id: str, policy: Policy):
        self.session_id = session_id
        self.policy = policy
        self._waiting: list[_Waiting] = _NONE_WAITING  # a list of its own at the first requested call

    def on_step(
        self,
        kind: str,
        attrs: Mapping[str, Any],
        *,
        span_name: str,
        start_ns: int,
        end_ns: int,
        next_sequence: Callable[[], int],
    ) -> tuple[list[Step], list[int]]:
        """A step span ended. Returns the derived steps it releases (to judge before
        it) and the reserved sequence numbers no step will fill (a tool span took the call)."""
        if kind == TOOL:
            taken = self._take(_text(attrs.get(A.GEN_AI_TOOL_CALL_ID)), tool_name(attrs, span_name))
            return [], ([taken] if taken is not None else [])
        if kind != MODEL:
            return [], []
        released = self._release(tool_outcomes(attrs), start_ns) if self._waiting else []
        if attrs.get(A.RESPONSE_TOOL_CALLS) != 0:  # our own model spans say when a response asked for none
            for call in requested_calls(attrs):
                if self._waiting is _NONE_WAITING:
                    self._waiting = []
                self._waiting.append(_Waiting(call, next_sequence(), end_ns))
        return released, []

    def flush(self) -> list[Step]:
        """The session ended: every call still waiting is a step with no known result."""
        return self._release({}, 0)

    def __bool__(self) -> bool:
        return bool(self._waiting)

    def _take(self, call_id: str | None, name: str) -> int | None:
        # A tool span without a call id (or with another id scheme) answers the first call of its name.
        match = None
        if call_id is not None:
            match = next((w for w in self._waiting if w.call.call_id == call_id), None)
        if match is None:
            match = next((w for w in self._waiting if w.call.name == name), None)
        if match is None:
            return None
        self._waiting.remove(match)
        return match.sequence

    def _release(self, outcomes: dict[str, ToolOutcome], end_ns: int) -> list[Step]:
        waiting, self._waiting = self._waiting, _NONE_WAITING
        return [self._step(w, outcomes.get(w.call.call_id or ""), end_ns) for w in waiting]

    def _step(self, waiting: _Waiting, outcome: ToolOutcome | None, end_ns: int) -> Step:
        call = waiting.call
        attrs: dict[str, Any] = {A.GEN_AI_TOOL_NAME: call.name}
        if call.arguments is not None:
            attrs[A.GEN_AI_TOOL_CALL_ARGUMENTS] = call.arguments
        if outcome is not None and outcome.result is not None:
            attrs[A.GEN_AI_TOOL_CALL_RESULT] = outcome.result
        return step_from_attributes(
            attrs,
            kind=TOOL,
            session_id=self.session_id,
            sequence=waiting.sequence,
            policy=self.policy,
            start_ns=waiting.requested_ns,
            end_ns=max(end_ns, waiting.requested_ns),
            status_error=outcome is not None and outcome.failed,
        )


_NONE_WAITING: list[_Waiting] = []  # never written: stands in while no call waits


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None
