"""The Agents SDK ``TracingProcessor`` that mirrors a run as judged OpenTelemetry spans.

Mapping (SDK trace item -> OpenTelemetry span):

* trace (one ``Runner.run``, or the user's ``with trace(...)`` around several)
  -> the session: ``invoke_agent {first agent}`` with ``agentguard.session.id``
  = the trace's ``group_id``, else a baggage session id, else the SDK trace id.
  Inside an active ``otel_agentguard.session()`` no session span is made: the
  steps join that session.
* ``FunctionSpanData`` -> ``execute_tool {name}`` with fingerprints, argument
  keys and size, and the effect from the policy's tool contract.
* ``GenerationSpanData`` / ``ResponseSpanData`` -> ``chat {model}`` with usage,
  finish reasons, the number of tool calls asked for and a final answer's claims.
* agent, task, turn and other SDK spans -> no span of their own; the agent's
  name goes on the steps under it as ``gen_ai.agent.name``.

OpenTelemetry spans start when the SDK span starts (sequence numbers are given
at span start) and end when it ends. While a model or tool span is open it is
also the *current* OpenTelemetry span, exactly as long as the SDK keeps its
own span current: spans made inside (the HTTP call, the user's own spans in a
tool) nest under it, and a provider instrumentation that uses
``ModelCall`` (``agentguard_openai``) sees an open model span and enriches it
instead of making a second model step for the same request.

Threading contract (the SDK's): every callback runs synchronously on the
thread and in the ``contextvars`` context of the code that starts or ends the
SDK span. The SDK catches exceptions from processors, but logs them as errors
of the run: ours are caught here, reported once, and never reach it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from contextvars import Token
from typing import Any

from agents.tracing import (
    AgentSpanData,
    FunctionSpanData,
    GenerationSpanData,
    GuardrailSpanData,
    ResponseSpanData,
    TracingProcessor,
    get_current_trace,
)
from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.config import capture_content, instrumentation_suppressed
from otel_agentguard.instrumentation._model_call import response_attributes
from otel_agentguard.instrumentation._tool_span import tool_result_attributes, tool_start_attributes
from otel_agentguard.instrumentation.openai_agents import _extract
from otel_agentguard.judge import _ranges
from otel_agentguard.judge.policy import Policy
from otel_agentguard.live import registry as _registry
from otel_agentguard.live.guard_ref import PROCESS_GUARD, GuardRef
from otel_agentguard.live.resolution import baggage_session, enclosing_session

logger = logging.getLogger(__name__)

PROVIDER = "openai"
# Low-cardinality ``error.type`` values: the SDK records errors as a message
# (often user text) without the exception's type.
TOOL_ERROR = "tool_error"
MODEL_ERROR = "model_error"
RUN_ERROR = "agent_error"
GUARDRAIL_TRIPPED = "guardrail_tripwire"

# Bounds for runs and spans whose end never comes (a leaked span, a resumed
# run's trace, which the SDK never ends): the oldest are forgotten.
_MAX_OPEN_TRACES = 10_000
_MAX_OPEN_SPANS = 50_000

_AGENT, _TOOL, _MODEL, _GUARDRAIL, _OTHER = "agent", "tool", "model", "guardrail", "other"


class _Run:
    """One SDK trace: its session id and session span (None when joining an ``ag.session``)."""

    __slots__ = ("session_id", "span", "context", "token", "error_type", "model_failed", "named")

    def __init__(self, session_id: str | None, span: Span | None, ctx: context.Context):
        self.session_id = session_id
        self.span = span
        self.context = ctx  # parent context of the run's top-level steps
        self.token: Token[Context] | None = None
        self.error_type: str | None = None  # an agent run failed or a guardrail tripped
        self.model_failed = False  # the latest model call failed (a retried success clears it)
        self.named = False


class _Node:
    """One open SDK span: the OpenTelemetry span mirroring it, if any."""

    __slots__ = ("run", "kind", "span", "context", "token", "agent_name")

    def __init__(self, run: _Run, kind: str, span: Span | None, ctx: context.Context, agent_name: str | None):
        self.run = run
        self.kind = kind
        self.span = span
        self.context = ctx  # parent context for the SDK span's children
        self.token: Token[Context] | None = None
        self.agent_name = agent_name


class GuardTracingProcessor(TracingProcessor):
    """Receives the Agents SDK's trace events and writes the guard's spans.

    Longer than most classes here because it implements the SDK's whole
    ``TracingProcessor`` interface (traces and spans, start and end) over one lock
    and two bounded maps; each method is short.

    Args:
        tracer: the tracer of the instrumentor (its provider carries the guard).
        guard: the guard the instrumentor reports to (its policy fingerprints the tools).
    """

    def __init__(self, tracer: trace.Tracer, guard: GuardRef | None = None):
        self._tracer = tracer
        self._guard = guard if guard is not None else PROCESS_GUARD
        self._lock = threading.Lock()
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._nodes: OrderedDict[str, _Node] = OrderedDict()
        self._enabled = True

    def disable(self) -> None:
        """Start nothing new; runs already in flight still end their spans cleanly."""
        self._enabled = False

    # --- TracingProcessor ----------------------------------------------------------------
    def on_trace_start(self, sdk_trace: Any) -> None:
        if not self._enabled or instrumentation_suppressed():
            return
        try:
            self._trace_started(sdk_trace)
        except Exception as exc:  # deliberate: never break the user's run
            _internal_errors.report("openai_agents.trace_start", exc)

    def on_trace_end(self, sdk_trace: Any) -> None:
        try:
            self._trace_ended(sdk_trace)
        except Exception as exc:  # deliberate
            _internal_errors.report("openai_agents.trace_end", exc)

    def on_span_start(self, sdk_span: Any) -> None:
        if not self._enabled or instrumentation_suppressed():
            return
        try:
            self._span_started(sdk_span)
        except Exception as exc:  # deliberate
            _internal_errors.report("openai_agents.span_start", exc)

    def on_span_end(self, sdk_span: Any) -> None:
        try:
            self._span_ended(sdk_span)
        except Exception as exc:  # deliberate
            _internal_errors.report("openai_agents.span_end", exc)

    def shutdown(self) -> None:
        """Nothing to flush: spans go through the OpenTelemetry provider's own processors."""

    def force_flush(self) -> None:
        """Nothing to flush: see :meth:`shutdown`."""

    # --- traces: the session ------------------------------------------------------------------
    def _trace_started(self, sdk_trace: Any) -> None:
        trace_id = getattr(sdk_trace, "trace_id", None)
        if not trace_id:
            return
        parent = context.get_current()
        if enclosing_session(parent) is not None:
            run = _Run(None, None, parent)  # steps join the active ag.session(); it owns the verdict
        else:
            group_id = getattr(sdk_trace, "group_id", None)
            session_id = str(group_id or baggage_session(parent) or trace_id)
            attributes: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.SESSION_ID: session_id}
            if group_id:
                attributes[A.GEN_AI_CONVERSATION_ID] = str(group_id)
            span = self._tracer.start_span(
                A.OP_INVOKE_AGENT, context=parent, kind=SpanKind.INTERNAL, attributes=attributes
            )
            run = _Run(session_id, span, trace.set_span_in_context(span, parent))
            # Current while the run goes on (the SDK keeps its trace current just as
            # long), so spans made outside any step still join the session.
            run.token = context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._runs[trace_id] = run
            while len(self._runs) > _MAX_OPEN_TRACES:
                self._runs.popitem(last=False)

    def _trace_ended(self, sdk_trace: Any) -> None:
        with self._lock:
            run = self._runs.pop(getattr(sdk_trace, "trace_id", None) or "", None)
        if run is None or run.span is None:
            return
        span = run.span
        error_type = run.error_type or (MODEL_ERROR if run.model_failed else None)
        if _stopped_by_guard(run):
            error_type = None  # AgentStopped: how the guard meant the run to end, not a failure
        try:
            if error_type is not None:
                span.set_status(Status(StatusCode.ERROR))
                span.set_attribute(A.ERROR_TYPE, error_type)
            # As otel_agentguard.session does: the verdict goes on the span while it can take it.
            for processor in _registry.processors():
                # The SDK's span behind the API type the tracer returns.
                processor.end_session(span, error=error_type is not None)  # type: ignore[arg-type]
        finally:
            span.end()
            _detach(run.token, span)

    def _run_for(self, sdk_span: Any) -> _Run:
        """The run of a span; a run the SDK never announced (a resumed run's trace) is made here."""
        trace_id = sdk_span.trace_id
        with self._lock:
            run = self._runs.get(trace_id)
        if run is not None:
            return run
        parent = context.get_current()
        if enclosing_session(parent) is not None:
            run = _Run(None, None, parent)
        else:
            current = get_current_trace()
            group_id = getattr(current, "group_id", None) if getattr(current, "trace_id", None) == trace_id else None
            # No session span: the processor ends this session at its final answer.
            run = _Run(str(group_id or baggage_session(parent) or trace_id), None, parent)
        with self._lock:
            run = self._runs.setdefault(trace_id, run)
            while len(self._runs) > _MAX_OPEN_TRACES:
                self._runs.popitem(last=False)
        return run

    # --- spans: the steps -----------------------------------------------------------------------
    def _span_started(self, sdk_span: Any) -> None:
        data = sdk_span.span_data
        run = self._run_for(sdk_span)
        with self._lock:
            parent = self._nodes.get(sdk_span.parent_id) if sdk_span.parent_id else None
        parent_ctx = parent.context if parent is not None else run.context
        agent_name = parent.agent_name if parent is not None else None

        if isinstance(data, AgentSpanData):
            agent_name = str(data.name)
            if run.span is not None and not run.named:
                run.named = True
                run.span.update_name(f"{A.OP_INVOKE_AGENT} {agent_name}")
                run.span.set_attribute(A.GEN_AI_AGENT_NAME, agent_name)
            node = _Node(run, _AGENT, None, parent_ctx, agent_name)
        elif isinstance(data, FunctionSpanData):
            node = self._start_step(run, _TOOL, data, parent_ctx, agent_name)
        elif isinstance(data, (GenerationSpanData, ResponseSpanData)):
            node = self._start_step(run, _MODEL, data, parent_ctx, agent_name)
        elif isinstance(data, GuardrailSpanData):
            node = _Node(run, _GUARDRAIL, None, parent_ctx, agent_name)
        else:  # task, turn, handoff, custom, ...: children hang on to the nearest mirrored ancestor
            node = _Node(run, _OTHER, None, parent_ctx, agent_name)

        evicted = []
        with self._lock:
            self._nodes[sdk_span.span_id] = node
            while len(self._nodes) > _MAX_OPEN_SPANS:
                evicted.append(self._nodes.popitem(last=False)[1])
        for old in evicted:
            if old.span is not None:
                old.span.end()

    def _start_step(
        self, run: _Run, kind: str, data: Any, parent_ctx: context.Context, agent_name: str | None
    ) -> _Node:
        if kind == _TOOL:
            name = str(data.name)
            attributes: dict[str, Any] = {
                A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
                A.GEN_AI_TOOL_NAME: name,
                "gen_ai.tool.type": "function",
            }
            # Arguments arrive after the SDK span starts: fingerprints are added at its end.
            effect = self._guard.policy.effect(name, None)
            if effect:
                attributes[A.TOOL_EFFECT] = effect
            span_name = f"{A.OP_EXECUTE_TOOL} {name}"
            span_kind = SpanKind.INTERNAL
        else:
            model = getattr(data, "model", None)  # ResponseSpanData learns its model at the end
            attributes = {
                A.GEN_AI_OPERATION_NAME: "chat",
                A.GEN_AI_PROVIDER_NAME: PROVIDER,
            }
            if model:
                attributes[A.GEN_AI_REQUEST_MODEL] = str(model)
            span_name = f"chat {model}" if model else "chat"
            span_kind = SpanKind.CLIENT
        if run.session_id is not None:
            attributes[A.SESSION_ID] = run.session_id
        if agent_name:
            attributes[A.GEN_AI_AGENT_NAME] = agent_name
        span = self._tracer.start_span(
            span_name, context=_parent_context(parent_ctx), kind=span_kind, attributes=attributes
        )
        node = _Node(run, kind, span, trace.set_span_in_context(span, parent_ctx), agent_name)
        # Current for as long as the SDK keeps its own span current (a ``with`` block
        # around the model call or tool body), so provider and user spans nest under it.
        node.token = context.attach(trace.set_span_in_context(span))
        return node

    def _span_ended(self, sdk_span: Any) -> None:
        with self._lock:
            node = self._nodes.pop(sdk_span.span_id, None)
        if node is None:
            return
        error = getattr(sdk_span, "error", None)
        if node.kind == _AGENT:
            if error and node.run.error_type is None:
                node.run.error_type = RUN_ERROR
            return
        if node.kind == _GUARDRAIL:
            if getattr(sdk_span.span_data, "triggered", False) and node.run.error_type is None:
                node.run.error_type = GUARDRAIL_TRIPPED  # the run ends with the SDK's tripwire exception
            return
        span = node.span
        if span is None:
            return
        try:
            if span.is_recording():
                if node.kind == _TOOL:
                    _finish_tool(span, sdk_span.span_data, self._guard.policy)
                else:
                    _finish_model(span, sdk_span.span_data, self._guard.policy)
                    node.run.model_failed = bool(error) and not _stopped_by_guard(node.run)
                if error and not (node.kind == _MODEL and _stopped_by_guard(node.run)):
                    message = error.get("message") if isinstance(error, dict) else None
                    # The SDK's message may quote arguments or the user's text.
                    span.set_status(Status(StatusCode.ERROR, str(message) if message and capture_content() else None))
                    span.set_attribute(A.ERROR_TYPE, TOOL_ERROR if node.kind == _TOOL else MODEL_ERROR)
        finally:
            span.end()
            _detach(node.token, span)


