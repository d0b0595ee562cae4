"""Start the receivers, run until SIGTERM or SIGINT, then drain and flush.

On a stop signal the service first answers new requests with a retryable status
(a Collector in front retries them on another replica, or later), lets the
requests in flight finish, judges everything it holds and flushes the verdict
exporters before the process exits.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from otel_agentguard.environment_variables import OTEL_AGENTGUARD_SERVE_TOKEN
from otel_agentguard.judge.policy import Policy
from otel_agentguard.serve.delivery import Delivery
from otel_agentguard.serve.http import DEFAULT_MAX_BODY_BYTES, create_app
from otel_agentguard.serve.memory import MemoryLimit
from otel_agentguard.serve.service import JudgeService
from otel_agentguard.serve.verdicts import VerdictWriter, providers_from_environment

logger = logging.getLogger(__name__)

DEFAULT_LISTEN = "127.0.0.1:4318"
DEFAULT_GRPC_LISTEN = "127.0.0.1:4317"
# Young collections every 10,000 objects, middle ones every 100,000: each one short enough (a few
# tens of milliseconds at most) not to hold the event loop, and rare enough not to cost throughput.
_GC_THRESHOLDS = (10_000, 10, 10)
# Large requests are read and judged in threads. The event loop takes the GIL back once per turn
# of the loop and waits up to one switch interval for it each time (5 ms by default): a /health
# answer takes about a dozen turns. A shorter interval keeps it in milliseconds.
_SWITCH_INTERVAL_S = 0.0005


@dataclass
class ServeOptions:
    listen: str = DEFAULT_LISTEN
    grpc_listen: str | None = DEFAULT_GRPC_LISTEN  # None: no gRPC receiver
    profile: str | None = None
    idle_timeout_s: float = 30.0
    settle_s: float = 2.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    queue_spans: int = 200_000
    max_traces: int = 10_000
    read_timeout_s: float = 10.0  # a request's headers, and its body, each within this
    memory_limit_bytes: int | None = None  # resident memory: above limit - spike, 503s
    memory_spike_bytes: int | None = None  # default: a fifth of the limit
    token: str | None = None  # default: $OTEL_AGENTGUARD_SERVE_TOKEN


def split_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:4318`` for IPv6) as a host and a port; ValueError names the problem."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def grpc_available() -> bool:
    try:
        import grpc  # noqa: F401
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc  # noqa: F401
    except ImportError:
        return False
    return True


async def run(
    policy: Policy,
    options: ServeOptions,
    writer: VerdictWriter,
    *,
    stop: asyncio.Event | None = None,
    ready: Any = None,
    meter_provider: Any = None,
) -> JudgeService:
    """Serve until ``stop`` is set (or a signal arrives), then drain. Returns the service."""
    token = options.token if options.token is not None else (os.environ.get(OTEL_AGENTGUARD_SERVE_TOKEN) or None)
    service = JudgeService(
        policy, writer, profile=options.profile, idle_timeout_s=options.idle_timeout_s, settle_s=options.settle_s,
        queue_spans=options.queue_spans, max_traces=options.max_traces, meter_provider=meter_provider,
        memory=MemoryLimit(options.memory_limit_bytes, options.memory_spike_bytes)
        if options.memory_limit_bytes else None,
    )
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(signum, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests), or Windows
            pass
    service.start()
    host, port = split_address(options.listen)
    app = create_app(service, token=token, max_body_bytes=options.max_body_bytes,
                     body_timeout_s=options.read_timeout_s)
    # aiohttp's keep-alive timer runs from the moment a connection is idle, and partial headers
    # do not reset it: it is the header read timeout too (a slow sender cannot hold a connection).
    runner = web.AppRunner(app, auto_decompress=False, access_log=None, handle_signals=False,
                           keepalive_timeout=options.read_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = [f"http://{_bound(site)}/v1/traces"]
    grpc_server = None
    if options.grpc_listen and grpc_available():
        from otel_agentguard.serve.grpc_receiver import create_server

        grpc_server = create_server(service, options.grpc_listen, token=token, max_body_bytes=options.max_body_bytes)
        await grpc_server.start()
        bound.append(f"grpc://{options.grpc_listen}")
    logger.info("agentguard serve: receiving on %s", ", ".join(bound))
    if ready is not None:
        ready(site, service)
    try:
        await stop.wait()
    finally:
        await service.drain_begin()
        if grpc_server is not None:
            await grpc_server.stop(grace=5)
        await runner.cleanup()  # stops listening, lets requests in flight finish
        await service.drain()
    return service


def _bound(site: web.TCPSite) -> str:
    server = site._server  # noqa: SLF001 - aiohttp exposes the bound port only here
    sockets = getattr(server, "sockets", None) or ()
    for sock in sockets:
        host, port = sock.getsockname()[:2]
        return f"{host}:{port}"
    return site.name


def serve(policy: Policy, options: ServeOptions) -> int:
    """Run the service in this process until a stop signal; exit status 0."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    delivery = Delivery()
    tracer_provider, meter_provider = providers_from_environment(delivery)
    writer = VerdictWriter(tracer_provider, meter_provider, delivery)
    # Buffered traces are many small dicts that live for seconds and hold no cycles: keep the
    # cyclic collector off what was loaded at startup, and let it run less often.
    gc.collect()
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLDS)
    sys.setswitchinterval(_SWITCH_INTERVAL_S)
    try:
        service = asyncio.run(run(policy, options, writer, meter_provider=meter_provider))
    finally:
        writer.shutdown()
    counts = service.sessions.counts
    delivered = delivery.snapshot()
    logger.info("agentguard serve: verdicts exported %d, dropped %d (export attempts retried: %d)",
                delivered["exported"], delivered["dropped"], delivered["retried"])
    logger.info("agentguard serve: stopped after %d verdicts (spans judged %d, reopened %d, late %d, unreadable %d, "
                "over limit %d)", service.verdicts_written, counts.judged, counts.reopened, counts.late,
                counts.unreadable, counts.over_limit)
    return 0
