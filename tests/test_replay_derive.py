"""Replay numbers a session's steps as the live processor did. Most sessions have no model span
that names the calls it asked for (our own spans without captured content): nothing is derived
for them, and they take a shorter way, which must give the very same steps in the same order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.steps import MODEL, TOOL, Step
from otel_agentguard.replay import _derive


@dataclass
class _Span:
    kind: str
    start_ns: int
    end_ns: int
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = "span"


# Ties in time, repeated sequence numbers and model calls reported twice (the same response id)
# are where an order could differ.
spans = st.builds(
    lambda kind, start, length, sequence, response: _Span(
        kind, start, start + length,
        {A.SEQUENCE: sequence, **({A.GEN_AI_RESPONSE_ID: response} if response and kind == MODEL else {})},
        f"execute_tool t{sequence % 2}" if kind == TOOL else "chat",
    ),
    st.sampled_from([MODEL, TOOL]), st.integers(0, 4), st.integers(0, 2), st.integers(1, 6),
    st.sampled_from([None, "r1", "r2"]),
)
members = st.lists(st.tuples(st.sampled_from([None, "run-a", "run-b"]), spans), max_size=12)


def _build(span: Any, number: int) -> Step:
    return Step("s", number, span.kind, span.name, span.start_ns, span.end_ns)


@settings(max_examples=400, deadline=None)
@given(members=members)
def test_sessions_without_derived_steps_take_a_shorter_way_to_the_same_steps(members: Any) -> None:
    policy = Policy.builtin()
    shorter = _derive.with_derived_steps(members, numbered=True, session_id="s", policy=policy, build=_build)
    with pytest.MonkeyPatch.context() as patch:  # every model span "names calls": the full way
        patch.setattr(_derive, "records_requested_calls", lambda attrs: True)
        full = _derive.with_derived_steps(members, numbered=True, session_id="s", policy=policy, build=_build)
    assert [(run, id(span), step) for run, span, step in shorter] == [(run, id(span), step) for run, span, step in full]
