"""Attributes of an ``execute_tool`` span, shared by the decorator and every instrumentation.

Raw arguments and results go on the span only when content capture is on;
fingerprints, argument keys and sizes always do.
"""

from __future__ import annotations

import json
from typing import Any

from opentelemetry.trace import Span

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.config import capture_content
from otel_agentguard.judge.fingerprints.canonical import is_empty
from otel_agentguard.judge.policy import Policy
from otel_agentguard.live.enforcer import Intervention
from otel_agentguard.live.guard_ref import PROCESS_GUARD, GuardRef

_MAX_CAPTURED_CHARS = 64 * 1024


def tool_start_attributes(
    name: str,
    arguments: Any,
    policy: Policy,
    *,
    effect: str | None = None,
    call_id: str | None = None,
    declared: frozenset[str] | None = None,
) -> dict[str, Any]:
    """``declared``: the tool's parameter names, when known; only those are exported as
    argument keys (a ``**kwargs`` key may be anything, an e-mail address or a secret)."""
    fingerprint = policy.fingerprinter(name).arguments(arguments)
    keys = [key for key in fingerprint.keys if (key in declared if declared is not None else _plain_name(key))]
    attributes: dict[str, Any] = {
        A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
        A.GEN_AI_TOOL_NAME: name,
        A.TOOL_ARGS_FINGERPRINT: fingerprint.fingerprint,
        A.TOOL_ARGS_KEYS: keys,
        A.TOOL_ARGS_SIZE: fingerprint.size,
    }
    if len(keys) < len(fingerprint.keys):
        attributes[A.TOOL_ARGS_UNDECLARED_KEYS] = len(fingerprint.keys) - len(keys)
    if fingerprint.opaque:
        attributes[A.TOOL_ARGS_OPAQUE] = True
    chosen = policy.effect(name, effect)
    if chosen:
        attributes[A.TOOL_EFFECT] = chosen
    if call_id:
        attributes[A.GEN_AI_TOOL_CALL_ID] = call_id
    if capture_content():
        attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS] = _as_text(arguments)
    return attributes


_MAX_KEY_CHARS = 64


def _plain_name(key: str) -> bool:
    """An argument name as a schema would declare it; other keys are counted, not exported."""
    return len(key) <= _MAX_KEY_CHARS and key.isidentifier()


def tool_result_attributes(name: str, result: Any, policy: Policy) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        A.TOOL_RESULT_FINGERPRINT: policy.fingerprinter(name).result(result),
        A.TOOL_RESULT_EMPTY: is_empty(result),
    }
    if capture_content():
        attributes[A.GEN_AI_TOOL_CALL_RESULT] = _as_text(result)
    return attributes


def intervene(span: Span, name: str, policy: Policy, guard: GuardRef | None = None) -> Intervention | None:
    """Enforce mode: if the call on ``span`` would repeat a stall, end the span with the
    guard's message as its result and return the intervention (the call must not run).
    ``guard``: the instrumentation's; None for the process's (``@ag.tool``)."""
    try:
        attrs = getattr(span, "attributes", None) or {}
        intervention = (guard or PROCESS_GUARD).before_tool_call(attrs.get(A.TOOL_ARGS_FINGERPRINT),
                                                                 attrs.get(A.SESSION_ID))
        if intervention is not None:
            record_intervention(span, name, intervention, policy)
        return intervention
    except Exception as exc:  # deliberate: a broken guard lets the call run
        _internal_errors.report("tool.intervene", exc)
        return None


def record_intervention(span: Span, name: str, intervention: Intervention, policy: Policy) -> None:
    """End a tool span the guard answered: the message is its result."""
    span.set_attributes(
        {A.INTERVENTION: intervention.probe, **tool_result_attributes(name, intervention.message, policy)})
    span.end()


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
        except Exception:  # deliberate: capture is best effort, the call goes on
            text = f"<{type(value).__name__}>"
    return text[:_MAX_CAPTURED_CHARS]
