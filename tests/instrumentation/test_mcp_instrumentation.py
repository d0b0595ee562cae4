"""MCP client tool calls as guarded steps, against a real in-process mcp server.

mcp 2.x records its own spans with the *global* tracer provider (its tracer is
``get_tracer("mcp-python-sdk")`` at import), and the instrumentation enriches
those spans. So this module needs a global SDK provider; it can be set only
once per process, which would leave other test files unable to set theirs. The
``switchboard`` fixture therefore installs one forwarding processor on the
global provider: it hands spans to the running test's ``GuardedTracing``
(exporter + guard) and to nothing otherwise. If some other module already set
a global SDK provider, the switchboard rides on it; if this module set it, it
is unset again afterwards, as OpenTelemetry's own test utilities do.

Two transports are exercised wherever the path differs: ``in_process``
(``mcp.Client(server)``: direct dispatch, mcp's only span is the server's
``tools/call`` span) and ``json_rpc`` (``mode="legacy"``: JSON-RPC over memory
streams, mcp's client span ``MCP send tools/call`` plus the server's span).
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
import wrapt
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind, StatusCode

pytest.importorskip("mcp")

import mcp.client.client  # noqa: E402
import mcp.client.session  # noqa: E402
import mcp.server._otel  # noqa: E402
import mcp.shared.jsonrpc_dispatcher  # noqa: E402
from mcp import Client, ClientSession, MCPError  # noqa: E402
from mcp.client._memory import InMemoryTransport  # noqa: E402  (what Client(server, mode="legacy") uses)
from mcp.server._otel import OpenTelemetryMiddleware  # noqa: E402
from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402
from mcp.types import ToolAnnotations  # noqa: E402

from otel_agentguard import attributes as A  # noqa: E402
from otel_agentguard.environment_variables import OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT  # noqa: E402
from otel_agentguard.exporters import encode_request  # noqa: E402
from otel_agentguard.instrumentation.mcp import MCPInstrumentor, _wrappers  # noqa: E402
from otel_agentguard.judge.policy import Policy, parse_policy  # noqa: E402
from otel_agentguard.testing import GuardedTracing  # noqa: E402

SECRET = "sk-live-planted-5ecret-7319"
REFUSED = -32001
OUR_SCOPE = "otel_agentguard.instrumentation.mcp"
MCP_SCOPE = "mcp-python-sdk"
TRANSPORTS = {"in_process": "auto", "json_rpc": "legacy"}


# --- the server ------------------------------------------------------------------------------------------


def make_server(*, otel_middleware: bool = True) -> MCPServer:
    server = MCPServer("orders")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def lookup_order(order_id: str) -> str:
        return f"order {order_id}: shipped"

    @server.tool(annotations=ToolAnnotations(destructiveHint=True))
    def cancel_order(order_id: str) -> str:
        return f"order {order_id}: cancelled"

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False))
    def add_note(order_id: str, note: str) -> str:
        return f"note on {order_id}: {note}"

    @server.tool()
    def search(query: str) -> list[str]:
        return []

    @server.tool()
    def flaky(attempt: int) -> str:
        raise ToolError(f"backend down (attempt {attempt})")

    @server.tool()
    def refuse(reason: str) -> str:
        raise MCPError(code=REFUSED, message=f"refused: {reason}")

    @server.tool()
    async def slow(seconds: float) -> str:
        await anyio.sleep(seconds)
        return "late"

    if not otel_middleware:  # what an mcp 1.x server looks like: no spans of its own
        server.middleware[:] = [m for m in server.middleware if not isinstance(m, OpenTelemetryMiddleware)]
    return server


def connect(server: MCPServer, transport: str) -> Client:
    return Client(server, mode=TRANSPORTS[transport])


def run(agent: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(agent)


def structured(text: Any) -> dict[str, Any]:
    """What MCPServer returns as structured content for a tool annotated ``-> str`` / ``-> list``."""
    return {"result": text}


# --- tracing: a global provider that forwards to the running test's GuardedTracing -----------------------


class Switchboard(SpanProcessor):
    """The one processor this module adds to the global provider; forwards to the current test only."""

    def __init__(self) -> None:
        self.targets: tuple[SpanProcessor, ...] = ()

    def route(self, tracing: GuardedTracing | None) -> None:
        # Same order as GuardedTracing's own provider: exporter, then the guard.
        self.targets = () if tracing is None else (SimpleSpanProcessor(tracing.exporter), tracing.processor)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        for target in self.targets:
            target.on_start(span, parent_context=parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        for target in self.targets:
            target.on_end(span)

    def shutdown(self) -> None:
        self.targets = ()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@pytest.fixture(scope="module")
def switchboard() -> Iterator[Switchboard]:
    board = Switchboard()
    current = trace.get_tracer_provider()
    owned = not isinstance(current, TracerProvider)
    if owned:
        provider = TracerProvider()
        provider.add_span_processor(board)
        trace.set_tracer_provider(provider)
    else:
        current.add_span_processor(board)  # someone set an SDK provider already: ride on it
    yield board
    board.route(None)
    if owned:
        # Unset it again so later test files can set their own (what opentelemetry's
        # test utilities do in reset_trace_globals).
        trace._TRACER_PROVIDER_SET_ONCE = trace.Once()  # noqa: SLF001
        trace._TRACER_PROVIDER = None  # noqa: SLF001


@pytest.fixture
def policy(request: pytest.FixtureRequest) -> Policy | None:
    return getattr(request, "param", None)


@pytest.fixture
def tracing(switchboard: Switchboard, policy: Policy | None) -> Iterator[GuardedTracing]:
    guarded = GuardedTracing(policy=policy)
    switchboard.route(guarded)
    instrumentor = MCPInstrumentor()
    instrumentor.instrument(tracer_provider=guarded.tracer_provider)
    yield guarded
    instrumentor.uninstrument()
    switchboard.route(None)
    guarded.shutdown()


@pytest.fixture(params=sorted(TRANSPORTS))
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _quiet_server_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="mcp")  # the failing tools log their tracebacks


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def execute_tool_spans(tracing: GuardedTracing) -> list[ReadableSpan]:
    return [s for s in tracing.spans() if attrs(s).get(A.GEN_AI_OPERATION_NAME) == A.OP_EXECUTE_TOOL]


def steps(tracing: GuardedTracing) -> list[ReadableSpan]:
    """The tool spans the judge counts as steps, in sequence order."""
    found = [s for s in execute_tool_spans(tracing) if not attrs(s).get(A.NESTED_STEP)]
    return sorted(found, key=lambda s: attrs(s)[A.SEQUENCE])


def sequences(spans: list[ReadableSpan]) -> tuple[int, ...]:
    return tuple(attrs(s)[A.SEQUENCE] for s in spans)


def exported_bytes(tracing: GuardedTracing) -> bytes:
    return json.dumps(encode_request(tracing.spans())).encode()


# --- one step per call, on mcp's own span ------------------------------------------------------------------


def test_each_call_is_one_step_on_mcps_own_span(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()

    async def agent() -> None:
        async with connect(server, transport) as client:
            await client.list_tools()
            with tracing.session("s1"):
                await client.call_tool("lookup_order", {"order_id": "A1"})
                await client.call_tool("search", {"query": "late parcels"})

    run(agent)
    policy = tracing.processor.policy
    found = steps(tracing)
    assert [attrs(s)[A.GEN_AI_TOOL_NAME] for s in found] == ["lookup_order", "search"]
    # mcp's span, enriched: no span of ours, and exactly one counted span per tools/call.
    assert all(s.instrumentation_scope.name == MCP_SCOPE for s in found)
    assert not [s for s in tracing.spans() if s.instrumentation_scope.name == OUR_SCOPE]
    expected_kind = SpanKind.SERVER if transport == "in_process" else SpanKind.CLIENT
    assert [s.kind for s in found] == [expected_kind, expected_kind]
    session_span = tracing.session_span("s1")
    assert all(s.parent is not None and s.parent.span_id == session_span.context.span_id for s in found)

    lookup, search = (attrs(s) for s in found)
    lookup_args = policy.fingerprinter("lookup_order").arguments({"order_id": "A1"})
    assert lookup[A.TOOL_ARGS_FINGERPRINT] == lookup_args.fingerprint
    assert tuple(lookup[A.TOOL_ARGS_KEYS]) == ("order_id",)
    assert lookup[A.TOOL_ARGS_SIZE] == lookup_args.size
    assert lookup[A.TOOL_RESULT_FINGERPRINT] == policy.fingerprinter("lookup_order").result(
        structured("order A1: shipped")
    )
    assert lookup[A.TOOL_RESULT_EMPTY] is False
    assert lookup[A.TOOL_EFFECT] == "read"
    assert search[A.TOOL_ARGS_FINGERPRINT] == (
        policy.fingerprinter("search").arguments({"query": "late parcels"}).fingerprint
    )
    assert search[A.TOOL_RESULT_EMPTY] is True
    assert lookup[A.SESSION_ID] == search[A.SESSION_ID] == "s1"
    assert lookup[A.SEQUENCE] == 1 and search[A.SEQUENCE] > 1
    assert all(s.status.status_code is StatusCode.UNSET for s in found)
    assert tracing.verdict("s1").steps == 2


def test_server_half_of_a_json_rpc_call_in_this_process_counts_once(tracing: GuardedTracing) -> None:
    server = make_server()

    async def agent() -> None:
        async with connect(server, "json_rpc") as client:
            with tracing.session("s1"):
                await client.call_tool("lookup_order", {"order_id": "A1"})

    run(agent)
    [client_span] = steps(tracing)
    [server_span] = [s for s in execute_tool_spans(tracing) if s is not client_span]
    assert client_span.name == "MCP send tools/call lookup_order"
    assert server_span.name == "tools/call lookup_order" and server_span.kind is SpanKind.SERVER
    assert server_span.parent is not None and server_span.parent.span_id == client_span.context.span_id
    assert attrs(server_span)[A.NESTED_STEP] is True
    assert attrs(server_span)[A.SESSION_ID] == "s1"  # no stray session for the server half
    assert tracing.verdict("s1").steps == 1


def test_fingerprints_agree_across_transports(tracing: GuardedTracing) -> None:
    server = make_server()

    async def agent() -> None:
        for transport in TRANSPORTS:
            async with connect(server, transport) as client:
                await client.list_tools()
                with tracing.session(transport):
                    await client.call_tool("add_note", {"order_id": "A1", "note": "ring twice"})

    run(agent)
    by_transport = {attrs(s)[A.SESSION_ID]: attrs(s) for s in steps(tracing)}
    keys = (A.TOOL_ARGS_FINGERPRINT, A.TOOL_RESULT_FINGERPRINT, A.TOOL_ARGS_SIZE, A.TOOL_EFFECT)
    assert [by_transport["in_process"].get(k) for k in keys] == [by_transport["json_rpc"].get(k) for k in keys]
    assert by_transport["in_process"][A.TOOL_EFFECT] == "write"


def test_concurrent_calls_keep_their_own_fingerprints(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()
    orders = ("A1", "B2", "C3", "D4")

    async def agent() -> None:
        async with connect(server, transport) as client:
            with tracing.session("parallel"):
                async with anyio.create_task_group() as group:
                    for order in orders:
                        group.start_soon(client.call_tool, "lookup_order", {"order_id": order})

    run(agent)
    fingerprinter = tracing.processor.policy.fingerprinter("lookup_order")
    expected = {
        fingerprinter.arguments({"order_id": order}).fingerprint: fingerprinter.result(
            structured(f"order {order}: shipped")
        )
        for order in orders
    }
    found = steps(tracing)
    assert {attrs(s)[A.TOOL_ARGS_FINGERPRINT]: attrs(s)[A.TOOL_RESULT_FINGERPRINT] for s in found} == expected
    assert len(set(sequences(found))) == len(orders)


# --- effects ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "effect"),
    [
        ("lookup_order", {"order_id": "A1"}, "read"),  # readOnlyHint: true
        ("cancel_order", {"order_id": "A1"}, "write"),  # destructiveHint: true
        ("add_note", {"order_id": "A1", "note": "x"}, "write"),  # readOnlyHint: false
        ("search", {"query": "x"}, None),  # no annotations
    ],
)
def test_effect_from_tool_annotations(
    tracing: GuardedTracing, transport: str, tool: str, arguments: dict[str, Any], effect: str | None
) -> None:
    server = make_server()

    async def agent() -> None:
        async with connect(server, transport) as client:
            await client.list_tools()
            with tracing.session("s1"):
                await client.call_tool(tool, arguments)

    run(agent)
    [step] = steps(tracing)
    assert attrs(step).get(A.TOOL_EFFECT) == effect


def test_annotations_count_for_the_session_that_listed_them(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()

    async def agent() -> None:
        async with connect(server, transport) as listed, connect(server, transport) as unlisted:
            await listed.list_tools()
            with tracing.session("listed"):
                await listed.call_tool("cancel_order", {"order_id": "A1"})
            with tracing.session("unlisted"):
                await unlisted.call_tool("cancel_order", {"order_id": "A1"})

    run(agent)
    effects = {attrs(s)[A.SESSION_ID]: attrs(s).get(A.TOOL_EFFECT) for s in steps(tracing)}
    assert effects == {"listed": "write", "unlisted": None}


CONTRACT = parse_policy(
    """
