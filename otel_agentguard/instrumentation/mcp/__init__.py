"""MCP client tool calls as guarded ``execute_tool`` steps.

Every ``tools/call`` an MCP client makes (``mcp.Client.call_tool``,
``ClientSession.call_tool``, ``ClientSessionGroup.call_tool``) becomes exactly
one ``execute_tool`` step of the agent's session, carrying the argument
fingerprint, keys and size, the result fingerprint, an empty-result flag and
the tool's effect; the guard processor adds the session id and the sequence
number when the span starts. Raw arguments and results go on the span only
with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

No second span per call: mcp 2.x traces calls itself, and its span is
enriched instead. Over a transport (stdio, HTTP, memory streams) that is the
client's ``MCP send tools/call {name}`` span, which also gets
``gen_ai.operation.name = execute_tool``; with a server in the same process
(``mcp.Client(server)``) it is the server's ``tools/call {name}`` span. When a
JSON-RPC call is also served in this process, the server's span is marked
nested so the call counts once. mcp 1.x makes no spans: there the call gets an
``execute_tool {name}`` span of ours.

The effect: a contract in the policy (``[tools.<name>] effect``) wins; else
the tool's MCP annotations as this client session last listed them
(``tools/list``): ``readOnlyHint: true`` is ``read``, ``destructiveHint: true``
or ``readOnlyHint: false`` is ``write``; else none. A failed call (a result
with ``isError``, or an exception) marks the step failed (``error.type``,
status ERROR); what the caller gets is unchanged.

Usage::

    from otel_agentguard.instrumentation.mcp import MCPInstrumentor

    MCPInstrumentor().instrument()      # or run under opentelemetry-instrument
    ...
    MCPInstrumentor().uninstrument()

mcp 2.x records its spans with the global tracer provider: install the guard
there (``ag.install()`` does by default). ``tracer_provider=`` only applies to
the spans this package makes itself (mcp 1.x, or when mcp's span does not
record). Turn it off with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentguard_mcp``.
"""

from __future__ import annotations

from typing import Any

from otel_agentguard.instrumentation._base import GuardInstrumentor, PatchTarget
from otel_agentguard.instrumentation.mcp import _wrappers
from otel_agentguard.instrumentation.mcp.package import _instruments

__all__ = ["MCPInstrumentor"]


class MCPInstrumentor(GuardInstrumentor):
    """Instruments MCP client tool calls (mcp 1.x and 2.x)."""

    instruments = _instruments
    targets = (
        PatchTarget("mcp.client.session", "ClientSession.call_tool", _wrappers.call_tool),
        PatchTarget("mcp.client.session", "ClientSession.list_tools", _wrappers.session_list_tools),
        # mcp 2.x only: these modules do not exist in 1.x, so their hooks never fire there.
        PatchTarget("mcp.client.client", "Client.list_tools", _wrappers.client_list_tools),
        PatchTarget("mcp.shared.jsonrpc_dispatcher", "otel_span", _wrappers.otel_span),
        PatchTarget("mcp.server._otel", "otel_span", _wrappers.otel_span),
        PatchTarget("mcp.server._otel", "OpenTelemetryMiddleware.__call__", _wrappers.middleware_call),
    )

    def _uninstrument_extra(self) -> None:
        _wrappers.reset_state()

    def _instrument_extra(self, context: Any) -> None:
        _wrappers.reset_state()
