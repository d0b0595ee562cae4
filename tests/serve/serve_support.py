"""Shared pieces of the service tests: a service on a loopback port (in a thread, or as a
real `agentguard serve` process), span builders and verdict readers.

Kept in one module (not a conftest) so each test file states plainly what it uses.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agentguard.judge.policy import Policy, coerce_policy
from otel_agentguard.serve.delivery import DeliveringExporter, Delivery
from otel_agentguard.serve.main import ServeOptions, run
from otel_agentguard.serve.service import JudgeService
from otel_agentguard.serve.verdicts import VerdictWriter

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RunningService:
    url: str
    service: JudgeService
    exporter: InMemorySpanExporter
    metrics: InMemoryMetricReader
    grpc_address: str | None

    def verdicts(self) -> dict[str, dict[str, Any]]:
        """Session id -> the verdict span's attributes (and its stall events)."""
        return {span.attributes["agentguard.session.id"]: _verdict(span) for span in self.exporter.get_finished_spans()}

    def verdict_spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

    def span_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        data = self.metrics.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == "agentguard.serve.spans":
                        for point in metric.data.data_points:
                            counts[point.attributes["outcome"]] = point.value
        return counts


def _verdict(span: Any) -> dict[str, Any]:
    verdict = dict(span.attributes)
    verdict["alerts"] = [dict(event.attributes) for event in span.events if event.name == "agentguard.stall"]
    return verdict


