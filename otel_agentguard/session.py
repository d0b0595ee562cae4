"""``otel_agentguard.session()``: one agent run as one judged session.

::

    with ag.session("sess-42", profile="default", agent_name="support") as s:
        ...                       # every span inside carries agentguard.session.id
    print(s.verdict.stop_reason)  # when a guard processor is installed

Also ``async with``. The session is an ``invoke_agent`` span (GenAI semantic
conventions); on exit the guard stamps its verdict on that span before it
ends, and an exception that leaves the block marks the session ``error``
(unless a probe already explained it) and propagates unchanged.
"""

from __future__ import annotations

import uuid
from types import TracebackType
from typing import Any

from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.config import capture_content
from otel_agentguard.errors import AgentStopped
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.live import registry as _registry
from otel_agentguard.live._context import SessionContext, with_session
from otel_agentguard.live.providers import GuardTracer, warn_once


class session:  # noqa: N801 - used like a function: ``with ag.session(...)``
    """A judged agent session (sync and async context manager).

    Args:
        session_id: stable id of the session; a random one by default.
        profile: profile of the policy to judge it with (default: the policy's).
        agent_name: ``gen_ai.agent.name`` of the session span.
        task_type: picks the profile through the policy's ``[task_types]`` table.
        tracer_provider: provider of the session span; default the provider of the
            most recent ``otel_agentguard.install()``, else the global one.
        attributes: extra attributes for the session span.
    """

    def __init__(
        self,
        session_id: str | None = None,
        *,
        profile: str | None = None,
        agent_name: str | None = None,
        task_type: str | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        attributes: dict[str, Any] | None = None,
    ):
        self.session_id = str(session_id) if session_id else uuid.uuid4().hex
        self.profile = profile
        self.agent_name = agent_name
        self.task_type = task_type
        self.verdict: Verdict | None = None
        self.span: trace.Span | None = None
        self._tracer_provider = tracer_provider
        self._attributes = attributes or {}
        self._token: object | None = None

    # --- sync ------------------------------------------------------------------------------
    def __enter__(self) -> session:
        attributes: dict[str, Any] = {
            **self._attributes,
            A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
            A.SESSION_ID: self.session_id,
        }
        if self.agent_name:
            attributes[A.GEN_AI_AGENT_NAME] = self.agent_name
        if self.profile:
            attributes[A.PROFILE] = self.profile
        if self.task_type:
            attributes[A.TASK_TYPE] = self.task_type
        name = f"{A.OP_INVOKE_AGENT} {self.agent_name}" if self.agent_name else A.OP_INVOKE_AGENT
        tracer = GuardTracer(self._tracer_provider, "ag.session").get()
        self.span = tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attributes)
        ctx = trace.set_span_in_context(self.span)
        ctx = with_session(SessionContext(self.session_id, self.profile, self.task_type), ctx)
        self._token = context.attach(ctx)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        span = self.span
        try:
            if span is not None:
                # A stop by the guard or an interrupt is how the session was meant to end, not an error.
                failed = exc is not None and not isinstance(exc, AgentStopped)
                if failed:
                    span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                    span.set_attribute(A.ERROR_TYPE, type(exc).__qualname__)
                    _record_exception(span, exc)  # type: ignore[arg-type]
                processors = _registry.processors()
                for processor in processors:
                    verdict = processor.end_session(span, error=failed)  # type: ignore[arg-type]
                    if verdict is not None:
                        self.verdict = verdict
                if not processors and span.is_recording():
                    warn_once("session:no-guard", "otel_agentguard: ag.session %r is traced but not judged "
                              "(its verdict stays None): no guard is installed (under opentelemetry-instrument, an "
                              "earlier line says why; in code, call otel_agentguard.install())",
                              self.session_id)
        except Exception as failure:  # deliberate: ending a session never raises into the agent
            _internal_errors.report("session.exit", failure)
        finally:
            if span is not None:
                span.end()
            if self._token is not None:
                context.detach(self._token)  # type: ignore[arg-type]
                self._token = None

    # --- async -----------------------------------------------------------------------------
    async def __aenter__(self) -> session:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, traceback)


def _record_exception(span: trace.Span, exc: BaseException) -> None:
    """The exception event, with content capture on only (its message may quote private
    data); a message that cannot be printed loses the event, never the verdict."""
    try:
        if capture_content():
            span.record_exception(exc)
    except Exception as failure:  # deliberate: str(exc) of a hostile exception may raise
        _internal_errors.report("session.exception_event", failure)
