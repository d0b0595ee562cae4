"""Shared fixtures: a real SDK provider with the guard and in-memory exporters."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

# Fingerprints must correlate across the live run and its replay inside one test
# process; a fixed key also keeps the "random key" warning out of test output.
os.environ.setdefault("OTEL_AGENTGUARD_FINGERPRINT_KEY", "agentguard-tests")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from otel_agentguard.judge.policy import Policy, load_policy  # noqa: E402
from otel_agentguard.replay.cli import EXAMPLES  # noqa: E402
from otel_agentguard.testing import GuardedTracing  # noqa: E402


@pytest.fixture
def example_policy() -> Policy:
    return load_policy(EXAMPLES / "policy.toml")


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def meter_provider(metric_reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    provider = MeterProvider(metric_readers=[metric_reader])
    yield provider
    provider.shutdown()


@contextmanager
def _instrumented(
    *instrumentors: Any, policy: Any = None, mode: str = "observe", **options: Any
) -> Iterator[GuardedTracing]:
    with GuardedTracing(policy, mode) as tracing:
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=tracing.tracer_provider, **options)
        try:
            yield tracing
        finally:
            for instrumentor in reversed(instrumentors):
                instrumentor.uninstrument()


@pytest.fixture(scope="session")
def instrumented_tracing() -> Callable[..., AbstractContextManager[GuardedTracing]]:
    """``with instrumented_tracing(OpenAIInstrumentor(), policy=P, mode="enforce") as tracing``:
    a :class:`GuardedTracing` with the instrumentors instrumented on its provider (``options``
    go to ``instrument()``), uninstrumented on the way out. Usable from fixtures of any scope."""
    return _instrumented
