"""Shared fixtures: a real SDK provider with the guard and in-memory exporters."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# Fingerprints must correlate across the live run and its replay inside one test
# process; a fixed key also keeps the "random key" warning out of test output.
os.environ.setdefault("OTEL_AGENTGUARD_FINGERPRINT_KEY", "agentguard-tests")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from otel_agentguard.policy import Policy, load_policy  # noqa: E402
from otel_agentguard.replay.cli import EXAMPLES  # noqa: E402


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
