"""(7) ``agentguard serve``: spans judged per second by one process on one core, and memory per
live session.

Throughput: the real command (``python -m otel_agentguard serve``) runs in a child pinned to one
core, its verdict exporters off (``OTEL_TRACES_EXPORTER=none``, the export is not what is
measured). A client on the other core (when there is one) posts OTLP/HTTP protobuf bodies of
100 spans each over four keep-alive connections; the figure is the spans in all bodies divided
by the time from the first post until the service reports every session judged (``/health``).
Two span shapes: the spans our own instrumentation writes (fingerprints already stamped) and
foreign GenAI spans with raw JSON arguments and results (a TypeScript agent's), which the
service fingerprints itself. Sessions are ~11 spans, interleaved 64 at a time, as in (5).

Where other processes share the machine, the wall-clock figure measures the share of a core the
service was given; the figure per CPU-second of the service (from /proc) is its capacity on one
core, and the one to compare with the target then.

Responsiveness: /health's answer time, polled every 10 ms while one trace holding 100,000
one-answer sessions (in bodies of 10,000 spans) is read and judged: no request, trace or session
may hold the event loop.

Memory: tracemalloc's growth while K sessions of 11 foreign spans each stay open in the
service's session tracker (their root span not yet arrived), divided by K.
"""

from __future__ import annotations

import contextlib
import gc
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from bench import _harness
from bench._harness import Report, progress
from bench.workload import session_steps
from otel_agentguard import attributes as A

_BODY_SPANS = 100
_CONNECTIONS = 4


def _value(value: object) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, (list, tuple)):
        any_value = AnyValue()
        any_value.array_value.values.extend(_value(item) for item in value)
        return any_value
    return AnyValue(string_value=str(value))


