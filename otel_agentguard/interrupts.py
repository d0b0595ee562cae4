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
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

from otel_agentguard import attributes as A
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


# Set by the SIGTERM handler, read at every cut point. A signal handler runs between two
# bytecodes of whatever the main thread was doing, possibly inside one of the guard's
# locks: so it takes no lock, logs nothing and only sets this flag.
_sigterm_received = False
_sigterm_logged = False


def sigterm_received() -> bool:
    """True once :func:`drain_on_sigterm`'s handler has run: every session drains."""
    global _sigterm_logged
    if _sigterm_received and not _sigterm_logged:
        _sigterm_logged = True
        logger.warning("SIGTERM: agent sessions drain at their next safe cut point")
    return _sigterm_received


class _Drainer:
    def __init__(self, previous: Any, then_exit: bool):
        self.previous = previous
        self.then_exit = then_exit

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        global _sigterm_received
        _sigterm_received = True
        if callable(self.previous):
            self.previous(signum, frame)
        elif self.then_exit and not any(_registry.live_session_counts()):
            raise SystemExit(128 + signum)


def drain_on_sigterm(then_exit: bool = False) -> Callable[[], bool]:
    """Turn SIGTERM into a drain of every agent session (call from the main thread).

    The handler only sets a flag (it may interrupt the guard itself, so it takes
    no lock). In enforce mode, every session then stops at its next safe cut point
    with ``AgentStopped(stop_reason="drained")``: in-flight tool batches finish and
    the history stays resumable; sessions started afterwards stop at their first
    cut point. A handler installed before is still called afterwards; with
    ``then_exit`` and no previous handler, a SIGTERM that finds no live session
    exits the process.

    Returns a function telling whether SIGTERM has been received.
    """
    previous = signal.getsignal(signal.SIGTERM)
    handler = _Drainer(previous if previous not in (signal.SIG_DFL, signal.SIG_IGN, None) else None, then_exit)
    signal.signal(signal.SIGTERM, handler)
    return lambda: _sigterm_received
