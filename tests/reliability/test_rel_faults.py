"""Faults around the guard: an exporter that is down (raises), slow (sleeps) or refuses
(returns FAILURE), a metric exporter that raises, and provider ``force_flush`` / ``shutdown``.

None of it changes a verdict or loses a counted metric, and the guard's part of flushing and
shutting down finishes in bounded time (measured and printed with ``-s``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from rel_support import verdict_key

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.testing import record_model_call


class DownExporter(SpanExporter):
    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        raise ConnectionRefusedError("collector is down")

    def shutdown(self) -> None:
        pass


class SlowExporter(SpanExporter):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        time.sleep(self.seconds)
        self.exported += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class RefusingExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        pass


class DownMetricExporter(MetricExporter):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        self.calls += 1
        raise ConnectionRefusedError("metrics backend is down")

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass


class Rig:
    """A provider with the given span exporter pipeline *before* the guard (the usual order), and
    two metric readers: an in-memory one to read the counts, and one exporting to ``metric_exporter``."""

    def __init__(self, span_processor=None, metric_exporter: MetricExporter | None = None) -> None:
        self.reader = InMemoryMetricReader()
        readers = [self.reader]
        if metric_exporter is not None:
            readers.append(PeriodicExportingMetricReader(metric_exporter, export_interval_millis=20))
        self.meter_provider = MeterProvider(metric_readers=readers)
        self.tracer_provider = TracerProvider()
        if span_processor is not None:
            self.tracer_provider.add_span_processor(span_processor)
        self.guard = AgentGuardSpanProcessor(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)
        self.tracer_provider.add_span_processor(self.guard)
        self.tracer = self.tracer_provider.get_tracer("faults")

    def counters(self) -> dict[str, dict]:
        found: dict[str, dict] = {}
        for resource in self.reader.get_metrics_data().resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", None)
                        if value is None:
                            value = (point.count, point.sum)
                        found.setdefault(metric.name, {})[tuple(sorted(point.attributes.items()))] = value
        # durations are wall time: compare their count only
        if A.METRIC_SESSION_DURATION in found:
            found[A.METRIC_SESSION_DURATION] = {k: v[0] for k, v in found[A.METRIC_SESSION_DURATION].items()}
        return found

    def run_agent(self) -> dict[str, object]:
        """Scripted sessions covering every verdict shape; their verdicts."""
        provider = self.tracer_provider

        @ag.tool(tracer_provider=provider)
        def lookup(order: str) -> dict:
            return {"order": order, "state": "stalled"}

        @ag.tool(tracer_provider=provider, effect="write")
        def refund(order: str) -> dict:
            return {"refunded": order}

        @ag.tool(tracer_provider=provider)
        def flaky(n: int) -> dict:
            raise TimeoutError("upstream timed out")

        def model(**kwargs) -> None:
            record_model_call(self.tracer, input_tokens=100, output_tokens=20, **kwargs)

        scripts = {
            "loop": lambda: [lookup("A1") for _ in range(4)] and model(),
            "honest": lambda: (lookup("B2"), refund("B2"), model(final_claims=("write",))),
            "fake": lambda: (lookup("C3"), model(final_claims=("write",))),
            "errors": lambda: [_swallow(flaky, n) for n in range(5)] and model(),
            "budget": lambda: [(model(tool_calls=1), lookup(f"D{n}")) for n in range(14)],
        }
        verdicts = {}
        for name, body in scripts.items():
            with ag.session(name, tracer_provider=provider) as handle:
                body()
            verdicts[name] = verdict_key(handle.verdict)
        # and one without a session span: its verdict goes on a verdict span
        lookup("E5")
        model()
        return verdicts

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def _swallow(tool, n):
    try:
        tool(n)
    except TimeoutError:
        pass


@pytest.fixture(scope="module")
def healthy() -> tuple[dict, dict]:
    exporter = InMemorySpanExporter()
    rig = Rig(SimpleSpanProcessor(exporter))
    verdicts = rig.run_agent()
    counters = rig.counters()
    rig.close()
    assert {v[0] for v in verdicts.values()} == {"tool_loop", "completed", "fake_completion", "no_progress",
                                                 "budget_exceeded"}
    return verdicts, counters


FAULTY = {
    "down-simple": lambda: SimpleSpanProcessor(DownExporter()),
    "down-batch": lambda: BatchSpanProcessor(DownExporter(), schedule_delay_millis=10),
    "refusing-simple": lambda: SimpleSpanProcessor(RefusingExporter()),
    "refusing-batch": lambda: BatchSpanProcessor(RefusingExporter(), schedule_delay_millis=10),
    "slow-batch": lambda: BatchSpanProcessor(SlowExporter(0.05), schedule_delay_millis=10, max_queue_size=16,
                                             max_export_batch_size=8),  # overflows: spans are dropped
    "slow-simple": lambda: SimpleSpanProcessor(SlowExporter(0.002)),
}


@pytest.mark.parametrize("fault", sorted(FAULTY))
def test_a_faulty_span_exporter_changes_no_verdict_and_loses_no_metric(healthy, fault, caplog):
    caplog.set_level("CRITICAL")  # the SDK logs each failed export
    rig = Rig(FAULTY[fault](), metric_exporter=DownMetricExporter())
    started = time.perf_counter()
    verdicts = rig.run_agent()
    elapsed = time.perf_counter() - started
    counters = rig.counters()
    rig.close()
    assert verdicts == healthy[0]
    assert counters == healthy[1]
    if fault == "slow-batch":
        assert elapsed < 2.0, f"a slow exporter behind a batch processor held the agent up for {elapsed:.2f} s"


def test_a_metric_exporter_that_is_down_loses_no_count(healthy):
    exporter = DownMetricExporter()
    rig = Rig(SimpleSpanProcessor(InMemorySpanExporter()), metric_exporter=exporter)
    rig.run_agent()
    time.sleep(0.05)
    counters = rig.counters()
    rig.close()
    assert exporter.calls >= 1
    assert counters == healthy[1]


def test_flush_and_shutdown_finish_in_bounded_time_with_many_open_sessions(capsys):
    """10,000 sessions still open (the default store size) behind a batch exporter: the guard's
    force_flush is instant, and the provider's shutdown (which ends all of them as abandoned) is
    bounded by the store size."""
    exporter = SlowExporter(0.001)
    rig = Rig(BatchSpanProcessor(exporter, schedule_delay_millis=50, max_queue_size=100_000))
    for n in range(10_000):
        rig.tracer.start_span("execute_tool lookup", attributes={
            A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup",
            A.GEN_AI_CONVERSATION_ID: f"open-{n}", A.TOOL_ARGS_FINGERPRINT: "f"}).end()
    assert len(rig.guard.live_session_ids()) == 10_000

    started = time.perf_counter()
    assert rig.guard.force_flush(timeout_millis=1000)
    guard_flush_s = time.perf_counter() - started
    started = time.perf_counter()
    assert rig.tracer_provider.force_flush(timeout_millis=5000)
    provider_flush_s = time.perf_counter() - started
    started = time.perf_counter()
    rig.tracer_provider.shutdown()  # the batch processor, then the guard: every open session ends
    provider_shutdown_s = time.perf_counter() - started
    abandoned = rig.counters()[A.METRIC_SESSIONS]
    rig.meter_provider.shutdown()

    with capsys.disabled():
        print(f"\n[faults] 10,000 open sessions: guard force_flush {guard_flush_s * 1000:.1f} ms, provider "
              f"force_flush {provider_flush_s * 1000:.0f} ms, provider shutdown (ending all 10,000 as abandoned) "
              f"{provider_shutdown_s * 1000:.0f} ms")
    assert guard_flush_s < 0.1
    assert provider_flush_s < 5.0 and provider_shutdown_s < 5.0
    assert sum(value for labels, value in abandoned.items() if ("agentguard.stop_reason", "abandoned") in labels) == 10_000
    assert exporter.exported >= 10_000  # every step span reached the exporter


class HungExporter(SpanExporter):
    """An export that never returns until released (a collector that accepts and never answers)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(30)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_hung_exporter_never_holds_up_the_agent_or_the_guards_flush_and_shutdown(capsys, healthy):
    hung = HungExporter()
    rig = Rig(BatchSpanProcessor(hung, schedule_delay_millis=10, max_queue_size=100_000))
    try:
        started = time.perf_counter()
        verdicts = rig.run_agent()
        for n in range(100):  # and some sessions left open
            rig.tracer.start_span("execute_tool lookup", attributes={
                A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_CONVERSATION_ID: f"open-{n}"}).end()
        agent_s = time.perf_counter() - started
        started = time.perf_counter()
        rig.guard.force_flush(timeout_millis=300)
        flush_s = time.perf_counter() - started
        started = time.perf_counter()
        rig.guard.shutdown()
        guard_s = time.perf_counter() - started
        counters = rig.counters()
    finally:
        hung.release.set()  # the SDK's own force_flush/shutdown would wait for the hung export
        rig.close()
    with capsys.disabled():
        print(f"\n[faults] exporter hung: agent run {agent_s * 1000:.0f} ms, guard force_flush {flush_s * 1000:.1f} ms, "
              f"guard shutdown with 100 open sessions {guard_s * 1000:.1f} ms")
    assert verdicts == healthy[0]
    assert agent_s < 2.0 and flush_s < 0.1 and guard_s < 0.5
    assert sum(v for k, v in counters[A.METRIC_SESSIONS].items() if ("agentguard.stop_reason", "abandoned") in k) == 101


