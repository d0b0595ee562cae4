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

from collections import deque

from otel_agentguard.attributes import TOOL_LOOP
from otel_agentguard.policy import Policy, Profile
from otel_agentguard.probes import Alert, SessionTotals, call_key, short
from otel_agentguard.steps import TOOL, Step

DISPOSAL = "cut this action branch: tell the model not to retry it, switch strategy or hand over to a human"


class ToolLoop:
    name = TOOL_LOOP
    __slots__ = ("_window", "_threshold", "_recent", "_counts", "_fired")

    def __init__(self, profile: Profile, policy: Policy):
        self._window = profile.window
        self._threshold = profile.repeat_threshold
        self._recent: deque[tuple[object, int]] = deque()
        self._counts: dict[object, int] = {}
        self._fired = False

    def observe(self, step: Step, totals: SessionTotals) -> list[Alert] | None:
        if step.kind != TOOL or self._fired:
            return None
        key = call_key(step)
        self._recent.append((key, step.sequence))
        if key is not None:
            self._counts[key] = self._counts.get(key, 0) + 1
        if len(self._recent) > self._window:
            old, _ = self._recent.popleft()
            if old is not None:
                left = self._counts[old] - 1
                if left:
                    self._counts[old] = left
                else:
                    del self._counts[old]
        if key is None or self._counts[key] < self._threshold:
            return None
        self._fired = True
        evidence = tuple(seq for k, seq in self._recent if k == key)
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