def _foreign(attrs: dict, rnd: random.Random) -> dict:
    """The same step as a foreign GenAI span: raw arguments and result instead of fingerprints."""
    out = {key: value for key, value in attrs.items() if not key.startswith("agentguard.")}
    if A.TOOL_ARGS_FINGERPRINT in attrs:
        seed = attrs[A.TOOL_ARGS_FINGERPRINT]
        out[A.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps({"order_id": seed[:8], "region": "eu", "page": 1})
        out[A.GEN_AI_TOOL_CALL_RESULT] = json.dumps(
            {"status": "ok", "items": [{"sku": attrs.get(A.TOOL_RESULT_FINGERPRINT, "")[:6], "qty": 1}]})
    return out


def sessions(count: int, foreign: bool, seed: int = 11, roots: bool = True) -> Iterator[list[tuple]]:
    """Groups of 64 interleaved sessions, each span as (trace, span, parent, name, attrs, start, end)."""
    rnd = random.Random(seed)
    clock = 1_700_000_000_000_000_000
    made = 0
    while made < count:
        group = []
        for _ in range(min(64, count - made)):
            made += 1
            trace_id, root = rnd.randbytes(16), rnd.randbytes(8)
            steps = session_steps(rnd, 10, looping=rnd.random() < 0.1)
            group.append((trace_id, root, f"serve-{made}", steps))
        cursors = [0] * len(group)
        live = list(range(len(group)))
        spans: list[tuple] = []
        while live:
            pick = rnd.randrange(len(live))
            trace_id, root, session_id, steps = group[live[pick]]
            spec = steps[cursors[live[pick]]]
            cursors[live[pick]] += 1
            clock += 1_000_000
            attrs = {**spec.start, **spec.end}
            attrs = _foreign(attrs, rnd) if foreign else {**attrs, A.SESSION_ID: session_id}
            spans.append((trace_id, rnd.randbytes(8), root, spec.name, attrs, clock, clock + 500_000))
            if cursors[live[pick]] == len(steps):
                if roots:
                    spans.append((trace_id, root, b"", "invoke_agent bench",
                                  {A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.GEN_AI_CONVERSATION_ID: session_id},
                                  clock - 20_000_000, clock + 1_000_000))
                live[pick] = live[-1]
                live.pop()
        yield spans


def bodies(count: int, foreign: bool, roots: bool = True) -> tuple[list[bytes], int]:
    """Protobuf bodies of 100 spans; and the number of spans in them."""
    out: list[bytes] = []
    total = 0
    pending: list[tuple] = []

    def flush() -> None:
        request = ExportTraceServiceRequest()
        scope = request.resource_spans.add().scope_spans.add()
        for trace_id, span_id, parent, name, attrs, start, end in pending:
            span = scope.spans.add(trace_id=trace_id, span_id=span_id, parent_span_id=parent, name=name,
                                   start_time_unix_nano=start, end_time_unix_nano=end)
            span.attributes.extend(KeyValue(key=key, value=_value(value)) for key, value in attrs.items())
        out.append(request.SerializeToString())
        pending.clear()

    for group in sessions(count, foreign, roots=roots):
        for span in group:
            pending.append(span)
            total += 1
            if len(pending) == _BODY_SPANS:
                flush()
    if pending:
        flush()
    return out, total


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _health(port: int) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/health")
    return json.loads(connection.getresponse().read())


class _Connection(http.client.HTTPConnection):
    """Headers and body leave in two writes: without TCP_NODELAY, Nagle holds the body back."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _send(port: int, parts: list[bytes]) -> None:
    connection = _Connection("127.0.0.1", port, timeout=60)
    for body in parts:
        while True:
            connection.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                break
            if response.status != 503:
                raise RuntimeError(f"serve answered {response.status}")
            time.sleep(float(response.getheader("Retry-After") or 1))


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spans_per_second(payload: list[bytes], spans: int, sessions_count: int,
                     server_cpu: int | None) -> tuple[float, float]:
    """Spans per wall-clock second, and per second of CPU the service itself used."""
    with _serve(server_cpu, "--queue-spans", str(spans + 1)) as (port, child):
        shares = [payload[index::_CONNECTIONS] for index in range(_CONNECTIONS)]
        cpu_before = _cpu_seconds(child.pid)
        start = time.perf_counter()
        senders = [threading.Thread(target=_send, args=(port, share)) for share in shares]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        while True:
            state = _health(port)
            if state["verdicts"] >= sessions_count and state["queued_spans"] == 0:
                break
            time.sleep(0.005)
        wall = time.perf_counter() - start
        return spans / wall, spans / max(_cpu_seconds(child.pid) - cpu_before, 1e-9)


def one_trace(start: int, count: int) -> bytes:
    """``count`` one-answer sessions (each its own conversation id), all in one trace: a protobuf body."""
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for index in range(start, start + count):
        span = scope.spans.add(trace_id=b"\x07" * 16, span_id=(index + 1).to_bytes(8, "big"),
                               parent_span_id=b"\xfe" * 8, name="chat",
                               start_time_unix_nano=1_700_000_000_000_000_000 + index,
                               end_time_unix_nano=1_700_000_000_000_001_000 + index)
        span.attributes.append(KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")))
        span.attributes.append(KeyValue(key="gen_ai.conversation.id", value=AnyValue(string_value=f"conv-{index}")))
        span.attributes.append(KeyValue(key="gen_ai.response.finish_reasons", value=_value(["stop"])))
    return request.SerializeToString()


def health_while_judging(sessions_count: int, server_cpu: int | None) -> list[float]:
    """/health's answer times (seconds) while one trace of ``sessions_count`` sessions is judged."""
    part = min(10_000, sessions_count)
    payload = [one_trace(start, part) for start in range(0, sessions_count, part)]
    latencies: list[float] = []
    with _serve(server_cpu, "--settle", "0.5") as (port, _):
        sender = threading.Thread(target=_send, args=(port, payload))
        sender.start()
        while True:
            started = time.perf_counter()
            state = _health(port)
            latencies.append(time.perf_counter() - started)
            if not sender.is_alive() and state["verdicts"] >= sessions_count:
                break
            time.sleep(0.01)
        sender.join()
    return latencies


@contextlib.contextmanager
def _serve(cpu: int | None, *options: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The real ``agentguard serve`` in a child (pinned to ``cpu`` unless None), its verdict
    exporters off, listening: its port and the child; stopped at the end of the block."""
    port = _free_port()
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_AGENTGUARD_FINGERPRINT_KEY": "bench"}
    command = [sys.executable, "-m", "otel_agentguard", "serve", "--listen", f"127.0.0.1:{port}",
               "--grpc-listen", "off", *options]
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             preexec_fn=(lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _health(port)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield port, child
    finally:
        child.terminate()
        child.wait(30)


def bytes_per_live_session(count: int) -> float:
    from otel_agentguard.judge.policy import coerce_policy
    from otel_agentguard.serve.decode import parse
    from otel_agentguard.serve.sessions import LiveSessions

    payload, _ = bodies(count, foreign=True, roots=False)  # without their root spans the sessions stay open
    batches = [batch for body in payload for batch in parse(body, "application/x-protobuf")]
    tracker = LiveSessions(coerce_policy(None), max_traces=count * 2)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for batch in batches:
        tracker.add(batch)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert tracker.open_traces == count, tracker.open_traces
    del batches
    return grown / count


def decode_only(payload: list[bytes], spans: int) -> float:
    """Spans per CPU-second of the OTLP decode alone (``parse`` of each body, nothing judged): the
    floor under what the service can do, measured on the same bodies beside it."""
    from otel_agentguard.serve.decode import PROTOBUF, parse

    started = time.process_time()
    for body in payload:
        parse(body, PROTOBUF)
    return spans / max(time.process_time() - started, 1e-9)


def run(report: Report, repeats: int, quick: bool) -> None:
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        report.note("7 serve: skipped (pip install 'otel-agentguard[serve]')")
        return
    sessions_count = 50 if _harness.SMOKE else 2_000 if quick else 10_000
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    server_cpu = cpus[-1] if cpus else None
    everything = set(range(os.cpu_count() or 1))
    client_cpus = everything - {server_cpu} if len(everything) > 1 and server_cpu is not None else None
    if client_cpus and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, client_cpus)  # the client on the other core: only the service is measured
    try:
        for foreign, label in ((False, "spans our instrumentation writes"), (True, "foreign GenAI spans, raw args")):
            payload, spans = bodies(sessions_count, foreign)
            progress(f"serve: {spans:,} spans in {len(payload):,} protobuf bodies ({label}), {repeats} repeats")
            rates, per_cpu, decoded, shares = [], [], [], []
            for index in range(repeats):
                wall, cpu = spans_per_second(payload, spans, sessions_count, server_cpu)
                bare = decode_only(payload, spans)
                rates.append(wall)
                per_cpu.append(cpu)
                decoded.append(bare)
                shares.append(cpu / bare)
                progress(f"serve: repeat {index + 1}: {wall:,.0f} spans/s, {cpu:,.0f} per CPU-second "
                         f"(the decode alone: {bare:,.0f})")
            report.add("7 serve", f"agentguard serve, one core, 100-span protobuf bodies, {label}", rates,
                       "spans/s")
            report.add("7 serve", f"  the same, per second of CPU the serve process used ({label})", per_cpu,
                       "spans/CPU-s", ">= 10,000", lambda m: m >= 10_000)
            report.add("7 serve", f"  the OTLP decode alone, same bodies, per CPU-second ({label})", decoded,
                       "spans/CPU-s")
            report.add("7 serve", f"  serve / the decode alone ({label})", shares, "x")
        one_trace = 1_000 if _harness.SMOKE else 20_000 if quick else 100_000
        worst, p99 = [], []
        for index in range(repeats):
            answers = sorted(health_while_judging(one_trace, server_cpu))
            worst.append(answers[-1] * 1000)
            p99.append(answers[int(len(answers) * 0.99)] * 1000)
            progress(f"serve: repeat {index + 1}: /health during a trace of {one_trace:,} sessions: "
                     f"{len(answers)} polls, p99 {p99[-1]:.0f} ms, worst {worst[-1]:.0f} ms")
        report.add("7 serve", f"/health answer while one trace of {one_trace:,} sessions is judged, worst", worst,
                   "ms", "<= 100", lambda m: m <= 100)
        report.add("7 serve", "  the same, 99th percentile", p99, "ms")
    finally:
        if cpus and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, set(cpus))
    live = 50 if _harness.SMOKE else 500 if quick else 2_000
    samples = [bytes_per_live_session(live) for _ in range(2)]
    report.add("7 serve", f"memory per live session in serve ({live:,} open, 11 foreign spans each)",
               [s / 1024 for s in samples], "KiB")
