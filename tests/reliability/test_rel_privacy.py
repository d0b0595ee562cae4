"""Privacy: with content capture off, no raw argument, result, prompt, system instruction, answer
or exception-message byte leaves the process: not in the exported OTLP bytes (spans and their
events), not in a log line of this package or of the OpenTelemetry SDK (captured at DEBUG), not
in a metric label. Secrets are planted through every instrumentation and ``@ag.tool``.

Each case also runs with capture on, as a control: the same search then finds the secrets the
instrumentation is documented to capture, so a search that finds nothing means nothing leaked.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
from rel_support import content_capture, exported_json

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

# Loggers that are ours to keep clean: this package's, and the OpenTelemetry SDK's (which logs
# about the attributes we set). Client libraries log their own requests at DEBUG, their business.
OUR_LOGGERS = ("otel_agentguard", "opentelemetry")


@dataclass(frozen=True)
class Secrets:
    prefix: str

    def __getattr__(self, where: str) -> str:
        if where.startswith("__"):
            raise AttributeError(where)
        return f"{self.prefix}-{where.upper()}-SECRET-{abs(hash((self.prefix, where))) % 10**8:08d}"

    def all(self, *wheres: str) -> dict[str, str]:
        return {where: getattr(self, where) for where in wheres}


WHERES = ("prompt", "system", "argument", "result", "answer", "error")


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(turns(Turn.answer("unused"))) as running:
        yield running


# --- one agent per instrumentation: each plants the secrets it can, returns where they went in ---------


def agent_tool(tracing: GuardedTracing, server: ScriptedModelServer, s: Secrets) -> None:
    @ag.tool(tracer_provider=tracing.tracer_provider)
    def lookup_card(customer: str) -> dict:
        return {"card": s.result}

    @ag.tool(tracer_provider=tracing.tracer_provider)
    def charge(customer: str) -> dict:
        raise PermissionError(f"declined for {s.error}")

    with tracing.session("tool-secrets"):
        for _ in range(3):
            lookup_card(s.argument)
        with pytest.raises(PermissionError):
            charge(s.argument)
        # A failure inside the guard whose message quotes the data it was working on.
        with mock.patch("otel_agentguard.instrumentation._tool_span.is_empty", side_effect=ValueError(f"bad result {s.result}")):
            lookup_card(s.argument)
        tracing.record_model_call(final_claims=("write",))
    with pytest.raises(RuntimeError):
        with tracing.session("session-error"):
            raise RuntimeError(f"the agent crashed on {s.error}")


def agent_openai(tracing: GuardedTracing, server: ScriptedModelServer, s: Secrets) -> None:
    import openai

    from otel_agentguard.instrumentation.openai import OpenAIInstrumentor

    @ag.tool(tracer_provider=tracing.tracer_provider)
    def lookup_card(customer: str) -> dict:
        return {"card": s.result}

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    try:
        server.script = turns(Turn.call("lookup_card", customer=s.argument), Turn.answer(f"It is {s.answer}."),
                              then=Turn.answer(f"It is {s.answer}."))
        client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        messages: list[dict] = [{"role": "system", "content": s.system}, {"role": "user", "content": s.prompt}]
        with tracing.session("openai-secrets"):
            for _ in range(3):
                message = client.chat.completions.create(model="gpt-4o", messages=messages).choices[0].message
                if not message.tool_calls:
                    break
                messages.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    result = lookup_card(**json.loads(call.function.arguments))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
            stream = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True)
            "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
            client.responses.create(model="gpt-4o", instructions=s.system, input=s.prompt)
    finally:
        instrumentor.uninstrument()


def agent_anthropic(tracing: GuardedTracing, server: ScriptedModelServer, s: Secrets) -> None:
    import anthropic

    from otel_agentguard.instrumentation.anthropic import AnthropicInstrumentor

    @ag.tool(tracer_provider=tracing.tracer_provider)
    def lookup_card(customer: str) -> dict:
        return {"card": s.result}

    AnthropicInstrumentor().instrument(tracer_provider=tracing.tracer_provider)
    try:
        server.script = turns(Turn.call("lookup_card", customer=s.argument), Turn.answer(f"It is {s.answer}."),
                              then=Turn.answer(f"It is {s.answer}."))
        tools = [{"name": "lookup_card", "description": "Look a card up.",
                  "input_schema": {"type": "object", "properties": {"customer": {"type": "string"}}}}]
        with anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0) as client, \
                tracing.session("anthropic-secrets"):
            messages: list[dict] = [{"role": "user", "content": s.prompt}]
            for _ in range(3):
                reply = client.messages.create(model="claude-test", max_tokens=100, system=s.system,
                                               messages=messages, tools=tools)
                messages.append({"role": "assistant", "content": reply.content})
                uses = [b for b in reply.content if b.type == "tool_use"]
                if not uses:
                    break
                messages.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": u.id, "content": json.dumps(lookup_card(**u.input))}
                    for u in uses]})
            with client.messages.stream(model="claude-test", max_tokens=100, system=s.system,
                                        messages=[{"role": "user", "content": s.prompt}]) as stream:
                stream.get_final_message()
    finally:
        AnthropicInstrumentor().uninstrument()


def agent_langchain(tracing: GuardedTracing, server: ScriptedModelServer, s: Secrets) -> None:
    import openai
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from otel_agentguard.instrumentation.langchain import LangChainInstrumentor

    chat_openai = pytest.importorskip("langchain_openai").ChatOpenAI

    @tool
    def lookup_card(customer: str) -> str:
        """Look a card up."""
        return f"card: {s.result}"

    @tool
    def charge(customer: str) -> str:
        """Charge a card."""
        raise PermissionError(f"declined for {s.error}")

    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    try:
        server.script = turns(Turn.call("lookup_card", customer=s.argument), Turn.answer(f"It is {s.answer}."))
        model = chat_openai(model="gpt-4o-mini", base_url=server.openai_url, api_key="test", max_retries=0,
                            timeout=openai.Timeout(10.0))
        user = {"messages": [{"role": "system", "content": s.system}, {"role": "user", "content": s.prompt}]}
        with tracing.session("langchain-secrets"):
            create_agent(model, [lookup_card, charge]).invoke(user)
            with pytest.raises(PermissionError):
                charge.invoke({"customer": s.argument})
    finally:
        instrumentor.uninstrument()


def agent_mcp(tracing: GuardedTracing, server: ScriptedModelServer, s: Secrets) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from otel_agentguard.instrumentation.mcp import MCPInstrumentor

    notes = MCPServer("notes")

    @notes.tool()
    def add_note(order_id: str, note: str) -> str:
        return f"saved {note}: {s.result}"

    @notes.tool()
    def fail(order_id: str) -> str:
        raise ToolError(f"backend down for {s.error}")

    import mcp.shared._otel
    from opentelemetry.trace import NoOpTracer

    instrumentor = MCPInstrumentor()
    instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    try:
        async def agent() -> None:
            for mode in ("auto", "legacy"):  # in process, and JSON-RPC over memory streams
                async with mcp.Client(notes, mode=mode) as client:
                    with tracing.session(f"mcp-secrets-{mode}"):
                        await client.call_tool("add_note", {"order_id": "A1", "note": s.argument})
                        await client.call_tool("fail", {"order_id": s.argument})

        # mcp 2.x records spans of its own with its module's tracer (the global provider's): once
        # into this test's provider (the guard enriches mcp's spans), once into none (the guard's own spans).
        for tracer in (tracing.tracer_provider.get_tracer("mcp-python-sdk"), NoOpTracer()):
            with mock.patch.object(mcp.shared._otel, "_tracer", tracer):
                anyio.run(agent)
    finally:
        instrumentor.uninstrument()


def agent_openai_agents(tracing: GuardedTracing, server: ScriptedModelServer, s: Secrets) -> None:
    agents = pytest.importorskip("agents")
    from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    from otel_agentguard.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    @function_tool
    def vault(code: str) -> str:
        """Open the vault."""
        return f"the vault says {s.result}"

    @function_tool
    def broken(code: str) -> str:
        """Always fails."""
        raise RuntimeError(f"vault jammed on {s.error}")

    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    try:
        server.script = turns(Turn.call("vault", code=s.argument), Turn.call("broken", code=s.argument),
                              Turn.answer(f"It says {s.answer}."))
        model = OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=AsyncOpenAI(
            base_url=server.openai_url, api_key="x", max_retries=0))
        agent = Agent(name="support", instructions=s.system, tools=[vault, broken], model=model,
                      model_settings=ModelSettings(include_usage=True))
        Runner.run_sync(agent, f"My pin is {s.prompt}")
        agents.flush_traces()
    finally:
        instrumentor.uninstrument()


# framework -> (the agent, the secrets it plants, those its spans carry with capture on)
AGENTS: dict[str, tuple[Callable[..., None], tuple[str, ...], set[str]]] = {
    "ag.tool": (agent_tool, ("argument", "result", "error"), {"argument", "result", "error"}),
    "openai": (agent_openai, WHERES[:5], {"prompt", "system", "argument", "result", "answer"}),
    "anthropic": (agent_anthropic, WHERES[:5], {"prompt", "system", "argument", "result", "answer"}),
    "langchain": (agent_langchain, WHERES, {"prompt", "argument", "result", "answer"}),
    "mcp": (agent_mcp, ("argument", "result", "error"), {"argument", "result"}),
    "openai_agents": (agent_openai_agents, WHERES, {"prompt", "argument", "result", "answer"}),
}


@pytest.fixture
def isolated_agents_sdk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The OpenAI Agents SDK with a fresh trace provider, no API key and no way off the machine."""
    pytest.importorskip("agents")
    import agents.tracing.setup
    from agents.tracing.processors import BackendSpanExporter
    from agents.tracing.provider import DefaultTraceProvider

    sent: list[Any] = []
    monkeypatch.setattr(BackendSpanExporter, "export", lambda self, items: sent.extend(items))
    monkeypatch.setattr(agents.tracing.setup, "GLOBAL_TRACE_PROVIDER", DefaultTraceProvider())
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    real_connect = socket.socket.connect

    def loopback_only(self, address):
        if isinstance(address, tuple) and str(address[0]) not in ("127.0.0.1", "::1", "localhost"):
            raise OSError(f"test blocked a connection to {address}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", loopback_only)
    yield
    assert sent == []


