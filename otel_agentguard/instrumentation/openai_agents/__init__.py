"""OpenAI Agents SDK instrumentation: each agent run as one judged session.

Uses the SDK's own tracing interface: a ``TracingProcessor`` added with
``agents.add_trace_processor`` beside the application's processors (never
replacing them), removed again by ``uninstrument()``. Nothing in the SDK is
patched except ``DefaultTraceProvider.set_processors``, so that an application
calling ``set_trace_processors([...])`` (to stop the export to OpenAI) keeps
the guard.

What becomes a span:

* the run (an SDK trace: one ``Runner.run`` / ``run_sync`` / ``run_streamed``,
  or a ``with agents.trace(...)`` block around several) is the session, an
  ``invoke_agent {agent}`` span with ``agentguard.session.id`` = the run's
  ``group_id`` (``RunConfig(group_id=...)``, the conversation), else a session
  id from OpenTelemetry baggage, else the SDK trace id. The verdict
  (``agentguard.stop_reason``, totals, one ``agentguard.stall`` event per
  alert) is stamped on it before it ends. Inside ``otel_agentguard.session()``
  no second session span is made: the run's steps join that session;
* every tool call the SDK runs (function tools, MCP server tools, computer and
  shell tools) is an ``execute_tool {name}`` span with
  ``agentguard.tool.args.fingerprint``, ``.keys``, ``.size``,
  ``agentguard.tool.result.fingerprint`` and ``agentguard.tool.effect`` (from
  the policy's ``[tools.<name>]`` contract); handoffs are not tool steps;
* every model call (chat completions or responses, streamed or not) is a
  ``chat {model}`` span with token usage, finish reasons,
  ``agentguard.response.tool_calls`` and, for a final answer,
  ``agentguard.final.claims`` (found in process: the answer text stays there);
* an SDK span with an error gets status ERROR and ``error.type``
  (``tool_error``, ``model_error``; the session ``agent_error`` or
  ``guardrail_tripwire``), and a failed run ends ``error`` unless a probe
  explained it first.

Raw arguments, results, prompts and answers go on spans only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

With ``agentguard_openai`` also active, the SDK's OpenAI calls are seen twice;
the model span made here is the current span while the SDK calls OpenAI, so
the OpenAI instrumentation enriches it instead of adding a second model step.

Enforce mode: a processor cannot raise into the run (the SDK catches what
processors raise), so stops happen at the model-call cut points of
``agentguard_openai``, which finds the session through the model span made
here; a stop ends the session span with the probe as its stop reason, not as
an error. Tool-call interventions are not available for SDK tools.

Limits: the SDK hands processors tool arguments, results and model outputs
only while the run's ``trace_include_sensitive_data`` is on (its default;
``OPENAI_AGENTS_TRACE_INCLUDE_SENSITIVE_DATA``). Off, tool spans have no
fingerprints (loops and cycles go unseen) and model spans no finish reasons
unless ``agentguard_openai`` enriches them. ``agents.set_tracing_disabled(True)``
(or ``OPENAI_AGENTS_DISABLE_TRACING=1``, or ``RunConfig(tracing_disabled=True)``)
turns the SDK's tracing off for every processor, this one included.

Usage::

    from otel_agentguard.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)  # default: the global one

Turn it off with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentguard_openai_agents``
or ``OpenAIAgentsInstrumentor().uninstrument()``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from otel_agentguard.instrumentation._base import GuardInstrumentor, InstrumentationContext, PatchTarget
from otel_agentguard.instrumentation.openai_agents import _enforce, _registration
from otel_agentguard.instrumentation.openai_agents.package import _instruments


def _keep_registered(context: InstrumentationContext) -> Callable[..., Any]:
    return _registration.keep_registered


class OpenAIAgentsInstrumentor(GuardInstrumentor):
    """Judges OpenAI Agents SDK runs through the SDK's tracing-processor interface."""

    instruments = _instruments
    targets = (
        PatchTarget("agents.tracing.provider", "DefaultTraceProvider.set_processors", _keep_registered),
        PatchTarget(_enforce.TARGET_MODULE, _enforce.TARGET_NAME, _enforce.invoke_function_tool),
    )

    @property
    def name(self) -> str:  # the tracer scope: otel_agentguard.instrumentation.openai_agents
        return "openai_agents"

    def _instrument_extra(self, context: InstrumentationContext) -> None:
        _registration.register(context.tracer, context.guard)

    def _uninstrument_extra(self) -> None:
        _registration.unregister()


__all__ = ["OpenAIAgentsInstrumentor"]