version = "mcp-test"
[tools.lookup_order]
effect = "write"
[tools.search]
effect = "read"
"""
)


@pytest.mark.parametrize("policy", [CONTRACT], indirect=True)
def test_policy_contract_wins_over_annotations(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()

    async def agent() -> None:
        async with connect(server, transport) as client:
            await client.list_tools()
            with tracing.session("s1"):
                await client.call_tool("lookup_order", {"order_id": "A1"})  # annotated read-only
                await client.call_tool("search", {"query": "x"})  # not annotated
                await client.call_tool("cancel_order", {"order_id": "A1"})  # no contract: annotation

    run(agent)
    assert [attrs(s).get(A.TOOL_EFFECT) for s in steps(tracing)] == ["write", "read", "write"]


@pytest.mark.parametrize(
    ("annotations", "effect"),
    [
        (None, None),
        (ToolAnnotations(readOnlyHint=True, destructiveHint=True), "read"),
        (ToolAnnotations(destructiveHint=False), None),
        (ToolAnnotations(idempotentHint=True), None),
        ({"readOnlyHint": False}, "write"),  # a wire dict
        (SimpleNamespace(readOnlyHint=True), "read"),  # mcp 1.x models use the camelCase names
        (SimpleNamespace(destructiveHint=True), "write"),
    ],
)
def test_annotation_effect(annotations: Any, effect: str | None) -> None:
    assert _wrappers.annotation_effect(annotations) == effect


# --- the judge sees the calls --------------------------------------------------------------------------------


def test_repeated_call_is_a_tool_loop_with_its_sequence_numbers(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()

    async def agent() -> None:
        async with connect(server, transport) as client:
            with tracing.session("loop"):
                for _ in range(3):
                    await client.call_tool("lookup_order", {"order_id": "A1"})

    run(agent)
    found = steps(tracing)
    assert len(found) == 3
    verdict = tracing.verdict("loop")
    assert verdict.stop_reason == A.TOOL_LOOP
    [alert] = [a for a in verdict.alerts if a.probe == A.TOOL_LOOP]
    assert alert.evidence == sequences(found)
    [event] = [e for e in tracing.session_span("loop").events if e.name == A.STALL_EVENT]
    assert tuple((event.attributes or {})[A.EVIDENCE]) == sequences(found)


def test_distinct_calls_and_an_answer_complete(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()

    async def agent() -> None:
        async with connect(server, transport) as client:
            with tracing.session("fine"):
                await client.call_tool("lookup_order", {"order_id": "A1"})
                await client.call_tool("add_note", {"order_id": "A1", "note": "called customer"})
                await client.call_tool("lookup_order", {"order_id": "B2"})
                tracing.record_model_call(input_tokens=40, output_tokens=10)

    run(agent)
    verdict = tracing.verdict("fine")
    assert (verdict.stop_reason, verdict.alerts, verdict.steps) == (A.COMPLETED, (), 4)


# --- failures --------------------------------------------------------------------------------------------------


def test_error_result_marks_the_step_failed(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()
    results = []

    async def agent() -> None:
        async with connect(server, transport) as client:
            with tracing.session("errors"):
                for attempt in range(4):
                    results.append(await client.call_tool("flaky", {"attempt": attempt}))

    run(agent)
    # What the caller gets is untouched: the error result itself, nothing raised.
    assert [(r.is_error, r.content[0].text) for r in results] == [
        (True, f"Error executing tool flaky: backend down (attempt {attempt})") for attempt in range(4)
    ]
    found = steps(tracing)
    assert len(found) == 4
    for span in found:
        assert span.status.status_code is StatusCode.ERROR
        assert attrs(span)[A.ERROR_TYPE] == _wrappers.TOOL_ERROR
        assert attrs(span)[A.TOOL_RESULT_FINGERPRINT]
    [streak] = [a for a in tracing.verdict("errors").alerts if a.probe == A.ERROR_STREAK]
    assert streak.evidence == sequences(found)


def test_raised_error_marks_the_step_failed(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()

    async def agent() -> MCPError:
        async with connect(server, transport) as client:
            with tracing.session("raised"):
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("refuse", {"reason": "policy"})
        return raised.value

    error = run(agent)
    assert type(error) is MCPError
    assert (error.error.code, error.error.message) == (REFUSED, "refused: policy")
    [step] = steps(tracing)
    assert step.status.status_code is StatusCode.ERROR
    assert attrs(step)[A.ERROR_TYPE]
    assert A.TOOL_RESULT_FINGERPRINT not in attrs(step)
    assert tracing.verdict("raised").steps == 1


def test_timed_out_call_marks_the_step_failed(tracing: GuardedTracing, transport: str) -> None:
    # In process the server's span is cancelled, which mcp does not mark as an error.
    server = make_server()

    async def agent() -> MCPError:
        async with connect(server, transport) as client:
            with tracing.session("slow"):
                with pytest.raises(MCPError) as raised:
                    await client.call_tool("slow", {"seconds": 1.0}, read_timeout_seconds=0.05)
        return raised.value

    error = run(agent)
    assert "timed out" in str(error).lower()
    [step] = steps(tracing)
    assert step.status.status_code is StatusCode.ERROR
    assert attrs(step)[A.ERROR_TYPE]


# --- privacy -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("capture", [False, True], ids=["capture_off", "capture_on"])
def test_raw_arguments_and_results_only_with_capture(
    tracing: GuardedTracing, transport: str, monkeypatch: pytest.MonkeyPatch, capture: bool
) -> None:
    if capture:
        monkeypatch.setenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "true")
    else:
        monkeypatch.delenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, raising=False)
    server = make_server()

    async def agent() -> Any:
        async with connect(server, transport) as client:
            with tracing.session("private"):
                return await client.call_tool("add_note", {"order_id": "A1", "note": SECRET})

    result = run(agent)
    assert SECRET in result.content[0].text  # the caller gets it either way
    [step] = steps(tracing)
    assert attrs(step)[A.TOOL_ARGS_FINGERPRINT]
    assert (SECRET.encode() in exported_bytes(tracing)) is capture
    if capture:
        assert SECRET in attrs(step)[A.GEN_AI_TOOL_CALL_ARGUMENTS]
        assert SECRET in attrs(step)[A.GEN_AI_TOOL_CALL_RESULT]


# --- ClientSession itself, the 1.x entry point -----------------------------------------------------------------------


async def over_streams(server: MCPServer, body: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    """A ClientSession over memory streams, the way mcp 1.x code drives one."""
    async with InMemoryTransport(server) as (read_stream, write_stream):
        async with ClientSession(read_stream, write_stream) as session:
            await session.initialize()
            return await body(session)


def test_client_session_call_tool_is_enriched(tracing: GuardedTracing) -> None:
    server = make_server()

    async def body(session: ClientSession) -> None:
        await session.list_tools()
        with tracing.session("s1"):
            await session.call_tool("cancel_order", {"order_id": "A1"})
            await session.call_tool("flaky", {"attempt": 1})

    run(lambda: over_streams(server, body))
    cancel, flaky = steps(tracing)
    assert cancel.name == "MCP send tools/call cancel_order" and cancel.instrumentation_scope.name == MCP_SCOPE
    assert attrs(cancel)[A.TOOL_EFFECT] == "write"  # from ClientSession.list_tools
    assert attrs(cancel)[A.TOOL_RESULT_FINGERPRINT] == tracing.processor.policy.fingerprinter(
        "cancel_order"
    ).result(structured("order A1: cancelled"))
    assert attrs(cancel)[A.SESSION_ID] == "s1"
    assert flaky.status.status_code is StatusCode.ERROR and attrs(flaky)[A.ERROR_TYPE] == _wrappers.TOOL_ERROR


def test_without_mcp_spans_the_call_gets_a_span_of_ours(
    tracing: GuardedTracing, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mcp 1.x makes no spans: simulated by a server without its middleware and the 1.x switch."""
    monkeypatch.setattr(_wrappers, "mcp_traces_itself", lambda: False)
    server = make_server(otel_middleware=False)

    async def body(session: ClientSession) -> tuple[Any, MCPError]:
        await session.list_tools()
        with tracing.session("s1"):
            await session.call_tool("lookup_order", {"order_id": "A1"})
            failed = await session.call_tool("flaky", {"attempt": 1})
            with pytest.raises(MCPError) as raised:
                await session.call_tool("refuse", {"reason": "policy"})
        return failed, raised.value

    failed, error = run(lambda: over_streams(server, body))
    assert failed.is_error is True and error.error.code == REFUSED
    found = execute_tool_spans(tracing)
    assert [s.name for s in found] == ["execute_tool lookup_order", "execute_tool flaky", "execute_tool refuse"]
    assert all(s.instrumentation_scope.name == OUR_SCOPE and s.kind is SpanKind.INTERNAL for s in found)
    lookup, flaky, refuse = found
    assert attrs(lookup)[A.TOOL_EFFECT] == "read"
    assert attrs(lookup)[A.TOOL_ARGS_FINGERPRINT] == (
        tracing.processor.policy.fingerprinter("lookup_order").arguments({"order_id": "A1"}).fingerprint
    )
    assert attrs(lookup)[A.TOOL_RESULT_FINGERPRINT]
    assert sequences(found) == (1, 2, 3) and {attrs(s)[A.SESSION_ID] for s in found} == {"s1"}
    # Ours is current during the call: mcp's transport span nests under it.
    [send] = [s for s in tracing.spans() if s.name == "MCP send tools/call lookup_order"]
    assert send.parent is not None and send.parent.span_id == lookup.context.span_id
    assert A.GEN_AI_OPERATION_NAME not in attrs(send)
    assert flaky.status.status_code is StatusCode.ERROR and attrs(flaky)[A.ERROR_TYPE] == _wrappers.TOOL_ERROR
    assert refuse.status.status_code is StatusCode.ERROR and attrs(refuse)[A.ERROR_TYPE] == "MCPError"


