"""End to end: the demo agent under ``opentelemetry-instrument``, exporting OTLP/HTTP to a loopback receiver."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_agentguard import attributes as A

LAUNCHER = Path(sys.executable).with_name("opentelemetry-instrument")


class OTLPReceiver:
    """The smallest OTLP/HTTP trace receiver: keeps raw bodies and decoded spans."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path == "/v1/traces":
                    receiver.bodies.append(body)
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[str, dict]]:
        found = []
        for body in self.bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append((span.name, {kv.key: _value(kv.value) for kv in span.attributes},
                                      [(e.name, {kv.key: _value(kv.value) for kv in e.attributes}) for e in span.events]))
        return found

    def __enter__(self) -> OTLPReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


def run_demo_agent(endpoint: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OTEL_SERVICE_NAME": "agentguard-e2e",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        # OpenLLMetry (installed for the coexistence tests, and loaded by the launcher) captures
        # prompts unless told not to: the privacy checks below are about what the guard sends.
        "TRACELOOP_TRACE_CONTENT": "false",
        **extra_env,
    }
    env.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    return subprocess.run([str(LAUNCHER), sys.executable, "-m", "otel_agentguard.demo.agent"],
                          env=env, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.skipif(not LAUNCHER.exists(), reason="opentelemetry-instrument is not installed next to python")
def test_agent_under_the_launcher_is_judged_and_exported_over_otlp_http():
    with OTLPReceiver() as receiver:
        done = run_demo_agent(receiver.endpoint)
        assert done.returncode == 0, done.stderr
    spans = receiver.spans()
    sessions = {attrs[A.SESSION_ID]: (attrs, events) for name, attrs, events in spans
                if attrs.get(A.GEN_AI_OPERATION_NAME) == "invoke_agent"}
    assert {sid: attrs[A.STOP_REASON] for sid, (attrs, _) in sessions.items()} == {
        "stuck-parcel": "tool_loop", "phantom-refund": "fake_completion", "honest-refund": "completed",
    }
    stuck_attrs, stuck_events = sessions["stuck-parcel"]
    assert stuck_attrs[A.MODE] == "observe"
    assert [(name, ev[A.PROBE], ev[A.EVIDENCE]) for name, ev in stuck_events] == [
        ("agentguard.stall", "tool_loop", [2, 4, 6])]
    tools = [attrs for name, attrs, _ in spans if attrs.get(A.GEN_AI_OPERATION_NAME) == "execute_tool"]
    assert tools and all(A.TOOL_ARGS_FINGERPRINT in t and A.SEQUENCE in t for t in tools)
    assert [t[A.TOOL_EFFECT] for t in tools if t[A.GEN_AI_TOOL_NAME] == "refund"] == ["write"]
    steps = [attrs for name, attrs, _ in spans if attrs.get(A.GEN_AI_OPERATION_NAME) == "chat"
             and A.SEQUENCE in attrs]
    assert len(steps) == 5 + 2 + 3  # one model step per model call, whatever else instruments openai
    # content capture is off: no prompt, argument or answer reached the wire
    raw = b"".join(receiver.bodies)
    for private in (b"Where is my parcel", b"A1001", b"I have refunded order", b"stalled at hub"):
        assert private not in raw


@pytest.mark.skipif(not LAUNCHER.exists(), reason="opentelemetry-instrument is not installed next to python")
def test_disabled_instrumentations_keep_the_guard_out():
    with OTLPReceiver() as receiver:
        done = run_demo_agent(receiver.endpoint,
                              OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="agentguard,agentguard_openai,openai")
        assert done.returncode == 0, done.stderr
    spans = receiver.spans()
    assert spans  # the session and tool spans of the app itself are still exported
    assert not any(A.STOP_REASON in attrs for _, attrs, _ in spans)
    assert not any(attrs.get(A.GEN_AI_OPERATION_NAME) == "chat" for _, attrs, _ in spans)


IN_ORDER = Path(__file__).with_name("launch_in_order.py")


def run_demo_agent_in_order(endpoint: str, order: str, companion: str) -> subprocess.CompletedProcess:
    """The demo agent under the launcher's own initialisation, instrumentors loaded in ``order``."""
    env = {
        **os.environ,
        "OTEL_SERVICE_NAME": "agentguard-e2e",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    env.pop("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", None)
    return subprocess.run([sys.executable, str(IN_ORDER), order, companion, "otel_agentguard.demo.agent"],
                          env=env, capture_output=True, text=True, timeout=180, check=False)


@pytest.mark.parametrize("companion", ["openai-v2", "openllmetry"])
def test_the_order_entry_points_load_in_changes_no_verdict_and_no_span_count(companion):
    pytest.importorskip({"openai-v2": "opentelemetry.instrumentation.openai_v2",
                         "openllmetry": "opentelemetry.instrumentation.openai"}[companion])
    seen = {}
    for order in ("agentguard-first", "agentguard-last"):
        with OTLPReceiver() as receiver:
            done = run_demo_agent_in_order(receiver.endpoint, order, companion)
            assert done.returncode == 0, done.stderr
        spans = receiver.spans()
        verdicts = {attrs[A.SESSION_ID]: attrs[A.STOP_REASON] for _, attrs, _ in spans
                    if attrs.get(A.GEN_AI_OPERATION_NAME) == "invoke_agent"}
        model_spans = [attrs for _, attrs, _ in spans if attrs.get(A.GEN_AI_OPERATION_NAME) == "chat"]
        kinds = sorted((attrs.get(A.GEN_AI_OPERATION_NAME) or name, A.SEQUENCE in attrs) for name, attrs, _ in spans)
        seen[order] = verdicts, len(model_spans), kinds
        assert all(A.SEQUENCE in attrs and A.RESPONSE_TOOL_CALLS in attrs for attrs in model_spans)
    assert seen["agentguard-first"] == seen["agentguard-last"]
    verdicts, model_span_count, _ = seen["agentguard-first"]
    assert verdicts == {"stuck-parcel": "tool_loop", "phantom-refund": "fake_completion", "honest-refund": "completed"}
    assert model_span_count == 5 + 2 + 3  # one span per model call: theirs, enriched by ours
