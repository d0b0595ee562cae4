"""Interrupts from outside the agent: steer, drain, dispatch, await.

``request_stop(session_id, reason)`` asks a running session to end its turn.
The request is honoured only at a safe cut point (every requested tool call has
its result), with several pending requests in the order steer, drain,
dispatch, await. The agent then gets :class:`~otel_agentguard.AgentStopped`
with ``stop_reason`` ``steered``, ``drained``, ``dispatched`` or ``awaiting``:

* steer and drain **suspend** the turn (``resumable``): keep the history and
  run it again, with the user's new message or on another machine;
* dispatch and await **end** the turn: a sub-agent was sent off, or the agent
  waits for an answer.

The session is stamped with that stop reason the moment it happens; it is never
counted as an empty answer, an error or a loop, and its session span is still
written. Interrupts act in enforce mode only, like every other stop.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from otel_agentguard import attributes as A
from otel_agentguard.environment_variables import OTEL_AGENTGUARD_DRAIN_DEADLINE_S
from otel_agentguard.live import registry as _registry

logger = logging.getLogger(__name__)

REASONS = {
    "steer": A.STEERED, "steered": A.STEERED,
    "drain": A.DRAINED, "drained": A.DRAINED,
    "dispatch": A.DISPATCHED, "dispatched": A.DISPATCHED,
    "await": A.AWAITING, "awaiting": A.AWAITING,
}


def request_stop(session_id: str, reason: str = "steered") -> bool:
    """Ask a live session to stop at its next safe cut point.

    Returns True when a guard in enforce mode holds the session (so it will be honoured).

    Raises:
        ValueError: ``reason`` is not one of steer(ed), drain(ed), dispatch(ed), await(ing).
    """
    stamp = REASONS.get(reason)
    if stamp is None:
        raise ValueError(f"reason must be one of steered, drained, dispatched, awaiting; got {reason!r}")
    return any(processor.request_interrupt(session_id, stamp) for processor in _registry.processors())


def drain_all(reason: str = "drained") -> int:
    """Ask every live session to stop at its next cut point; returns how many will."""
    count = 0
    for processor in _registry.processors():
        for session_id in processor.live_session_ids():
            count += processor.request_interrupt(session_id, REASONS[reason])
    return count


DEFAULT_DRAIN_DEADLINE_S = 20.0

# Set by the SIGTERM handler, read at every cut point. A signal handler runs between two
# bytecodes of whatever the main thread was doing, possibly inside one of the guard's
# locks: so it takes no lock, logs nothing and only sets these.
_sigterm_received = False
_sigterm_at = 0.0  # time.monotonic() of the first SIGTERM
_sigterm_logged = False
_drain_deadline_s = DEFAULT_DRAIN_DEADLINE_S


def sigterm_received() -> bool:
    """True once :func:`drain_on_sigterm`'s handler has run: every session drains."""
    global _sigterm_logged
    if _sigterm_received and not _sigterm_logged:
        _sigterm_logged = True
        logger.warning("SIGTERM: agent sessions drain at their next safe cut point")
    return _sigterm_received


def drain_deadline_passed() -> bool:
    """True once the drain has run past its deadline: a session that found no safe cut point
    by then stops at its next call anyway."""
    return _sigterm_received and time.monotonic() - _sigterm_at >= _drain_deadline_s


class _Drainer:
    def __init__(self, previous: Any, then_exit: bool):
        self.previous = previous
        self.then_exit = then_exit

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        global _sigterm_received, _sigterm_at
        if not _sigterm_received:
            _sigterm_at = time.monotonic()
        _sigterm_received = True
        if callable(self.previous):
            self.previous(signum, frame)
        elif self.then_exit and not any(_registry.live_session_counts()):
            raise SystemExit(128 + signum)


def drain_on_sigterm(then_exit: bool = False, deadline_s: float | None = None) -> Callable[[], bool]:
    """Turn SIGTERM into a drain of every agent session (call from the main thread).

    The handler only sets a flag (it may interrupt the guard itself, so it takes
    no lock). In enforce mode, every session then stops at its next safe cut point
    with ``AgentStopped(stop_reason="drained")``: in-flight tool batches finish and
    the history stays resumable; sessions started afterwards stop at their first
    cut point. A handler installed before is still called afterwards; with
    ``then_exit`` and no previous handler, a SIGTERM that finds no live session
    exits the process.

    ``deadline_s`` (else ``OTEL_AGENTGUARD_DRAIN_DEADLINE_S``, else 20): a session that has
    found no safe cut point that long after SIGTERM stops at its next model or tool call
    anyway, still with ``drained``; the history may then hold tool calls without results
    (:func:`~otel_agentguard.repair_history` answers them), and the stop's ``detail`` says so.
    A drain with no deadline would let the orchestrator kill the process mid-batch instead.

    Returns a function telling whether SIGTERM has been received.

    Raises:
        ValueError: the deadline (argument or environment variable) is not a number of seconds >= 0.
    """
    global _drain_deadline_s
    _drain_deadline_s = _deadline(deadline_s)
    previous = signal.getsignal(signal.SIGTERM)
    handler = _Drainer(previous if previous not in (signal.SIG_DFL, signal.SIG_IGN, None) else None, then_exit)
    signal.signal(signal.SIGTERM, handler)
    return lambda: _sigterm_received


def _deadline(deadline_s: float | None) -> float:
    if deadline_s is None:
        text = os.environ.get(OTEL_AGENTGUARD_DRAIN_DEADLINE_S, "").strip()
        if not text:
            return DEFAULT_DRAIN_DEADLINE_S
        try:
            deadline_s = float(text)
        except ValueError:
            raise ValueError(f"{OTEL_AGENTGUARD_DRAIN_DEADLINE_S}={text!r}: not a number of seconds") from None
        where = OTEL_AGENTGUARD_DRAIN_DEADLINE_S
    else:
        where = "deadline_s"
    if not math.isfinite(deadline_s) or deadline_s < 0:
        raise ValueError(f"{where}={deadline_s!r}: must be a number of seconds >= 0")
    return float(deadline_s)