def _finish_tool(span: Span, data: Any, policy: Policy) -> None:
    raw = getattr(data, "input", None)
    if raw is None:
        # The run has trace_include_sensitive_data off: the SDK shows no processor the
        # arguments or the result, so this step has no fingerprints (it matches no other call).
        return
    name = str(data.name)
    attributes = tool_start_attributes(name, _extract.tool_arguments(raw), policy)
    attributes.update(tool_result_attributes(name, getattr(data, "output", None), policy))
    span.set_attributes(attributes)


def _finish_model(span: Span, data: Any, policy: Policy) -> None:
    input_tokens, output_tokens = _extract.usage(data)
    result = _extract.model_result(data)
    if result is not None:
        result.input_tokens = input_tokens
        result.output_tokens = output_tokens
        attributes = response_attributes(result, policy)
        model = result.response_model
    else:
        # Shape of the answer unknown: set only what is known, and leave finish reasons
        # and tool calls to an enclosing instrumentation that saw the response (ModelCall).
        attributes = {}
        input_tokens = _ranges.live_count(input_tokens)
        if input_tokens is not None:
            attributes[A.GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
        output_tokens = _ranges.live_count(output_tokens)
        if output_tokens is not None:
            attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] = output_tokens
        model, response_id = _extract.response_model(data)
        if model:
            attributes[A.GEN_AI_RESPONSE_MODEL] = model
        if response_id:
            attributes["gen_ai.response.id"] = response_id
    if model and A.GEN_AI_REQUEST_MODEL not in (getattr(span, "attributes", None) or {}):
        span.update_name(f"chat {model}")
    prompt = getattr(data, "input", None)
    if prompt is not None and capture_content():
        attributes["gen_ai.input.messages"] = _json(prompt)
    span.set_attributes(attributes)


