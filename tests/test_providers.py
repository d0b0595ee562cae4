"""Providers as applications have them: a private one, several, Logfire's proxy, none at all."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_agentguard as ag
from otel_agentguard.live import providers as _providers

IN_ORDER = Path(__file__).parent / "instrumentation" / "launch_in_order.py"


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    """A fresh interpreter: nothing global (provider, installs, warnings) carries over."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, **env})


@pytest.fixture
def private_provider(monkeypatch):
    monkeypatch.setattr(_providers, "_last_installed", None)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


@ag.tool  # decorated at import time, before any install()
def lookup(order: str) -> str:
    return "shipped"


def test_tools_and_sessions_trace_to_the_provider_the_guard_was_installed_on(private_provider):
    provider, exporter = private_provider
    ag.install(tracer_provider=provider)  # not the global provider
    with ag.session("private") as s:
        lookup("A1")
    names = [span.name for span in exporter.get_finished_spans()]
    assert names == ["execute_tool lookup", "invoke_agent"]
    assert s.verdict is not None and s.verdict.steps == 1


def test_after_several_installs_the_most_recent_provider_is_the_default(private_provider):
    first, first_spans = private_provider
    second_spans = InMemorySpanExporter()
    second = TracerProvider()
    second.add_span_processor(SimpleSpanProcessor(second_spans))
    ag.install(tracer_provider=first)
    ag.install(tracer_provider=second)
    with ag.session("second"):
        lookup("A1")
    assert first_spans.get_finished_spans() == ()
    assert [span.name for span in second_spans.get_finished_spans()] == ["execute_tool lookup", "invoke_agent"]
    ag.install(tracer_provider=first)  # installing again makes it the most recent again
    lookup("A2")  # a lone call: its session ends with it, and its verdict span goes to that provider
    # (the guard runs first: its verdict span is exported before the step span that ended the session)
    assert sorted(span.name for span in first_spans.get_finished_spans()) == ["agentguard.verdict", "execute_tool lookup"]
    second.shutdown()


def test_install_goes_under_logfires_proxy_provider():
    pytest.importorskip("logfire")
    done = python("""
        import logfire
        import otel_agentguard as ag
        from opentelemetry import trace

        logfire.configure(send_to_logfire=False, console=False)
        processor = ag.install()
        assert ag.install() is processor
        sdk = trace.get_tracer_provider().provider
        assert processor in sdk._active_span_processor._span_processors

        @ag.tool
        def lookup(order):
            return "stalled"

        with ag.session("under-logfire") as s:
            for _ in range(4):
                lookup("A1")
        print(s.verdict.stop_reason, s.verdict.steps)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["tool_loop", "4"]


def test_a_tool_that_can_trace_nothing_warns_once_with_the_cause_and_the_fix():
    done = python("""
        import otel_agentguard as ag

        @ag.tool
        def lookup(order):
            return "shipped"

        lookup("A1")
        lookup("A2")
        with ag.session("nowhere") as s:
            pass
        print(s.verdict)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
    warnings = [line for line in done.stderr.splitlines() if "records nothing" in line]
    assert len(warnings) == 1
    assert "no OpenTelemetry SDK TracerProvider is configured" in warnings[0]
    assert "otel_agentguard.install()" in warnings[0]


def test_a_session_without_a_guard_says_its_verdict_stays_none():
    done = python("""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        import otel_agentguard as ag

        trace.set_tracer_provider(TracerProvider())
        for name in ("a", "b"):
            with ag.session(name) as s:
                pass
        print(s.verdict)
    """)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "not judged" in line]
    assert len(warnings) == 1 and "otel_agentguard.install()" in warnings[0]


@pytest.mark.parametrize("hide_distro", [True, False], ids=["without-distro", "with-distro"])
def test_under_the_launcher_without_a_configurator_one_warning_names_opentelemetry_distro(hide_distro):
    pytest.importorskip("opentelemetry.distro")
    env = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none",
           "AGENTGUARD_HIDE_DISTRO": "1" if hide_distro else "0"}
    done = subprocess.run(
        [sys.executable, str(IN_ORDER), "agentguard-first", "openai-v2", "otel_agentguard.version"],
        capture_output=True, text=True, timeout=120, check=False, env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr
    named = [line for line in done.stderr.splitlines() if "opentelemetry-distro" in line]
    if hide_distro:
        assert len(named) == 1
        assert "otel_agentguard is not active" in named[0] and "no configurator is installed" in named[0]
    else:
        assert named == []
        assert "otel_agentguard is not active" not in done.stderr
