"""``tool_loop``: the same call, returning the same result, again and again.

What it does:
    Counts, within the last ``window`` tool steps, the calls with the same
    canonical arguments (tool name included) *and* the same outcome. It fires
    when one such call reaches ``repeat_threshold``.
Why it matters:
    An agent that gets an unhelpful result and retries it unchanged burns
    tokens without learning anything. A poll whose result changes is progress,
    not a loop, so the outcome is part of the key.
Example:
    query_logistics(order=A1001) -> "stalled", three times in six steps.
Options:
    ``window``, ``repeat_threshold``.
"""

from __future__ import annotations

from array import array

from otel_agentguard.attributes import TOOL_LOOP
from otel_agentguard.policy import Policy, Profile
from otel_agentguard.probes import NO_CALL, Alert, SessionTotals, call_digest, short
from otel_agentguard.steps import TOOL, Step

DISPOSAL = "cut this action branch: tell the model not to retry it, switch strategy or hand over to a human"


class ToolLoop:
    name = TOOL_LOOP
    __slots__ = ("_window", "_threshold", "_calls", "_sequences", "_fired")

    def __init__(self, profile: Profile, policy: Policy):
        self._window = profile.window
        self._threshold = profile.repeat_threshold
        # The last ``window`` tool steps as two rings of machine words (call digest, sequence),
        # made at the first tool step: a session of model calls alone never pays for them.
        self._calls: array[int] | None = None
        self._sequences: array[int] = _EMPTY
        self._fired = False

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if step.kind != TOOL or self._fired:
            return None
        key = call_digest(step)
        calls = self._calls
        if calls is None:
            calls = self._calls = array("q")
            self._sequences = array("q")
        sequences = self._sequences
        calls.append(key)
        sequences.append(step.sequence)
        if len(calls) > self._window:
            del calls[0]
            del sequences[0]
        # Counting in the window is a scan of a few machine words, cheaper than keeping a dict.
        if key == NO_CALL or calls.count(key) < self._threshold:
            return None
        self._fired = True
        evidence = tuple(sequence for call, sequence in zip(calls, sequences, strict=True) if call == key)
        return [Alert(
            probe=TOOL_LOOP,
            sequence=step.sequence,
            evidence=evidence,
            detail=(
                f"{step.name} was called {len(evidence)} times with the same arguments "
                f"(fingerprint {short(step.args_fingerprint)}) and "
                + ("got the same result" if step.result_fingerprint else "no recorded result")
                + f" within the last {self._window} tool steps"
            ),
            disposal=DISPOSAL,
        )]


_EMPTY: array[int] = array("q")  # never written: stands in until the first tool step