def _stopped_by_guard(run: _Run) -> bool:
    """Whether the guard raised ``AgentStopped`` into this run (enforce mode, through a
    provider instrumentation's cut point): it marks the session span ``agentguard.enforced``."""
    session_span = run.span if run.span is not None else trace.get_current_span(run.context)
    return bool((getattr(session_span, "attributes", None) or {}).get(A.ENFORCED))


def _parent_context(mapped: context.Context) -> context.Context:
    """The current context when its span is in the same trace as the SDK parent's span
    (it may be a user's span in between), else the SDK parent's context."""
    current = context.get_current()
    here = trace.get_current_span(current).get_span_context()
    there = trace.get_current_span(mapped).get_span_context()
    if here.is_valid and (not there.is_valid or here.trace_id == there.trace_id):
        return current
    return mapped


def _detach(token: Token[Context] | None, span: Span) -> None:
    """Undo an attach, but only where it is still ours to undo.

    The SDK may end a span from another task (an abandoned stream finalised
    elsewhere); then the token belongs to a context that is not current, and
    resetting it would raise. The SDK skips its own reset in that case too.
    """
    if token is None or trace.get_current_span() is not span:
        return
    context.detach(token)



def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:  # deliberate: capture is best effort
        return f"<{type(value).__name__}>"
