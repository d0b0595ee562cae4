"""Helpers for testing agents and policies with the guard (public, like the SDK's in-memory exporter).

::

    from otel_agentguard.testing import GuardedTracing

    with GuardedTracing(policy="policy.toml") as tracing:
        with tracing.session("s1"):
            run_my_agent()
        assert tracing.verdict("s1").stop_reason == "completed"
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import Policy
from otel_agentguard.judge.repetition import summarize
from otel_agentguard.judge.session_judge import Verdict
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.session import session as _session


class GuardedTracing:
    """A private SDK TracerProvider and MeterProvider with the guard and in-memory exporters.

    Nothing global is touched: spans go through ``tracing.tracer`` and
    ``tracing.session(...)``.
    """

    def __init__(self, policy: Policy | str | os.PathLike[str] | None = None, mode: str = "observe", **options: Any):
        self.exporter = InMemorySpanExporter()
        self.metric_reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metric_reader])
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.processor = AgentGuardSpanProcessor(
            policy, mode, tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **options
        )
        self.tracer_provider.add_span_processor(self.processor)
        self.tracer = self.tracer_provider.get_tracer("otel_agentguard.testing")
        self.verdicts: dict[str, Verdict] = {}

    def __enter__(self) -> GuardedTracing:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    def session(self, session_id: str | None = None, **kwargs: Any) -> _session:
        return _RecordingSession(self, session_id, tracer_provider=self.tracer_provider, **kwargs)

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()

    def session_span(self, session_id: str) -> ReadableSpan:
        """The finished ``invoke_agent`` span, or the ``agentguard.verdict`` span, of a session."""
        for span in self.spans():
            attrs = span.attributes or {}
            if attrs.get(A.SESSION_ID) == session_id and (
                attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT or attrs.get(A.VERDICT)
            ):
                return span
        raise KeyError(f"no session span or verdict span for session {session_id!r}")

    def verdict(self, session_id: str) -> Verdict:
        return self.verdicts[session_id]

    def metric_points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, point)`` for every data point of metric ``name``."""
        data = self.metric_reader.get_metrics_data()
        points: list[tuple[dict[str, Any], Any]] = []
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    if metric.name == name:
                        points.extend((dict(p.attributes or {}), p) for p in metric.data.data_points)
        return points

    def record_model_call(self, **kwargs: Any) -> None:
        """A ``chat`` span as a GenAI instrumentation would write it; see :func:`record_model_call`."""
        record_model_call(self.tracer, **kwargs)


class _RecordingSession(_session):
    def __init__(self, tracing: GuardedTracing, session_id: str | None, **kwargs: Any):
        super().__init__(session_id, **kwargs)
        self._tracing = tracing

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        super().__exit__(exc_type, exc, tb)
        if self.verdict is not None:
            self._tracing.verdicts[self.session_id] = self.verdict


def record_model_call(
    tracer: trace.Tracer,
    *,
    model: str = "gpt-4o",
    input_tokens: int = 0,
    output_tokens: int = 0,
    tool_calls: int = 0,
    final_claims: tuple[str, ...] | None = None,
    finish_reason: str | None = None,
    answer: str | None = None,
    agent: str | None = None,
) -> None:
    """Emit one ``chat`` span: a final answer when ``tool_calls`` is 0, else a tool-calling turn.
    ``agent``: the agent whose call it is (``gen_ai.agent.name``), in a multi-agent session.

    ``answer``: the answer's text, checked for repetition as the instrumentations check it
    (``agentguard.output.repetition``); the text itself goes on no span.
    """
    reason = finish_reason or ("tool_calls" if tool_calls else "stop")
    attributes: dict[str, Any] = {
        A.GEN_AI_OPERATION_NAME: "chat",
        A.GEN_AI_REQUEST_MODEL: model,
        A.GEN_AI_RESPONSE_MODEL: model,
        A.GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
        A.GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
        A.GEN_AI_RESPONSE_FINISH_REASONS: [reason],
        A.RESPONSE_TOOL_CALLS: tool_calls,
    }
    if final_claims is not None:
        attributes[A.FINAL_CLAIMS] = list(final_claims)
    if answer is not None:
        attributes[A.OUTPUT_REPETITION] = summarize(answer).attribute
    if agent is not None:
        attributes[A.GEN_AI_AGENT_NAME] = agent
    with tracer.start_as_current_span(f"chat {model}", attributes=attributes):
        pass