def found_in(text: str, secrets: dict[str, str]) -> set[str]:
    return {where for where, secret in secrets.items() if secret in text}


@pytest.mark.parametrize("capture", [False, True], ids=["capture-off", "capture-on-control"])
@pytest.mark.parametrize("framework", sorted(AGENTS))
def test_planted_secrets_never_leave_the_process_with_capture_off(
    framework, capture, server, caplog, isolated_agents_sdk
):
    agent, planted, captured_when_on = AGENTS[framework]
    s = Secrets(framework.replace("_", "").replace(".", ""))
    secrets = s.all(*planted)
    caplog.set_level(logging.DEBUG)
    with content_capture(capture), GuardedTracing() as tracing:
        agent(tracing, server, s)
        tracing.tracer_provider.force_flush()
        exported = exported_json(tracing.spans())
        labels = repr([(name, labels) for name in (A.METRIC_SESSIONS, A.METRIC_STALLS, A.METRIC_INTERNAL_ERRORS,
                                                   A.METRIC_SESSION_STEPS, A.METRIC_SESSION_TOKENS,
                                                   A.METRIC_SESSION_DURATION)
                       for labels, _ in tracing.metric_points(name)])
    steps = [s_ for s_ in tracing.spans() if A.SEQUENCE in (s_.attributes or {})]
    assert steps, "the agent made no guarded steps: the planting went nowhere"
    logs = "\n".join(caplog.handler.format(r) for r in caplog.records if r.name.startswith(OUR_LOGGERS))

    assert found_in(labels, secrets) == set()  # never a label, capture or not
    if capture:
        assert found_in(exported, secrets) >= captured_when_on  # the control: the search does find them
    else:
        assert found_in(exported, secrets) == set(), f"{framework} exported raw content"
        assert found_in(logs, secrets) == set(), f"{framework} logged raw content"
