"""The guard a wrapper reports to, handed to it explicitly.

Every instrumentor builds one :class:`GuardRef` when it is instrumented and
binds it into its wrappers (through their instrumentation context); the
wrappers ask it for the policy and call its enforcement hooks. It names:

* the processor given as ``Instrumentor().instrument(guard=processor)``
  (``otel_agentguard.install()`` returns it), while that processor runs;
* otherwise, resolved at each call, because the guard is often installed after
  the instrumentation (``opentelemetry-instrument`` instruments first): the
  newest guard added to the provider the instrumentation traces to, else the
  newest guard in the process; with no guard, the hooks do nothing and the
  policy is the environment's (``OTEL_AGENTGUARD_POLICY``, else the built-in one).

Only :class:`~otel_agentguard.AgentStopped` leaves a hook; any other failure is
contained and reported once, and the call goes on unguarded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otel_agentguard import _internal_errors
from otel_agentguard.attributes import OUTPUT_REPETITION_PROBE
from otel_agentguard.errors import AgentStopped
from otel_agentguard.history import answered_tool_call_ids
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.steps import Step
from otel_agentguard.live import registry as _registry
from otel_agentguard.live.enforcer import Intervention
from otel_agentguard.live.providers import sdk_provider

if TYPE_CHECKING:
    from otel_agentguard.live.processor import AgentGuardSpanProcessor


class GuardRef:
    """Which guard processor a wrapper reports to (see the module docstring for the choice)."""

    __slots__ = ("_explicit", "_provider")

    def __init__(self, guard: AgentGuardSpanProcessor | None = None, tracer_provider: Any = None):
        self._explicit = guard
        self._provider = sdk_provider(tracer_provider) if tracer_provider is not None else None

    def processor(self) -> AgentGuardSpanProcessor | None:
        explicit = self._explicit
        if explicit is not None and not explicit.shut_down:
            return explicit
        return _registry.choose(self._provider)

    @property
    def policy(self) -> Policy:
        chosen = self.processor()
        return chosen.policy if chosen is not None else _registry.environment_policy()

    def _enforcing(self) -> AgentGuardSpanProcessor | None:
        if not _registry.any_enforcing:  # observe mode everywhere (the usual case): nothing to choose
            return None
        chosen = self.processor()
        return chosen if chosen is not None and chosen.mode == "enforce" else None

    # --- the enforcement hooks (observe mode: each returns at once) -----------------------------
    def before_tool_call(self, args_fingerprint: str | None, session_id: str | None = None) -> Intervention | None:
        """The result to give instead of running a tool call that repeats a stall, or None."""
        guard = self._enforcing()
        if guard is None:
            return None
        try:
            return guard.before_tool_call(args_fingerprint, session_id)
        except Exception as exc:  # deliberate: a broken guard lets the call run
            _internal_errors.report("enforce.before_tool", exc)
            return None

    def before_model_call(self, session_id: str | None = None,
                          answered_ids: frozenset[str] | None = None, *, history: Any = None) -> str | None:
        """Raises :class:`AgentStopped` when a stop is due at this cut point; else the
        remaining-budget note for the model, when the policy asks for one.

        ``history``: the request's messages, whose answered tool call ids are read only
        here, in enforce mode (a long history is not walked for nothing in observe mode)."""
        guard = self._enforcing()
        if guard is None:
            return None
        try:
            if answered_ids is None and history is not None:
                answered_ids = answered_tool_call_ids(history)
            return guard.before_model_call(session_id, answered_ids)
        except AgentStopped:
            raise
        except Exception as exc:  # deliberate
            _internal_errors.report("enforce.before_model", exc)
            return None

    def after_model_call(self, session_id: str | None = None, tool_calls: int | None = None,
                         call_ids: tuple[str, ...] = ()) -> None:
        """Raises :class:`AgentStopped` instead of delivering an answer the guard refuses."""
        guard = self._enforcing()
        if guard is None:
            return
        try:
            guard.after_model_call(session_id, tool_calls, call_ids)
        except AgentStopped:
            raise
        except Exception as exc:  # deliberate
            _internal_errors.report("enforce.after_model", exc)

    def cuts_repeating_output(self) -> bool:
        """Whether a stream that repeats itself is closed at the alert: an enforce-mode guard
        whose ``output_repetition`` ladder starts with ``stop``."""
        guard = self._enforcing()
        if guard is None:
            return False
        ladder = guard.policy.escalation.get(OUTPUT_REPETITION_PROBE, ("stop",))
        return bool(ladder) and ladder[0] == "stop"

    def stop_repeating_output(self, session_id: str | None, step: Step) -> None:
        """For a stream inside a model span another instrumentation owns: judge its repetition
        now and raise :class:`AgentStopped` when the ladder says stop."""
        guard = self._enforcing()
        if guard is None:
            return
        try:
            guard.stop_repeating_output(session_id, step)
        except AgentStopped:
            raise
        except Exception as exc:  # deliberate
            _internal_errors.report("enforce.repeating_output", exc)

    def review_answer(self, session_id: Any, sequence: Any, review: Any, held: Any = None) -> None:
        """A final answer the rules could not read, or decided by inference (``held``: their
        categories and rule), is being judged by the policy's model judge (``review``, a
        future): the session's end takes its verdict into account."""
        guard = self.processor()
        if guard is None:
            return
        try:
            guard.review_answer(session_id, sequence, review, held)
        except Exception as exc:  # deliberate
            _internal_errors.report("claims.review", exc)


#: The guard of the process, for callers no instrumentation handed one (``@ag.tool``,
#: hand-written integrations through :mod:`otel_agentguard.live.hooks`).
PROCESS_GUARD = GuardRef()