def test_sessions_open_at_shutdown_are_counted_as_abandoned_whatever_the_processor_order():
    for guard_first in (False, True):
        exporter = InMemorySpanExporter()
        reader = InMemoryMetricReader()
        meter_provider = MeterProvider(metric_readers=[reader])
        provider = TracerProvider()
        guard = AgentGuardSpanProcessor(tracer_provider=provider, meter_provider=meter_provider)
        processors = [guard, SimpleSpanProcessor(exporter)] if guard_first else [SimpleSpanProcessor(exporter), guard]
        for processor in processors:
            provider.add_span_processor(processor)
        tracer = provider.get_tracer("x")
        tracer.start_span("execute_tool lookup", attributes={A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
                                                            A.GEN_AI_CONVERSATION_ID: "left-open"}).end()
        provider.shutdown()
        points = [p for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics
                  for m in sm.metrics if m.name == A.METRIC_SESSIONS for p in m.data.data_points
                  if p.value and p.attributes[A.STOP_REASON] == "abandoned"]
        meter_provider.shutdown()
        assert len(points) == 1 and points[0].value == 1
        verdict_spans = [s for s in exporter.get_finished_spans() if s.attributes.get(A.VERDICT)]
        # The verdict span is exported only when the guard shuts down before the exporter: see the note.
        assert len(verdict_spans) == (1 if guard_first else 0)


def test_the_json_lines_exporter_loses_no_span_to_a_lone_surrogate(tmp_path, caplog):
    from otel_agentguard.exporters import OTLPJsonLinesSpanExporter

    caplog.set_level("CRITICAL")
    path = tmp_path / "trace.jsonl"
    exporter = OTLPJsonLinesSpanExporter(str(path))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    tracer = provider.get_tracer("x")
    tracer.start_span("execute_tool fine", attributes={A.GEN_AI_TOOL_NAME: "fine"}).end()
    tracer.start_span("execute_tool odd", attributes={A.GEN_AI_TOOL_NAME: "odd\ud800name"}).end()
    provider.shutdown()
    written = path.read_text(encoding="utf-8", errors="replace")
    assert '"execute_tool fine"' in written and '"execute_tool odd"' in written
