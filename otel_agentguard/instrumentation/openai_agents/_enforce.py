"""Enforce mode for Agents SDK function tools: a call that repeats a stall is answered by the guard.

The SDK's tracing interface can watch a tool call but not replace its result,
so this one path patches the function the run loop calls to invoke a function
tool (``agents.run_internal.tool_execution._invoke_function_tool_with_metadata``,
private: if a release renames it, the patch is skipped and logged once, and
observing still works). In observe mode it calls straight through.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from opentelemetry import trace

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.instrumentation._base import InstrumentationContext
from otel_agentguard.live.guard_ref import GuardRef

TARGET_MODULE = "agents.run_internal.tool_execution"
TARGET_NAME = "_invoke_function_tool_with_metadata"


def invoke_function_tool(context: InstrumentationContext) -> Callable[..., Any]:
    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        answer = _intervention(context.guard, kwargs)
        if answer is None:
            return await wrapped(*args, **kwargs)
        from agents.tool import _FunctionToolInvocationResult

        return _FunctionToolInvocationResult(answer)

    return wrapper


def _intervention(guard: GuardRef, kwargs: dict[str, Any]) -> str | None:
    try:
        tool = kwargs.get("function_tool")
        name = str(getattr(tool, "name", "") or "")
        raw = kwargs.get("arguments")
        try:
            arguments = json.loads(raw) if isinstance(raw, str) and raw else {}
        except ValueError:
            arguments = raw
        fingerprint = guard.policy.fingerprinter(name).arguments(arguments).fingerprint
        # Our execute_tool span for this call is current while the SDK runs the tool.
        span = trace.get_current_span()
        session_id = (getattr(span, "attributes", None) or {}).get(A.SESSION_ID)
        intervention = guard.before_tool_call(fingerprint, session_id)
        if intervention is None:
            return None
        if span.is_recording():
            span.set_attribute(A.INTERVENTION, intervention.probe)
        return intervention.message
    except Exception as exc:  # deliberate: a broken guard lets the tool run
        _internal_errors.report("openai_agents.intervene", exc)
        return None
