"""Nothing private leaves the process unless content capture is on."""

from __future__ import annotations

import io
import logging

import pytest

import otel_agentguard as ag
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.testing import GuardedTracing

SECRET_ARG = "sk-live-ARGUMENT-4242"
SECRET_RESULT = "4111-1111-RESULT-1111"
SECRET_ERROR = "ERROR-MESSAGE-SECRET-77"


def run_agent(tracing: GuardedTracing) -> None:
    @ag.tool(tracer_provider=tracing.tracer_provider)
    def lookup_card(token: str) -> dict:
        return {"card": SECRET_RESULT}

    @ag.tool(tracer_provider=tracing.tracer_provider)
    def charge(token: str) -> dict:
        raise PermissionError(f"declined for {SECRET_ERROR}")

    with tracing.session("privacy"):
        for _ in range(3):
            lookup_card(SECRET_ARG)
        with pytest.raises(PermissionError):
            charge(SECRET_ARG)
        tracing.record_model_call(final_claims=("write",))


def exported_bytes(tracing: GuardedTracing) -> str:
    stream = io.StringIO()
    OTLPJsonLinesSpanExporter(stream).export(tracing.spans())
    return stream.getvalue()


def test_no_raw_content_in_exported_spans_events_logs_or_metric_labels(monkeypatch, caplog):
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    caplog.set_level(logging.DEBUG)
    with GuardedTracing() as tracing:
        run_agent(tracing)
        payload = exported_bytes(tracing)
        assert "agentguard.stall" in payload  # the alerts themselves are exported
        labels = [str(labels) for name in ("agentguard.sessions", "agentguard.stalls")
                  for labels, _ in tracing.metric_points(name)]
    for secret in (SECRET_ARG, SECRET_RESULT, SECRET_ERROR):
        assert secret not in payload
        assert secret not in caplog.text
        assert not any(secret in label for label in labels)


def test_capture_on_puts_arguments_and_results_on_tool_spans(monkeypatch):
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    with GuardedTracing() as tracing:
        run_agent(tracing)
        payload = exported_bytes(tracing)
    assert SECRET_ARG in payload
    assert SECRET_RESULT in payload
    assert SECRET_ERROR in payload  # the exception event, with its message