def test_when_mcp_makes_no_span_the_call_gets_one_of_ours(tracing: GuardedTracing) -> None:
    """mcp 2.x in process with the server's tracing middleware removed: no span of mcp's at all."""
    server = make_server(otel_middleware=False)

    async def agent() -> None:
        async with connect(server, "in_process") as client:
            await client.list_tools()
            with tracing.session("s1"):
                await client.call_tool("lookup_order", {"order_id": "A1"})
                await client.call_tool("flaky", {"attempt": 1})

    run(agent)
    assert not [s for s in tracing.spans() if s.instrumentation_scope.name == MCP_SCOPE]
    lookup, flaky = execute_tool_spans(tracing)
    assert lookup.instrumentation_scope.name == OUR_SCOPE and lookup.name == "execute_tool lookup_order"
    assert lookup.parent is not None and lookup.parent.span_id == tracing.session_span("s1").context.span_id
    assert lookup.start_time is not None and lookup.end_time is not None and lookup.start_time < lookup.end_time
    assert attrs(lookup)[A.TOOL_EFFECT] == "read" and attrs(lookup)[A.TOOL_RESULT_FINGERPRINT]
    assert sequences([lookup, flaky]) == (1, 2)
    assert flaky.status.status_code is StatusCode.ERROR


# --- switches ------------------------------------------------------------------------------------------------


