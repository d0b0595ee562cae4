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

from otel_agentguard.attributes import TOOL_LOOP
from otel_agentguard.judge.policy import Policy, Profile
from otel_agentguard.judge.probes import NO_CALL, TOOL_LOOP_FIRED, Alert, SessionTotals, short
from otel_agentguard.judge.steps import TOOL, Step

DISPOSAL = "cut this action branch: tell the model not to retry it, switch strategy or hand over to a human"


class ToolLoop:
    name = TOOL_LOOP
    kinds = frozenset({TOOL})  # the steps it reads
    __slots__ = ("_window", "_threshold")

    def __init__(self, profile: Profile, policy: Policy):
        self._window = profile.window
        self._threshold = profile.repeat_threshold

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if step.kind != TOOL or totals.fired & TOOL_LOOP_FIRED:
            return None
        # The judge keeps the session's last calls (this one included) as call digests:
        # counting in the window is a scan of a few machine words.
        calls = totals.call_digests
        key = calls[-1]
        # The window is the last of the calls kept: fewer repeats among all of them settle it.
        if key == NO_CALL or calls.count(key) < self._threshold:
            return None
        window = calls[-self._window:] if len(calls) > self._window else calls
        if window.count(key) < self._threshold:
            return None
        totals.fired |= TOOL_LOOP_FIRED
        sequences = totals.call_sequences[-len(window):]
        evidence = tuple(sequence for call, sequence in zip(window, sequences, strict=True) if call == key)
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