@contextmanager
def service_in_thread(policy: Policy | None = None, **options: Any) -> Iterator[RunningService]:
    """`agentguard serve` on an ephemeral port, on its own event loop in a thread."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    delivery = Delivery()  # as the service runs it: every verdict counted as it is exported
    tracer_provider.add_span_processor(SimpleSpanProcessor(DeliveringExporter(exporter, delivery)))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    writer = VerdictWriter(tracer_provider, meter_provider, delivery)
    grpc_address = options.pop("grpc_listen", None)
    serve_options = ServeOptions(listen="127.0.0.1:0", grpc_listen=grpc_address, **options)
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()
    box: dict[str, Any] = {}

    def ready(site: Any, service: JudgeService) -> None:
        box["port"] = site._server.sockets[0].getsockname()[1]
        box["service"] = service
        started.set()

    async def main() -> None:
        box["stop"] = stop
        try:
            await run(policy or coerce_policy(None), serve_options, writer, stop=stop, ready=ready,
                      meter_provider=meter_provider)
        except BaseException as exc:  # surfaced by the waiting test
            box["error"] = exc
            started.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(10), "the service did not start"
    if "error" in box:
        raise box["error"]
    running = RunningService(f"http://127.0.0.1:{box['port']}/v1/traces", box["service"], exporter, reader,
                             grpc_address)
    try:
        yield running
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(15)
        writer.shutdown()


def wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError("timed out waiting for the service")


# --- a real `agentguard serve` process -------------------------------------------------------


@dataclass
class ServeProcess:
    process: subprocess.Popen[bytes]
    port: int
    verdict_file: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def stop(self, timeout_s: float = 20.0) -> tuple[int, str]:
        self.process.send_signal(signal.SIGTERM)
        _, err = self.process.communicate(timeout=timeout_s)
        return self.process.returncode, err.decode(errors="replace")

    def verdicts(self) -> list[dict[str, Any]]:
        return read_verdict_lines(self.verdict_file)


def start_serve_process(tmp: Path, *args: str, env: dict[str, str] | None = None, name: str = "serve") -> ServeProcess:
    port = free_port()
    verdict_file = tmp / f"{name}-verdicts.jsonl"
    environment = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "agentguard_jsonl",
        "OTEL_AGENTGUARD_JSONL_PATH": str(verdict_file),
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_AGENTGUARD_FINGERPRINT_KEY": "serve-tests-shared-key",
        **(env or {}),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "otel_agentguard", "serve", "--listen", f"127.0.0.1:{port}", "--grpc-listen", "off",
         *args],
        env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"agentguard serve exited: {process.stderr.read().decode()}")  # type: ignore[union-attr]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return ServeProcess(process, port, verdict_file)
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise AssertionError("agentguard serve did not start listening")


def read_verdict_lines(path: Path) -> list[dict[str, Any]]:
    """Verdict spans written by the agentguard_jsonl exporter, attributes decoded."""
    from otel_agentguard.replay.otlp import decode_attributes

    found: list[dict[str, Any]] = []
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        for resource_spans in json.loads(line)["resourceSpans"]:
            for scope_spans in resource_spans["scopeSpans"]:
                for span in scope_spans["spans"]:
                    verdict = decode_attributes(span["attributes"])
                    verdict["alerts"] = [decode_attributes(event.get("attributes")) for event in span.get("events", ())
                                         if event["name"] == "agentguard.stall"]
                    verdict["traceId"] = span["traceId"]
                    verdict["parentSpanId"] = span.get("parentSpanId", "")
                    found.append(verdict)
    return found


def summary(verdict: dict[str, Any]) -> tuple[Any, ...]:
    """What must be equal between two judges of the same session."""
    return (
        verdict["agentguard.session.id"], verdict["agentguard.stop_reason"], verdict["agentguard.steps"],
        verdict["agentguard.tokens"],
        tuple((alert["agentguard.probe"], tuple(alert["agentguard.evidence"])) for alert in verdict["alerts"]),
    )


# --- agent sessions as GenAI spans, written with the real OpenTelemetry SDK -------------------

_MS = 1_000_000


class _Keep(SpanProcessor):
    def __init__(self, kept: list[Any]):
        self.kept = kept

    def on_end(self, span: Any) -> None:
        self.kept.append(span)


def keeping_tracer() -> tuple[Any, list[Any]]:
    """A tracer whose ended spans are kept (in the order they ended) and sent nowhere."""
    kept: list[Any] = []
    provider = TracerProvider()
    provider.add_span_processor(_Keep(kept))
    return provider.get_tracer("agent"), kept


def emit_session(tracer: Any, session_id: str, kind: str, start_ns: int = 1_700_000_000_000_000_000) -> None:
    """One agent session as an invoke_agent span around chat and execute_tool spans.

    ``kind``: ``loop`` (the same search, same empty result, six times), ``clean`` (three
    different lookups, then an answer) or ``fake`` (lookups only, then an answer claiming a
    refund was submitted).
    """
    from opentelemetry import trace

    clock = [start_ns]

    def tick() -> int:
        clock[0] += 5 * _MS
        return clock[0]

    root = tracer.start_span("invoke_agent support", start_time=tick(), attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support", "gen_ai.conversation.id": session_id,
    })
    parent = trace.set_span_in_context(root)

    calls = []  # the id of each tool call a chat span asks for, answered by the next tool span

    def chat(finish: str, text: str = "", tool_name: str = "") -> None:
        if not text:
            calls.append(f"call_{len(calls)}")
        parts = ([{"type": "text", "content": text}] if text
                 else [{"type": "tool_call", "name": tool_name, "id": calls[-1]}])
        span = tracer.start_span("chat gpt-4o-mini", context=parent, start_time=tick(), attributes={
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.response.finish_reasons": [finish], "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 20,
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts, "finish_reason": finish}]),
        })
        span.end(end_time=tick())

    def tool(name: str, args: dict[str, Any], result: Any) -> None:
        span = tracer.start_span(f"execute_tool {name}", context=parent, start_time=tick(), attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": calls[-1],
            "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": json.dumps(result),
        })
        span.end(end_time=tick())

    if kind == "loop":
        for _ in range(6):
            chat("tool_calls", tool_name="search_orders")
            tool("search_orders", {"query": "order 1234"}, {"hits": []})
        chat("stop", "I could not find it.")
    elif kind == "clean":
        for index, name in enumerate(("get_order", "get_tracking", "get_customer")):
            chat("tool_calls", tool_name=name)
            tool(name, {"id": index}, {"value": f"v{index}"})
        chat("stop", "Your order shipped and arrives on Thursday.")
    elif kind == "fake":
        chat("tool_calls", tool_name="get_order")
        tool("get_order", {"order": "B-7"}, {"status": "delivered"})
        chat("stop", "I have submitted your refund for order B-7.")
    else:
        raise ValueError(kind)
    root.end(end_time=tick())


EXPECTED = {"loop": "tool_loop", "clean": "completed", "fake": "fake_completion"}
