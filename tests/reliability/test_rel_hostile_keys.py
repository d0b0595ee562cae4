"""A span whose attribute keys are hostile str subclasses ends, the process lives, the session is judged.

Such a key compares equal to the attribute name the guard looks up (same text, same hash), so every
lookup of that name runs its ``__eq__``: one changes the span's attribute dict while it is compared,
the other raises. The guard reads attributes in Python: a key that raises costs at most the step it
sits on (contained, counted once), never the process or the session's verdict.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.testing import GuardedTracing


class Mutating(str):
    """Equal to the same text; while compared, adds entries to the dict it was stored in."""

    stored_in: dict[str, Any] | None = None

    def __eq__(self, other: object) -> bool:
        if Mutating.stored_in is not None:
            Mutating.stored_in[f"junk.{len(Mutating.stored_in)}"] = 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


class Raising(str):
    """Equal to nothing: comparing it raises."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("this key refuses to be compared")

    __hash__ = str.__hash__


def _tool_span(tracing: GuardedTracing, attributes: dict[Any, Any]) -> None:
    span = tracing.tracer.start_span("execute_tool lookup", attributes=attributes)
    Mutating.stored_in = span._attributes._dict  # the dict the SDK keeps this span's attributes in
    try:
        span.end()
    finally:
        Mutating.stored_in = None


def test_a_key_that_changes_the_attributes_while_compared_leaves_the_loop_judged() -> None:
    with GuardedTracing() as tracing:
        with tracing.session("mutating") as handle:
            for _ in range(3):
                _tool_span(tracing, {
                    Mutating(A.GEN_AI_OPERATION_NAME): A.OP_EXECUTE_TOOL, Mutating(A.GEN_AI_TOOL_NAME): "lookup",
                    Mutating(A.GEN_AI_TOOL_CALL_ARGUMENTS): '{"order": "A1"}',
                    Mutating(A.GEN_AI_TOOL_CALL_RESULT): '{"state": "stalled"}',
                })
        assert handle.verdict is not None
        assert handle.verdict.stop_reason == "tool_loop"


def test_a_key_that_raises_when_compared_costs_its_step_only() -> None:
    before = _internal_errors.counts().get("processor.step", 0)
    with GuardedTracing() as tracing:
        with tracing.session("raising") as handle:
            for _ in range(3):
                _tool_span(tracing, {A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup",
                                     A.TOOL_ARGS_FINGERPRINT: "same", A.TOOL_RESULT_FINGERPRINT: "r"})
            # The step reader looks up the raw arguments here: the key raises, the step is lost alone.
            _tool_span(tracing, {A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "other",
                                 Raising(A.GEN_AI_TOOL_CALL_ARGUMENTS): '{"q": 1}'})
    assert handle.verdict is not None
    assert handle.verdict.stop_reason == "tool_loop"
    assert _internal_errors.counts().get("processor.step", 0) == before + 1


def test_the_process_lives_through_hostile_keys_on_every_kind_of_span() -> None:
    # In a child process, so that a crash (not an exception) would show as its exit status.
    program = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(__file__.rsplit("/", 1)[0])!r})
        from test_rel_hostile_keys import Mutating, Raising
        from otel_agentguard import attributes as A
        from otel_agentguard.testing import GuardedTracing
        names = (A.GEN_AI_OPERATION_NAME, A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, A.SEQUENCE, A.NESTED_STEP,
                 A.GEN_AI_TOOL_NAME, A.GEN_AI_RESPONSE_FINISH_REASONS, A.GEN_AI_USAGE_INPUT_TOKENS)
        with GuardedTracing() as tracing:
            for kind in (Mutating, Raising):
                for operation in ("execute_tool", "chat", "invoke_agent", None):
                    attributes = {{A.GEN_AI_OPERATION_NAME: operation}} if operation else {{}}
                    attributes.update((kind(name), "x") for name in names if name not in attributes)
                    with tracing.session("s"):
                        span = tracing.tracer.start_span("hostile", attributes=attributes)
                        Mutating.stored_in = span._attributes._dict
                        span.end()
                        Mutating.stored_in = None
        print("alive")
    """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("alive")
