"""Verdicts out of the service: a span per judged session and the guard's metrics.

They leave through the standard OpenTelemetry SDK exporters, chosen and configured
by the standard variables (``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``,
``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), so a
Collector pipeline takes them like any other telemetry.

The verdict span is a child of the session's own span (else the trace's root) in
the session's trace, and links to it: a trace view shows the verdict inside the
agent's trace. It carries ``agentguard.verdict`` so that neither replay nor this
service ever judges it as an input.
"""

from __future__ import annotations

import logging
import os
from importlib.metadata import entry_points
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags

from otel_agentguard import attributes as A
from otel_agentguard.live.metrics import GuardMetrics
from otel_agentguard.live.verdicts import VERDICT_SPAN_NAME, alert_attributes
from otel_agentguard.serve.delivery import METRIC_SERVE_VERDICTS, DeliveringExporter, Delivery
from otel_agentguard.serve.sessions import JudgedSession
from otel_agentguard.version import __version__

logger = logging.getLogger(__name__)

DEFAULT_SERVICE_NAME = "agentguard-serve"
_OTLP_BY_PROTOCOL = {"http/protobuf": "otlp_proto_http", "grpc": "otlp_proto_grpc", "http/json": "otlp_proto_http"}


class ExporterError(ValueError):
    """An exporter named in the environment that cannot be loaded (a one-line startup error)."""


def _names(variable: str) -> list[str]:
    value = os.environ.get(variable, "otlp")
    return [name.strip() for name in value.split(",") if name.strip() and name.strip() != "none"]


def _protocol(signal: str) -> str:
    return (os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
            or "http/protobuf").strip()


def _load(group: str, name: str, signal: str) -> Any:
    if name == "otlp":
        protocol = _protocol(signal)
        if protocol not in _OTLP_BY_PROTOCOL:
            raise ExporterError(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL: unknown protocol {protocol!r}")
        name = _OTLP_BY_PROTOCOL[protocol]
    found = [entry for entry in entry_points(group=group) if entry.name == name]
    if not found:
        hint = " (pip install opentelemetry-exporter-otlp-proto-grpc)" if name == "otlp_proto_grpc" else ""
        raise ExporterError(f"no {signal.lower()} exporter named {name!r} is installed{hint}")
    try:
        return found[0].load()
    except Exception as exc:  # a broken plugin: say which, no traceback
        raise ExporterError(f"cannot load the {signal.lower()} exporter {name!r}: {exc}") from None


def resource() -> Resource:
    detected = Resource.create()
    if os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        return detected
    return detected.merge(Resource.create({SERVICE_NAME: DEFAULT_SERVICE_NAME}))


def providers_from_environment(delivery: Delivery | None = None) -> tuple[TracerProvider, MeterProvider]:
    """A tracer and a meter provider exporting where the environment says (default: OTLP/HTTP).
    ``delivery``: counts what becomes of each verdict (each exporter retries what failed)."""
    shared = resource()
    tracer_provider = TracerProvider(resource=shared)
    for name in _names("OTEL_TRACES_EXPORTER"):
        exporter_class = _load("opentelemetry_traces_exporter", name, "TRACES")
        if delivery is None:
            tracer_provider.add_span_processor(BatchSpanProcessor(exporter_class()))
        else:  # the queue holds every verdict the delivery admits: the SDK never drops one
            tracer_provider.add_span_processor(BatchSpanProcessor(
                DeliveringExporter(exporter_class(), delivery), max_queue_size=delivery.room + 1024))
    readers: list[MetricReader] = []
    for name in _names("OTEL_METRICS_EXPORTER"):
        exporter_class = _load("opentelemetry_metrics_exporter", name, "METRICS")
        if isinstance(exporter_class, type) and issubclass(exporter_class, MetricReader):
            readers.append(exporter_class())  # a pull reader (prometheus)
        else:
            readers.append(PeriodicExportingMetricReader(exporter_class()))
    return tracer_provider, MeterProvider(resource=shared, metric_readers=readers)


class VerdictWriter:
    """Writes each judged session as a verdict span and records the guard's metrics."""

    def __init__(self, tracer_provider: TracerProvider, meter_provider: Any = None, delivery: Delivery | None = None):
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._tracer = trace.get_tracer("otel_agentguard.serve", __version__, tracer_provider)
        self._metrics = GuardMetrics(meter_provider)
        self.delivery = delivery
        if delivery is not None:
            from opentelemetry import metrics

            delivery.counter = metrics.get_meter("otel_agentguard.serve", __version__, meter_provider).create_counter(
                METRIC_SERVE_VERDICTS, unit="{verdict}",
                description="Verdicts of agentguard serve by what became of them: exported, retried, dropped")

    def write(self, judged: JudgedSession) -> None:
        if self.delivery is not None and not self.delivery.admit():
            return  # no room left for it: dropped, and counted
        verdict = judged.verdict
        parent = SpanContext(
            trace_id=int(judged.trace_id, 16),
            span_id=int(judged.parent_span_id, 16) if judged.parent_span_id else 0,
            is_remote=True,
            trace_flags=TraceFlags(TraceFlags.SAMPLED),
        )
        context = trace.set_span_in_context(NonRecordingSpan(parent)) if parent.is_valid else None
        attributes: dict[str, Any] = {
            A.VERDICT: True,
            A.SESSION_ID: verdict.session_id,
            A.STOP_REASON: verdict.stop_reason,
            A.PROFILE: verdict.profile,
            A.POLICY_VERSION: verdict.policy_version,
            A.MODE: "observe",
            A.STEPS: verdict.steps,
            A.TOKENS: verdict.tokens,
            A.COST_USD: round(verdict.cost_usd, 6),
        }
        amended = judged.reason == "amended"
        if amended:
            attributes[A.VERDICT_AMENDED] = True
        links = [Link(parent)] if parent.is_valid else None
        span = self._tracer.start_span(VERDICT_SPAN_NAME, context=context, attributes=attributes, links=links)
        for alert in verdict.alerts:
            span.add_event(A.STALL_EVENT, alert_attributes(alert))
            if not amended:
                self._metrics.stall(alert, verdict.profile)
        span.end()
        if not amended:  # the session was counted once, when first judged
            self._metrics.session_ended(verdict)

    def flush(self, timeout_millis: int = 10_000) -> None:
        if self.delivery is not None:  # (the SDK flushes in this thread, whatever the timeout says)
            self.delivery.stop_retrying(after_s=timeout_millis / 1000)
        self._tracer_provider.force_flush(timeout_millis)
        if self._meter_provider is not None and hasattr(self._meter_provider, "force_flush"):
            self._meter_provider.force_flush(timeout_millis)

    def shutdown(self, flush_timeout_s: float = 10.0) -> None:
        """Export what is in flight for up to ``flush_timeout_s``; what is left then is dropped,
        counted and logged."""
        self._metrics.close()
        if self.delivery is not None:
            self.flush(int(flush_timeout_s * 1000))
            self.delivery.stop_retrying()
        self._tracer_provider.shutdown()
        if self.delivery is not None:
            lost = self.delivery.lose_the_rest()
            if lost:
                logger.warning("agentguard serve: %d verdicts were not delivered before exit", lost)
        if self._meter_provider is not None and hasattr(self._meter_provider, "shutdown"):
            self._meter_provider.shutdown()