def test_suppressed_calls_are_left_alone(tracing: GuardedTracing, transport: str) -> None:
    server = make_server()

    async def agent() -> Any:
        async with connect(server, transport) as client:
            with suppress_instrumentation():
                return await client.call_tool("lookup_order", {"order_id": "A1"})

    assert run(agent).is_error is False
    assert tracing.spans()  # mcp still traces; we add nothing
    assert not [s for s in tracing.spans() if A.TOOL_ARGS_FINGERPRINT in attrs(s)]


def _patched_objects() -> dict[str, Any]:
    return {
        "ClientSession.call_tool": mcp.client.session.ClientSession.__dict__["call_tool"],
        "ClientSession.list_tools": mcp.client.session.ClientSession.__dict__["list_tools"],
        "Client.list_tools": mcp.client.client.Client.__dict__["list_tools"],
        "dispatcher otel_span": mcp.shared.jsonrpc_dispatcher.otel_span,
        "server otel_span": mcp.server._otel.otel_span,
        "OpenTelemetryMiddleware.__call__": OpenTelemetryMiddleware.__dict__["__call__"],
    }


def test_uninstrument_restores_mcp(switchboard: Switchboard) -> None:
    originals = _patched_objects()
    assert not [name for name, obj in originals.items() if isinstance(obj, wrapt.FunctionWrapper)]
    guarded = GuardedTracing()
    switchboard.route(guarded)
    try:
        MCPInstrumentor().instrument(tracer_provider=guarded.tracer_provider)
        patched = _patched_objects()
        assert [name for name, obj in patched.items() if isinstance(obj, wrapt.FunctionWrapper)] == list(originals)
        MCPInstrumentor().uninstrument()  # a fresh MCPInstrumentor(), as users write it
        assert all(_patched_objects()[name] is obj for name, obj in originals.items())

        server = make_server()

        async def agent() -> None:
            async with connect(server, "json_rpc") as client:
                await client.list_tools()
                await client.call_tool("lookup_order", {"order_id": "A1"})

        run(agent)
        assert [s.name for s in execute_tool_spans(guarded)] == ["tools/call lookup_order"]  # mcp's own, as is
        assert not [s for s in guarded.spans() if A.TOOL_ARGS_FINGERPRINT in attrs(s)]
    finally:
        MCPInstrumentor().uninstrument()
        switchboard.route(None)
        guarded.shutdown()


