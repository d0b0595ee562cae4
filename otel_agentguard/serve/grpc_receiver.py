"""OTLP/gRPC receiver for traces, when ``grpcio`` is installed (``otel-agentguard[serve-grpc]``).

The same queue and rules as OTLP/HTTP: INVALID_ARGUMENT for a request it cannot
use, UNAVAILABLE (retryable) when the queue is full, UNAUTHENTICATED without the
bearer token when one is configured.
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otel_agentguard.serve.decode import BadRequest, from_request
from otel_agentguard.serve.service import LARGE_SPANS, JudgeService


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, service: JudgeService, token: str | None):
        self._service = service
        self._expected = f"Bearer {token}".encode("utf-8", "surrogateescape") if token else None

    async def Export(self, request: ExportTraceServiceRequest, context: Any) -> ExportTraceServiceResponse:  # noqa: N802
        if self._expected is not None:
            metadata = dict(context.invocation_metadata() or ())
            given = str(metadata.get("authorization", "")).encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, self._expected):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        try:
            if _spans_in(request) > LARGE_SPANS:  # reading it takes a while: not on the event loop
                batches = await asyncio.to_thread(from_request, request)
            else:
                batches = from_request(request)
        except BadRequest as exc:
            self._service.rejected()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if not self._service.offer(batches):
            await context.abort(grpc.StatusCode.UNAVAILABLE, "agentguard serve is busy: retry later")
        return ExportTraceServiceResponse()


def _spans_in(request: ExportTraceServiceRequest) -> int:
    """How many spans a parsed request holds (its top levels only: no span is read)."""
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


def create_server(service: JudgeService, address: str, *, token: str | None, max_body_bytes: int) -> Any:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_body_bytes)])
    # protoc's generated gRPC module carries no annotations.
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
        _TraceService(service, token), server)
    server.add_insecure_port(address)
    return server
