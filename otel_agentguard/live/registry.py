"""Which guard processors exist, in the order they were made.

The fallback for whoever was not handed a guard explicitly (see
:mod:`otel_agentguard.live.guard_ref`): :func:`choose` picks one deterministically.
Weak references only: a processor that its provider dropped is forgotten, and
one that was shut down unregisters itself.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING

from otel_agentguard._fork import renew_in_forked_children
from otel_agentguard.judge.policy import Policy, policy_from_env

if TYPE_CHECKING:
    from otel_agentguard.live.processor import AgentGuardSpanProcessor

_lock = threading.Lock()
renew_in_forked_children(globals(), "_lock")
# Weak references, oldest first: rebuilt (under the lock) when a processor comes or goes, read
# without a lock on every call (a tuple is replaced whole, never changed in place).
_processors: tuple[weakref.ref[AgentGuardSpanProcessor], ...] = ()
_fallback_policy: Policy | None = None

#: Whether any running processor is in enforce mode. False in the usual, observe-only process:
#: then every enforcement hook returns at once, without choosing a guard on each model call.
#: (A processor's mode is fixed when it is made.)
any_enforcing = False


def register(processor: AgentGuardSpanProcessor) -> None:
    with _lock:
        _replace((*_alive(), weakref.ref(processor, _forget)))


def unregister(processor: AgentGuardSpanProcessor) -> None:
    with _lock:
        _replace(tuple(ref for ref in _alive() if ref() is not processor))


def _forget(_: object) -> None:
    """A processor was garbage-collected: drop its dead reference (lock-free: the GC may run
    this while the lock is held; a dead reference left behind is skipped anyway)."""
    _replace(_alive())


def _replace(processors: tuple[weakref.ref[AgentGuardSpanProcessor], ...]) -> None:
    global _processors, any_enforcing
    # Raised before the processor is visible, lowered after it is gone: a hook never skips a
    # running enforce-mode guard.
    enforcing = any(processor.mode == "enforce" for ref in processors if (processor := ref()) is not None)
    if enforcing:
        any_enforcing = True
    _processors = processors
    any_enforcing = enforcing


def _alive() -> tuple[weakref.ref[AgentGuardSpanProcessor], ...]:
    return tuple(ref for ref in _processors if ref() is not None)


def live_session_counts() -> list[int]:
    """Live sessions per processor, read without any lock (safe in a signal handler)."""
    return [processor.live_session_count() for processor in processors()]


def processors() -> tuple[AgentGuardSpanProcessor, ...]:
    """Every running processor, oldest first."""
    return tuple(processor for ref in _processors if (processor := ref()) is not None)


def choose(tracer_provider: object = None) -> AgentGuardSpanProcessor | None:
    """The guard for a caller that was given none: the newest one added to ``tracer_provider``
    (the provider the caller traces to) when there is one, else the newest one."""
    newest = None
    for ref in reversed(_processors):
        processor = ref()
        if processor is None:
            continue
        if tracer_provider is None or processor.tracer_provider is tracer_provider:
            return processor
        newest = newest or processor
    return newest


def active_policy() -> Policy:
    """The policy of the guard :func:`choose` picks, else the environment's."""
    chosen = choose()
    return chosen.policy if chosen is not None else environment_policy()


def environment_policy() -> Policy:
    """The policy when no guard runs: ``OTEL_AGENTGUARD_POLICY``'s, else the built-in one."""
    global _fallback_policy
    if _fallback_policy is None:
        try:
            _fallback_policy = policy_from_env()
        except ValueError:  # a bad policy file fails loudly at install(), not inside a tool call
            _fallback_policy = Policy.builtin()
    return _fallback_policy