def test_entry_point_loads_the_instrumentor() -> None:
    [entry] = [
        e for e in importlib.metadata.entry_points(group="opentelemetry_instrumentor") if e.name == "agentguard_mcp"
    ]
    assert entry.load() is MCPInstrumentor
    assert tuple(MCPInstrumentor().instrumentation_dependencies()) == ("mcp >= 1.0",)


def test_enforce_mode_answers_repeated_calls_itself(switchboard: Switchboard, transport: str) -> None:
    served: list[str] = []
    server = MCPServer("orders")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def lookup_order(order_id: str) -> str:
        served.append(order_id)
        return f"order {order_id}: shipped"

    guarded = GuardedTracing(mode="enforce")
    switchboard.route(guarded)
    instrumentor = MCPInstrumentor()
    instrumentor.instrument(tracer_provider=guarded.tracer_provider)
    texts: list[str] = []
    try:
        async def agent() -> None:
            async with connect(server, transport) as client:
                with guarded.session("enforced"):
                    for _ in range(5):
                        result = await client.call_tool("lookup_order", {"order_id": "A1"})
                        texts.append(result.content[0].text)

        run(agent)
    finally:
        instrumentor.uninstrument()
        switchboard.route(None)
        guarded.shutdown()
    assert served == ["A1"] * 3  # the 4th and 5th identical calls never reached the server
    assert all("Do not call it again" in text for text in texts[3:])
    interventions = [s for s in guarded.spans() if attrs(s).get(A.INTERVENTION)]
    assert [attrs(s)[A.INTERVENTION] for s in interventions] == ["tool_loop", "tool_loop"]
    assert sorted(attrs(s)[A.SEQUENCE] for s in interventions) == [4, 5]
