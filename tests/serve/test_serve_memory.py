"""A memory limit in bytes: above the soft threshold new spans are refused (503 + Retry-After,
gRPC UNAVAILABLE) and retried by the sender; the resident memory stays under the hard one."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from serve_support import start_serve_process

pytest.importorskip("aiohttp")

from otel_agentguard.judge.policy import coerce_policy  # noqa: E402
from otel_agentguard.serve.decode import from_request  # noqa: E402
from otel_agentguard.serve.memory import MemoryLimit, parse_size  # noqa: E402
from otel_agentguard.serve.service import JudgeService  # noqa: E402

MiB = 1 << 20


@pytest.mark.parametrize(("text", "size"), [("512MiB", 512 * MiB), ("1.5G", int(1.5 * (1 << 30))), ("800MB", 800_000_000),
                                            ("4096", 4096), (" 2 gib ", 2 << 30)])
def test_sizes_are_read_with_their_units(text, size):
    assert parse_size(text) == size


def test_a_bad_size_is_named_on_the_command_line():
    done = subprocess.run([sys.executable, "-m", "otel_agentguard", "serve", "--memory-limit", "lots"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--memory-limit" in done.stderr and "'lots' is not a size" in done.stderr
    assert "Traceback" not in done.stderr


def _request(trace: int, spans: int = 100, pad: int = 2000) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for index in range(spans):
        span = scope.spans.add(trace_id=trace.to_bytes(16, "big"), span_id=(index + 1).to_bytes(8, "big"),
                               parent_span_id=b"\xff" * 8,  # no root: the trace stays open
                               name="execute_tool lookup", start_time_unix_nano=1, end_time_unix_nano=2)
        span.attributes.add(key="gen_ai.operation.name", value={"string_value": "execute_tool"})
        span.attributes.add(key="gen_ai.tool.call.arguments", value={"string_value": f'{{"pad": "{"x" * pad}{index}"}}'})
    return request


class _Writer:
    delivery = None

    def write(self, judged):
        pass


def test_above_the_soft_limit_the_service_refuses_and_below_it_accepts():
    used = [0]
    service = JudgeService(coerce_policy(None), _Writer(), memory=MemoryLimit(100, 20, measure=lambda: used[0]))
    batches = from_request(_request(1, spans=2, pad=1))
    used[0] = 80
    assert service.offer(batches)
    used[0] = 81
    assert not service.offer(batches)


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc")
def test_a_sender_that_tries_to_exceed_the_limit_gets_503_and_the_memory_stays_under_it(tmp_path):
    limit = 150 * MiB
    serve = start_serve_process(tmp_path, "--memory-limit", "150MiB", "--memory-spike", "40MiB",
                                "--settle", "600", "--idle-timeout", "600")
    statuses, peak = [], 0
    try:
        for trace in range(1, 700):
            body = _request(trace).SerializeToString()
            response = httpx.post(serve.url, content=body, headers={"Content-Type": "application/x-protobuf"})
            statuses.append(response.status_code)
            if response.status_code == 503:
                assert response.headers["Retry-After"]
            peak = max(peak, _rss(serve.process.pid))
        health = httpx.get(serve.url.replace("/v1/traces", "/health"), timeout=5)
    finally:
        code, err = serve.stop()
    assert code == 0, err
    assert health.status_code == 200
    assert statuses.count(200) > 50 and statuses.count(503) > 50  # took what fitted, then refused
    assert peak < limit, f"peak RSS {peak / MiB:.0f} MiB"
