"""OTLP/HTTP receiver for traces: ``POST /v1/traces`` on aiohttp.

Behaves as the OTLP specification asks of a server: protobuf or JSON bodies,
optionally gzip; the response is encoded like the request; 400 with a
``google.rpc.Status`` message for a body it cannot read, 413 for a body over the
limit (before or after decompression), 503 with ``Retry-After`` when the queue is
full (a status every OTLP exporter retries), 401 without the bearer token when
one is configured, 408 for a body that does not arrive in time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json

from aiohttp import web
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from otel_agentguard.serve.decode import JSON, PROTOBUF, BadRequest, TooLarge, TraceBatch, decompress, parse
from otel_agentguard.serve.service import JudgeService

TRACES_PATH = "/v1/traces"
DEFAULT_MAX_BODY_BYTES = 16 << 20
_LARGE_BODY_BYTES = 256 << 10  # about 2,000 spans: decoded in a thread


def _read(body: bytes, encoding: str, content_type: str, max_body_bytes: int) -> list[TraceBatch]:
    return parse(decompress(body, encoding, max_body_bytes), content_type)


def _is_json(request: web.Request) -> bool:
    return request.content_type == JSON


def _answer(request: web.Request, status: int, code: int, message: str, **headers: str) -> web.Response:
    if _is_json(request):
        body = json.dumps({"code": code, "message": message}).encode()
        return web.Response(status=status, body=body, content_type=JSON, headers=headers)
    body = status_pb2.Status(code=code, message=message).SerializeToString()
    return web.Response(status=status, body=body, content_type=PROTOBUF, headers=headers)


def create_app(service: JudgeService, *, token: str | None = None,
               max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, body_timeout_s: float = 10.0) -> web.Application:
    expected = f"Bearer {token}".encode("utf-8", "surrogateescape") if token else None
    ok_protobuf = ExportTraceServiceResponse().SerializeToString()

    async def export(request: web.Request) -> web.Response:
        if expected is not None:
            # (aiohttp keeps a header's bytes that are not UTF-8 as surrogates: compared as sent)
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, expected):
                return _answer(request, 401, code_pb2.UNAUTHENTICATED, "missing or wrong bearer token",
                               **{"WWW-Authenticate": "Bearer"})
        try:
            # aiohttp answers 413 itself beyond client_max_size
            body = await asyncio.wait_for(request.read(), body_timeout_s)
            encoding = request.headers.get("Content-Encoding", "")
            content_type = request.headers.get("Content-Type", "")
            if len(body) > _LARGE_BODY_BYTES:  # reading it takes a while: not on the event loop
                batches = await asyncio.to_thread(_read, body, encoding, content_type, max_body_bytes)
            else:
                batches = _read(body, encoding, content_type, max_body_bytes)
        except asyncio.TimeoutError:
            return _answer(request, 408, code_pb2.DEADLINE_EXCEEDED,
                           f"the body did not arrive within {body_timeout_s:g} s", Connection="close")
        except TooLarge as exc:
            return _answer(request, 413, code_pb2.RESOURCE_EXHAUSTED, str(exc))
        except BadRequest as exc:
            service.rejected()
            return _answer(request, 400, code_pb2.INVALID_ARGUMENT, str(exc))
        if not service.offer(batches):
            return _answer(request, 503, code_pb2.UNAVAILABLE, "agentguard serve is busy: retry later",
                           **{"Retry-After": str(service.retry_after_s)})
        if _is_json(request):
            return web.Response(status=200, body=b"{}", content_type=JSON)
        return web.Response(status=200, body=ok_protobuf, content_type=PROTOBUF)

    async def health(request: web.Request) -> web.Response:
        delivery = service.writer.delivery
        return web.json_response({"status": "ok", "queued_spans": service.queued_spans,
                                  "open_traces": service.sessions.open_traces,
                                  "verdicts": service.verdicts_written,
                                  "delivery": delivery.snapshot() if delivery is not None else None,
                                  "spans": dataclasses.asdict(service.sessions.counts)})

    app = web.Application(client_max_size=max_body_bytes)
    app.router.add_post(TRACES_PATH, export)
    app.router.add_get("/health", health)
    return app
