"""Agent frameworks that trace themselves, recorded and judged.

Each scenario is one agent run of a real framework (its own agent class, the
three order tools registered as its tools) against the project's loopback
scripted model server. The traces come from the framework's own OpenTelemetry
tracing (Strands, Google ADK, Microsoft Agent Framework) or from the
OpenInference instrumentor its docs point to (LlamaIndex, smolagents, CrewAI);
nothing here writes their attributes.

    python framework_agents.py FRAMEWORK SCENARIO OUTDIR [--content]

writes into OUTDIR:

* ``trace.jsonl``: a run traced by the framework alone (OTLP JSON lines);
* ``live.jsonl``: a fresh run, in a fresh process, with ``ag.install(policy=...)``
  on the same provider (the spans as exported, with the guard's attributes);
* ``live.json``: the verdicts found in ``live.jsonl``;
* ``requests-record.json`` / ``requests-live.json``: what the framework sent to the
  model server (API, stream flag, message roles, tool names), and what the server
  refused, for checking that each run followed its script.

SCENARIO is one of loop, cycle, fake, clean (the four measured) or distinct (a control: the
same read tool with a different argument each turn, which is no loop). Two switches pick
variants: OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental (Strands' latest GenAI
conventions) and FRAMEWORK_AGENTS_AF_CLIENT=chat (Agent Framework's chat-completions client
instead of its default Responses-API one).

Like tests/foreign/foreign_agents.py, each run happens in a child process
(``python framework_agents.py --child PHASE FRAMEWORK SCENARIO OUTDIR [--content]``):
instrumentors and frameworks keep global state (patched classes, global
providers, cached tracers) that must not leak from one run into the next.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FRAMEWORKS = ("strands", "adk", "llamaindex", "smolagents", "agent-framework", "crewai")
PROMPT = "Please cancel order A1."
SYSTEM = "You help customers with their orders."
MODEL = "gpt-4o-mini"
API_KEY = "sk-test-not-a-real-key"
POLICY_TOML = ('[tools.cancel_order]\neffect = "write"\n[tools.get_status]\neffect = "read"\n'
               '[tools.get_tracking]\neffect = "read"\n')


# --- the tools (plain functions; each framework wraps them its own way) -------------------


def get_status(order_id: str) -> dict:
    """Look up the processing status of an order.

    Args:
        order_id: The order's id, e.g. "A1".
    """
    return {"order_id": order_id, "status": "processing"}


def get_tracking(order_id: str) -> dict:
    """Look up the shipment tracking of an order.

    Args:
        order_id: The order's id, e.g. "A1".
    """
    return {"order_id": order_id, "carrier": "UPS", "state": "in transit"}


def cancel_order(order_id: str) -> dict:
    """Cancel an order.

    Args:
        order_id: The order's id, e.g. "A1".
    """
    return {"order_id": order_id, "cancelled": True}


TOOLS: list[Callable[..., dict]] = [get_status, get_tracking, cancel_order]


# --- the scenarios --------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    script: tuple[Any, ...]  # scripted_model.Turn
    expected: tuple[str, ...]  # acceptable stop reasons


def scenarios() -> dict[str, Scenario]:
    from otel_agentguard.scripted_model import Turn

    status, tracking, cancel = (Turn.call(name, order_id="A1") for name in ("get_status", "get_tracking", "cancel_order"))
    return {s.name: s for s in (
        Scenario("loop", (*[status] * 6, Turn.answer("Order A1 is still processing.")), ("tool_loop",)),
        Scenario("cycle", (*[status, tracking] * 3, Turn.answer("Order A1 is in transit with UPS.")),
                 ("cycle", "tool_loop")),
        Scenario("fake", (status, Turn.answer("I have cancelled your order and issued a refund.")),
                 ("fake_completion",)),
        Scenario("clean", (status, cancel, Turn.answer("Order A1 is cancelled.")), ("completed",)),
        # A control, not one of the four: the same tool with a different argument each time, which
        # is no loop; with content capture off, arguments and results may be redacted alike.
        Scenario("distinct", (*[Turn.call("get_status", order_id=f"A{n}") for n in range(1, 6)],
                              Turn.answer("Orders A1 to A5 are all still processing.")), ("completed",)),
    )}


def script_for(framework: str, scenario: Scenario) -> tuple[Any, ...]:
    """The scenario's turns as this framework's model would send them.

    smolagents' ToolCallingAgent ends a run only through its ``final_answer`` tool: a plain
    text answer is a parsing error there (the step fails and the agent asks again), so its
    model gives the final answer as a ``final_answer`` call.
    """
    from otel_agentguard.scripted_model import Turn

    if framework != "smolagents":
        return scenario.script
    return tuple(Turn.call("final_answer", answer=t.text) if not t.tool_calls else t for t in scenario.script)


def model_script(script: tuple[Any, ...]) -> Callable[[Any], Any]:
    """``turns(*script)``, except that a request offering no tools gets the script's final answer.

    A real model cannot call a tool it was not offered. CrewAI, after five identical calls in
    a row, asks for a final answer with the tools removed; a scripted tool call there would
    become CrewAI's "answer" (a list of tool calls, which it then fails to validate).
    """
    from otel_agentguard.scripted_model import turns

    scripted = turns(*script)
    final = script[-1]

    def next_turn(request: Any) -> Any:
        if not request.body.get("tools"):
            return final
        return scripted(request)

    return next_turn


# --- content capture switches (set before the framework is imported) ---------------------


def content_environment(framework: str, content: bool) -> dict[str, str]:
    """The documented environment switches for message/argument capture, per framework."""
    if framework == "strands":
        # Strands records content by default (events on its spans); redaction is opt-in:
        # "gen_ai_unredacted_attributes=" with an empty list redacts every sensitive attribute.
        # Other tokens already set (e.g. gen_ai_latest_experimental, for the latest conventions) are kept.
        tokens = [t for t in os.environ.get("OTEL_SEMCONV_STABILITY_OPT_IN", "").split(",") if t.strip()]
        return {} if content else {"OTEL_SEMCONV_STABILITY_OPT_IN": ",".join([*tokens, "gen_ai_unredacted_attributes="])}
    if framework == "adk":
        # ADK 2.x (telemetry schema 2, GenAI-semconv aligned, the default) follows the
        # OpenTelemetry switch, NO_CONTENT by default; SPAN_ONLY puts messages, tool arguments
        # and results on its spans. (ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS only governs the
        # legacy schema 1, ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1.)
        return {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY" if content else "NO_CONTENT"}
    if framework == "agent-framework":
        # Agent Framework: ENABLE_INSTRUMENTATION turns its spans on, ENABLE_SENSITIVE_DATA the content.
        return {"ENABLE_INSTRUMENTATION": "true", "ENABLE_SENSITIVE_DATA": "true" if content else "false"}
    # OpenInference instrumentors record content by default; OPENINFERENCE_HIDE_* turn it off.
    hide = "false" if content else "true"
    return {"OPENINFERENCE_HIDE_INPUTS": hide, "OPENINFERENCE_HIDE_OUTPUTS": hide,
            "OPENINFERENCE_HIDE_INPUT_MESSAGES": hide, "OPENINFERENCE_HIDE_OUTPUT_MESSAGES": hide,
            "OPENINFERENCE_HIDE_INPUT_TEXT": hide, "OPENINFERENCE_HIDE_OUTPUT_TEXT": hide}


# No network but the loopback model server: LiteLLM (ADK, CrewAI) would fetch its model price map,
# CrewAI and others would send usage telemetry.
OFFLINE_ENVIRONMENT = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "CREWAI_DISABLE_TELEMETRY": "true",
    "CREWAI_TRACING_ENABLED": "false",
    "HF_HUB_OFFLINE": "1",
}


# --- the agents -----------------------------------------------------------------------------


def run_strands(server: Any) -> str:
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    model = OpenAIModel(client_args={"base_url": server.openai_url, "api_key": API_KEY, "max_retries": 0},
                        model_id=MODEL)
    agent = Agent(model=model, tools=[tool(f) for f in TOOLS], callback_handler=None)
    return str(agent(PROMPT))


def run_adk(server: Any) -> str:
    from google.adk.agents import LlmAgent
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    model = LiteLlm(model=f"openai/{MODEL}", api_base=server.openai_url, api_key=API_KEY)
    agent = LlmAgent(name="order_agent", model=model, instruction=SYSTEM,
                     tools=TOOLS)
    runner = InMemoryRunner(agent=agent, app_name="orders")

    async def run() -> str:
        session = await runner.session_service.create_session(app_name="orders", user_id="user-1")
        answer = ""
        async for event in runner.run_async(user_id="user-1", session_id=session.id,
                                            new_message=types.Content(role="user", parts=[types.Part(text=PROMPT)])):
            if event.is_final_response() and event.content and event.content.parts:
                answer = "".join(part.text or "" for part in event.content.parts)
        await runner.close()
        return answer

    return asyncio.run(run())


def run_llamaindex(server: Any) -> str:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai import OpenAI
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument()  # on the global provider
    llm = OpenAI(model=MODEL, api_base=server.openai_url, api_key=API_KEY, max_retries=0)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(f) for f in TOOLS], llm=llm,
                          system_prompt=SYSTEM)

    async def run() -> str:
        return str(await agent.run(user_msg=PROMPT, max_iterations=20))

    return asyncio.run(run())


def run_smolagents(server: Any) -> str:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    SmolagentsInstrumentor().instrument()  # on the global provider
    model = OpenAIServerModel(model_id=MODEL, api_base=server.openai_url, api_key=API_KEY,
                              client_kwargs={"max_retries": 0})
    agent = ToolCallingAgent(tools=[tool(f) for f in TOOLS], model=model, max_steps=20, verbosity_level=0)
    return str(agent.run(PROMPT))


def run_agent_framework(server: Any) -> str:
    from agent_framework import Agent, tool
    from agent_framework.openai import OpenAIChatClient

    # OpenAIChatClient, the documented default, speaks the Responses API; FRAMEWORK_AGENTS_AF_CLIENT=chat
    # picks OpenAIChatCompletionClient (chat completions) instead.
    if os.environ.get("FRAMEWORK_AGENTS_AF_CLIENT") == "chat":
        from agent_framework.openai import OpenAIChatCompletionClient as OpenAIChatClient  # noqa: N814
    client = OpenAIChatClient(model=MODEL, api_key=API_KEY, base_url=server.openai_url)
    agent = Agent(client=client, name="order_agent", instructions=SYSTEM, tools=[tool(f) for f in TOOLS])

    async def run() -> str:
        return (await agent.run(PROMPT)).text

    return asyncio.run(run())


def run_crewai(server: Any) -> str:
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    # CrewAI's spans (crew, task, agent, tool); its "openai/..." models go through the openai SDK
    # (its native provider, not LiteLLM), traced by OpenInference's OpenAI instrumentor.
    CrewAIInstrumentor().instrument()
    OpenAIInstrumentor().instrument()
    llm = LLM(model=f"openai/{MODEL}", base_url=server.openai_url, api_key=API_KEY, max_retries=0)
    agent = Agent(role="Order support agent", goal="Help customers with their orders.", backstory=SYSTEM,
                  tools=[tool(f) for f in TOOLS], llm=llm, max_iter=20, verbose=False)
    task = Task(description=PROMPT, expected_output="A short answer to the customer.", agent=agent)
    return str(Crew(agents=[agent], tasks=[task], verbose=False).kickoff())


RUNNERS: dict[str, Callable[[Any], str]] = {
    "strands": run_strands,
    "adk": run_adk,
    "llamaindex": run_llamaindex,
    "smolagents": run_smolagents,
    "agent-framework": run_agent_framework,
    "crewai": run_crewai,
}


# --- one run in a child process -------------------------------------------------------------


def _describe(request: Any) -> dict[str, Any]:
    body = request.body
    roles = [m.get("role") or m.get("type") for m in body.get("messages") or body.get("input") or []
             if isinstance(m, dict)]
    tools = [(t.get("function") or t).get("name") for t in body.get("tools") or []]
    return {"api": request.api, "stream": request.stream, "roles": roles, "tools": tools}


def child(phase: str, framework: str, scenario: Scenario, outdir: Path, content: bool) -> None:
    os.environ.update(content_environment(framework, content))
    os.environ.update(OFFLINE_ENVIRONMENT)
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
    from otel_agentguard.scripted_model import ScriptedModelServer

    out = outdir / ("trace.jsonl" if phase == "record" else "live.jsonl")
    out.unlink(missing_ok=True)
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(str(out))))
    if phase == "live":
        import otel_agentguard as ag
        from otel_agentguard.judge.policy import parse_policy

        ag.install(policy=parse_policy(POLICY_TOML))
    server = ScriptedModelServer(model_script(script_for(framework, scenario))).start()
    started, answer = time.monotonic(), None
    try:
        answer = RUNNERS[framework](server)
    finally:
        server.stop()
        (outdir / f"requests-{phase}.json").write_text(json.dumps({
            "answer": answer, "seconds": round(time.monotonic() - started, 2),
            "requests": [_describe(r) for r in server.requests],
            "rejected": [[_describe(r), problems] for r, problems in server.rejected],
        }, indent=1))
    provider.shutdown()  # as atexit would: the last thing


# --- the verdicts in live.jsonl -------------------------------------------------------------


def _value(value: dict[str, Any]) -> Any:
    if "arrayValue" in value:
        return [_value(v) for v in value["arrayValue"].get("values", [])]
    if "kvlistValue" in value:
        return {kv["key"]: _value(kv["value"]) for kv in value["kvlistValue"].get("values", [])}
    if "intValue" in value:
        return int(value["intValue"])
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    return None


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: _value(kv["value"]) for kv in items or []}


def read_spans(path: Path) -> list[dict[str, Any]]:
    spans = []
    for line in path.read_text().splitlines():
        if line.strip():
            for resource in json.loads(line).get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    spans.extend(scope.get("spans", []))
    return spans


def verdicts(path: Path) -> list[dict[str, Any]]:
    """Each span with ``agentguard.stop_reason``, with the ``agentguard.stall`` events of its session."""
    spans = read_spans(path)
    alerts: dict[Any, list[list[Any]]] = {}
    for span in spans:
        session = _attributes(span.get("attributes")).get("agentguard.session.id")
        for event in span.get("events") or []:
            if event.get("name") == "agentguard.stall":
                attrs = _attributes(event.get("attributes"))
                alerts.setdefault(session, []).append(
                    [attrs.get("agentguard.probe"), attrs.get("agentguard.sequence"), attrs.get("agentguard.evidence")])
    found = []
    for span in spans:
        attrs = _attributes(span.get("attributes"))
        if "agentguard.stop_reason" in attrs:
            session = attrs.get("agentguard.session.id")
            found.append({"stop_reason": attrs["agentguard.stop_reason"], "session_id": session,
                          "span_name": span.get("name"), "alerts": alerts.get(session, []),
                          "steps": attrs.get("agentguard.steps"), "tokens": attrs.get("agentguard.tokens")})
    return found


# --- the command ------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    content = "--content" in argv
    args = [a for a in argv if a != "--content"]
    if args and args[0] == "--child":
        phase, framework, scenario, outdir = args[1:5]
        child(phase, framework, scenarios()[scenario], Path(outdir), content)
        return 0
    if len(args) != 3 or args[0] not in FRAMEWORKS or args[1] not in scenarios():
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        print(f"FRAMEWORK: {', '.join(FRAMEWORKS)}; SCENARIO: {', '.join(scenarios())}", file=sys.stderr)
        return 2
    framework, scenario, outdir = args[0], args[1], Path(args[2]).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    for phase in ("record", "live"):
        command = [sys.executable, os.path.abspath(__file__), "--child", phase, framework, scenario, str(outdir)]
        done = subprocess.run(command + (["--content"] if content else []), capture_output=True, text=True,
                              timeout=600, cwd=outdir)
        (outdir / f"stderr-{phase}.txt").write_text(done.stderr[-20000:])
        if done.returncode != 0:
            print(f"{framework} {scenario} {phase}: exit {done.returncode}\n{done.stderr[-3000:]}", file=sys.stderr)
            return 1
    found = verdicts(outdir / "live.jsonl")
    (outdir / "live.json").write_text(json.dumps(found, indent=1))
    print(json.dumps([v["stop_reason"] for v in found]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
