"""Which guard processors exist, in the order they were made.

The fallback for whoever was not handed a guard explicitly (see
:mod:`otel_agentguard.guard_ref`): :func:`choose` picks one deterministically.
Weak references only: a processor that its provider dropped is forgotten, and
one that was shut down unregisters itself.
"""

from __future__ import annotations

import itertools
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
# Creation number -> processor: iteration in creation order, entries gone with their processor.
_processors: weakref.WeakValueDictionary[int, AgentGuardSpanProcessor] = weakref.WeakValueDictionary()
_made = itertools.count()
_fallback_policy: Policy | None = None


def register(processor: AgentGuardSpanProcessor) -> None:
    with _lock:
        _processors[next(_made)] = processor


def unregister(processor: AgentGuardSpanProcessor) -> None:
    with _lock:
        for number, registered in list(_processors.items()):
            if registered is processor:
                del _processors[number]


def live_session_counts() -> list[int]:
    """Live sessions per processor, read without any lock (safe in a signal handler)."""
    return [processor.live_session_count() for processor in list(_processors.values())]


def processors() -> tuple[AgentGuardSpanProcessor, ...]:
    """Every running processor, oldest first."""
    with _lock:
        return tuple(processor for _, processor in sorted(_processors.items()))


def choose(tracer_provider: object = None) -> AgentGuardSpanProcessor | None:
    """The guard for a caller that was given none: the newest one added to ``tracer_provider``
    (the provider the caller traces to) when there is one, else the newest one."""
    running = processors()
    if tracer_provider is not None:
        for processor in reversed(running):
            if processor.tracer_provider is tracer_provider:
                return processor
    return running[-1] if running else None


def active_policy() -> Policy:
    """The policy of the guard :func:`choose` picks, else the environment's."""
    global _fallback_policy
    chosen = choose()
    if chosen is not None:
        return chosen.policy
    if _fallback_policy is None:
        try:
            _fallback_policy = policy_from_env()
        except ValueError:  # a bad policy file fails loudly at install(), not inside a tool call
            _fallback_policy = Policy.builtin()
    return _fallback_policy
