"""Bounded memory: many short sessions stream through a guard with a small session store, memory
stays flat, and every session ends with a verdict: unfinished ones evicted from the store are
``abandoned`` (or the probe that caught them), never dropped silently.

The soak is sized to run in seconds (its figures are printed with ``-s``); for a long run set
``AGENTGUARD_SOAK_SESSIONS`` (1,000,000 took under three minutes on two cores, memory flat).
"""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from collections import Counter

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from otel_agentguard import attributes as A
from otel_agentguard.live import sessions as live_sessions_module
from otel_agentguard.live.processor import AgentGuardSpanProcessor

SOAK_SESSIONS = int(os.environ.get("AGENTGUARD_SOAK_SESSIONS", "20000"))
# N; the traced run goes on to 10 N. tracemalloc does not see frees of blocks allocated before it
# started, so N must exceed every bound's turnover (the remembered counters below) to compare like with like.
TRACED_SESSIONS = 400
MAX_SESSIONS = 64
REMEMBERED_COUNTERS = 200  # the processor keeps 10,000 ended sessions' counters; smaller reaches steady state sooner

TOOL = {A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup",
        A.GEN_AI_TOOL_CALL_ARGUMENTS: '{"order": "A1"}', A.GEN_AI_TOOL_CALL_RESULT: '{"state": "stalled"}'}
FINAL = {A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",), A.RESPONSE_TOOL_CALLS: 0,
         A.GEN_AI_USAGE_INPUT_TOKENS: 100, A.GEN_AI_USAGE_OUTPUT_TOKENS: 10}


class VerdictCounter(SpanProcessor):
    """Counts verdict spans by stop reason and remembers nothing else (an exporter would grow)."""

    def __init__(self) -> None:
        self.by_reason: Counter[str] = Counter()

    def on_end(self, span: ReadableSpan) -> None:
        attrs = span.attributes or {}
        if attrs.get(A.VERDICT):
            self.by_reason[attrs[A.STOP_REASON]] += 1


class Rig:
    def __init__(self, **options) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer_provider = TracerProvider()
        self.verdicts = VerdictCounter()
        self.tracer_provider.add_span_processor(self.verdicts)
        self.guard = AgentGuardSpanProcessor(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider,
                                             **options)
        self.tracer_provider.add_span_processor(self.guard)
        self.tracer = self.tracer_provider.get_tracer("soak")
        self.started: Counter[str] = Counter()

    def session(self, n: int) -> None:
        """One short session: a final answer (completed), one tool call and gone (abandoned), or three
        identical calls and gone (tool_loop, found before it was evicted)."""
        session = {A.GEN_AI_CONVERSATION_ID: f"soak-{n}"}
        shape = ("completed", "abandoned", "completed", "abandoned", "tool_loop")[n % 5]
        self.started[shape] += 1
        if shape == "completed":
            self.tracer.start_span("chat", attributes={**FINAL, **session}).end()
        else:
            for _ in range(3 if shape == "tool_loop" else 1):
                self.tracer.start_span("execute_tool lookup", attributes={**TOOL, **session}).end()

    def sessions_metric(self) -> Counter[str]:
        data = self.reader.get_metrics_data()
        counted: Counter[str] = Counter()
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == A.METRIC_SESSIONS:
                        for point in metric.data.data_points:
                            counted[point.attributes[A.STOP_REASON]] += point.value
        return +counted

    def close(self) -> None:
        self.guard.shutdown()  # first: the sessions still in the store end while their verdicts can be written
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


@pytest.fixture
def small_counter_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_sessions_module, "_MAX_REMEMBERED_COUNTERS", REMEMBERED_COUNTERS)


def test_soak_memory_stays_flat_and_every_session_gets_a_verdict(small_counter_memory, capsys):
    rig = Rig(max_sessions=MAX_SESSIONS)
    total = 0
    # Warm up past every bound (store, remembered counters, metric series), untraced.
    for _ in range(3 * REMEMBERED_COUNTERS):
        rig.session(total)
        total += 1
    gc.collect()
    objects_warm = len(gc.get_objects())

    tracemalloc.start()
    try:
        for _ in range(TRACED_SESSIONS):
            rig.session(total)
            total += 1
        peak_n = tracemalloc.get_traced_memory()[1]
        for _ in range(9 * TRACED_SESSIONS):
            rig.session(total)
            total += 1
        current_10n, peak_10n = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    started = time.perf_counter()
    while total < SOAK_SESSIONS:
        rig.session(total)
        total += 1
    elapsed = time.perf_counter() - started
    gc.collect()
    objects_after = len(gc.get_objects())
    in_store = len(rig.guard._store)  # noqa: SLF001
    rig.close()

    with capsys.disabled():
        print(f"\n[soak] {total:,} sessions, store max {MAX_SESSIONS}: traced peak after N={TRACED_SESSIONS:,}: "
              f"{peak_n / 1024:.0f} KiB, after 10N: {peak_10n / 1024:.0f} KiB (current {current_10n / 1024:.0f} KiB); "
              f"gc objects {objects_warm:,} -> {objects_after:,}; {(total - 10 * TRACED_SESSIONS - 3 * REMEMBERED_COUNTERS) / elapsed:,.0f} sessions/s untraced")
    assert peak_10n <= 1.5 * peak_n + 64 * 1024, (peak_n, peak_10n)
    assert objects_after <= objects_warm * 1.05 + 1000, (objects_warm, objects_after)
    assert in_store <= MAX_SESSIONS
    # Every session has exactly one verdict, in the metric and on a verdict span: none dropped.
    assert rig.sessions_metric() == rig.started
    assert rig.verdicts.by_reason == rig.started


def test_idle_sessions_are_ended_as_abandoned_by_the_idle_timeout():
    rig = Rig(idle_timeout_s=0.05)
    for n in (1, 3, 6):  # abandoned, abandoned, abandoned (one tool call each)
        rig.session(n)
    assert len(rig.guard._store) == 3  # noqa: SLF001
    time.sleep(0.1)
    assert rig.guard.force_flush()  # sweeps what has been idle too long
    assert len(rig.guard._store) == 0  # noqa: SLF001
    assert rig.verdicts.by_reason == Counter(abandoned=3)
    assert rig.sessions_metric() == Counter(abandoned=3)
    rig.close()


def test_running_sessions_are_kept_past_the_store_size_until_idle():
    """A session whose session span is open is never cut in two for room; the store grows (and
    warns) instead, and the idle timeout still bounds it if the span leaks."""
    rig = Rig(max_sessions=4, idle_timeout_s=0.2)
    open_spans = [rig.tracer.start_span("invoke_agent", attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT,
                                                                     A.SESSION_ID: f"run-{n}"}) for n in range(10)]
    assert len(rig.guard._store) == 10  # noqa: SLF001
    for span in open_spans[:5]:
        span.end()
    assert len(rig.guard._store) == 5  # noqa: SLF001
    time.sleep(0.3)  # the other five leaked: idle past the timeout
    rig.guard.force_flush()
    assert len(rig.guard._store) == 0  # noqa: SLF001
    assert rig.sessions_metric() == Counter(abandoned=10)
    rig.close()
