"""Which guard processors exist, so the session API and tool wrappers can find them.

Weak references only: a processor that its provider dropped is forgotten.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING

from otel_agentguard.policy import Policy, policy_from_env

if TYPE_CHECKING:
    from otel_agentguard.processor import AgentGuardSpanProcessor

_lock = threading.Lock()


def _fresh_lock_in_child() -> None:
    # A fork while another thread holds the lock would leave the child's copy locked forever.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_lock_in_child)
_processors: weakref.WeakSet[AgentGuardSpanProcessor] = weakref.WeakSet()
_fallback_policy: Policy | None = None


def register(processor: AgentGuardSpanProcessor) -> None:
    with _lock:
        _processors.add(processor)


def unregister(processor: AgentGuardSpanProcessor) -> None:
    with _lock:
        _processors.discard(processor)


def live_session_counts() -> list[int]:
    """Live sessions per processor, read without any lock (safe in a signal handler)."""
    return [processor.live_session_count() for processor in list(_processors)]


def processors() -> tuple[AgentGuardSpanProcessor, ...]:
    with _lock:
        return tuple(_processors)


def active_policy() -> Policy:
    """The policy tools are fingerprinted with: the installed processor's, else the environment's."""
    global _fallback_policy
    for processor in processors():
        return processor.policy
    if _fallback_policy is None:
        try:
            _fallback_policy = policy_from_env()
        except ValueError:  # a bad policy file fails loudly at install(), not inside a tool call
            _fallback_policy = Policy.builtin()
    return _fallback_policy
