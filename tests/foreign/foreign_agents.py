"""Agents traced by other packages' instrumentations, recorded and judged.

Each scenario is one agent run: a hand-written openai-SDK tool loop against the
scripted model server, or a Pydantic AI agent on a ``FunctionModel``. The
traces come from the real instrumentation packages; nothing here writes their
attributes.

Every scenario runs in a child process (``python foreign_agents.py
INSTRUMENTATION SCENARIO DIRECTORY``): some instrumentations leave a wrapper
behind after ``uninstrument()``, which would leak spans into the next test.
The child's interpreter is the one with those instrumentations installed:
``AGENTGUARD_TEST_FOREIGN_PYTHON`` (``make test`` sets it), else this one.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.judge.policy import Policy, parse_policy
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.replay.runner import replay_files
from otel_agentguard.replay.sources import read_files
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns

_FOREIGN_MODULES = ("opentelemetry.instrumentation.openai_v2", "opentelemetry.instrumentation.openai",
                    "openinference.instrumentation.openai", "pydantic_ai")


def _foreign_python() -> str | None:
    """The interpreter that has every foreign instrumentation, or None."""
    python = os.path.abspath(os.environ.get("AGENTGUARD_TEST_FOREIGN_PYTHON") or sys.executable)
    probe = subprocess.run([python, "-c", "import " + ", ".join(_FOREIGN_MODULES)], capture_output=True, timeout=120)
    return python if probe.returncode == 0 else None


FOREIGN_PYTHON = _foreign_python() if __name__ != "__main__" else sys.executable
MISSING = "the foreign instrumentations are not installed (make test installs them in .venv-foreign)"

POLICY = parse_policy('[tools.submit_refund]\neffect = "write"\n', "<foreign tests>")

TOOL_DEFINITIONS = [
    {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}}
    for name in ("get_status", "submit_refund")
]


def get_status(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "processing"}


def submit_refund(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "refund": "R-1", "state": "submitted"}


TOOLS: dict[str, Callable[..., Any]] = {"get_status": get_status, "submit_refund": submit_refund}


@dataclass(frozen=True)
class Scenario:
    name: str
    turns: tuple[Turn, ...]
    stop_reason: str
    tool_steps: int


SCENARIOS = {
    s.name: s for s in (
        # The same call, the same result, eight times, then an answer.
        Scenario("loop", (*[Turn.call("get_status", order_id="A1")] * 8, Turn.answer("Order A1 is still processing.")),
                 "tool_loop", 8),
        # Reads, writes, then says what it did.
        Scenario("clean", (Turn.call("get_status", order_id="A1"), Turn.call("submit_refund", order_id="A1"),
                           Turn.answer("Your refund for order A1 has been submitted.")), "completed", 2),
        # Reads only, then claims a write.
        Scenario("fake", (Turn.call("get_status", order_id="A1"),
                          Turn.answer("Your refund for order A1 has been submitted.")), "fake_completion", 1),
    )
}


# --- the agents ---------------------------------------------------------------------------


def run_openai_agent(server: ScriptedModelServer, tools: dict[str, Callable[..., Any]] = TOOLS, *,
                     stream: bool = False) -> str:
    """A hand-written tool loop: the tools run in plain Python (no tool span, unless they are ``@ag.tool``)."""
    client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Please refund order A1."}]
    for _ in range(20):
        if stream:
            text, calls = _streamed_turn(client, messages)
        else:
            message = client.chat.completions.create(
                model="gpt-4o-mini", messages=messages, tools=TOOL_DEFINITIONS).choices[0].message
            text = message.content or ""
            calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()]
        if not calls:
            return text
        messages.append({"role": "assistant", "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            for call_id, name, arguments in calls]})
        for call_id, name, arguments in calls:
            result = tools[name](**json.loads(arguments))
            messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
    raise AssertionError("the agent did not stop")


def _streamed_turn(client: openai.OpenAI, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, str]]]:
    """One streamed response, its text and tool calls put together from the deltas."""
    text, calls = "", {}
    chunks = client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOL_DEFINITIONS,
                                            stream=True, stream_options={"include_usage": True})
    for chunk in chunks:
        delta = chunk.choices[0].delta if chunk.choices else None
        if delta is None:
            continue
        text += delta.content or ""
        for part in delta.tool_calls or ():
            call = calls.setdefault(part.index, ["", "", ""])
            call[0] += part.id or ""
            call[1] += (part.function.name or "") if part.function else ""
            call[2] += (part.function.arguments or "") if part.function else ""
    return text, [tuple(call) for _, call in sorted(calls.items())]  # type: ignore[misc]


def run_pydantic_agent(scenario: Scenario, tracer_provider: TracerProvider, *, content: bool = True) -> str:
    """A Pydantic AI agent with its built-in instrumentation; the model is a FunctionModel."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    script = list(scenario.turns)

    def model(messages: Any, info: Any) -> ModelResponse:
        turn = script.pop(0)
        if turn.tool_calls:
            return ModelResponse(parts=[ToolCallPart(c.name, dict(c.arguments)) for c in turn.tool_calls])
        return ModelResponse(parts=[TextPart(turn.text)])

    Agent.instrument_all(InstrumentationSettings(tracer_provider=tracer_provider, include_content=content))
    try:
        agent = Agent(FunctionModel(model))
        for name, function in TOOLS.items():
            agent.tool_plain(name=name)(function)
        return agent.run_sync("Please refund order A1.").output
    finally:
        Agent.instrument_all(False)


# --- the instrumentations -------------------------------------------------------------------


@contextlib.contextmanager
def instrumented(name: str, tracer_provider: TracerProvider) -> Iterator[None]:
    """Only the named foreign instrumentation, on ``tracer_provider``, with content capture on
    (it sets the process's environment: child processes only)."""
    content = not name.endswith("-no-content")
    name = name.removesuffix("-no-content").removesuffix("+tool-spans").removesuffix("+stream")
    if name == "openai-v2":
        from opentelemetry.instrumentation import openai_v2

        os.environ.__setitem__("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        os.environ.__setitem__("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY" if content else "NO_CONTENT")
        instrumentor: Any = openai_v2.OpenAIInstrumentor()
    elif name == "openai-v2-stable":
        from opentelemetry.instrumentation import openai_v2

        # The pinned util-genai only offers the latest conventions; the instrumentation's own
        # switch picks its v1.30 path, where content goes to log events and never to spans.
        openai_v2.is_experimental_mode = lambda: False
        os.environ.__setitem__("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
        instrumentor = openai_v2.OpenAIInstrumentor()
    elif name == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        os.environ.__setitem__("TRACELOOP_TRACE_CONTENT", "true" if content else "false")
        instrumentor = OpenAIInstrumentor()
    elif name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        if not content:
            os.environ["OPENINFERENCE_HIDE_INPUTS"] = os.environ["OPENINFERENCE_HIDE_OUTPUTS"] = "true"
        instrumentor = OpenAIInstrumentor()
    elif name == "pydantic-ai":  # instrumented by the agent itself (Agent.instrument_all)
        yield
        return
    else:
        raise ValueError(name)
    instrumentor.instrument(tracer_provider=tracer_provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


def run_scenario(instrumentation: str, scenario: Scenario, tracer_provider: TracerProvider) -> str:
    """One agent run, as a user's app makes it: inside the app's own root span (one trace per run)."""
    tracer = tracer_provider.get_tracer("my.app")
    if instrumentation.startswith("pydantic-ai"):
        with tracer.start_as_current_span("handle request"):
            return run_pydantic_agent(scenario, tracer_provider, content=not instrumentation.endswith("-no-content"))
    with ScriptedModelServer(turns(*scenario.turns)) as server, tracer.start_as_current_span("handle request"):
        if instrumentation.startswith("openinference"):
            from openinference.instrumentation import using_session

            with using_session(f"order-A1-{scenario.name}"):
                return run_openai_agent(server)
        if instrumentation.endswith("+tool-spans"):  # the same tools as @ag.tool spans (no call ids)
            return run_openai_agent(server, {name: ag.tool(function) for name, function in TOOLS.items()})
        return run_openai_agent(server, stream=instrumentation.endswith("+stream"))


# --- recording, replaying, judging live -------------------------------------------------


@dataclass
class Judged:
    stop_reason: str
    alerts: list[tuple[str, int, tuple[int, ...]]]  # probe, sequence, evidence
    steps: int
    tokens: int


def record_and_judge_live(instrumentation: str, scenario: Scenario, directory: Path) -> tuple[Path, list[Judged]]:
    """In a child process: the run traced by the foreign instrumentation alone, written as
    OTLP JSON lines; then the same run with the guard's processor on that provider, and the
    verdicts it wrote (its spans, numbered by the guard, go to ``live.jsonl`` beside)."""
    assert FOREIGN_PYTHON is not None, MISSING
    done = subprocess.run([FOREIGN_PYTHON, __file__, instrumentation, scenario.name, str(directory)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    live = json.loads((directory / "live.json").read_text())
    return directory / "trace.jsonl", [
        Judged(j["stop_reason"], [(a[0], a[1], tuple(a[2])) for a in j["alerts"]], j["steps"], j["tokens"])
        for j in live
    ]


def tool_steps(path: Path, policy: Policy = POLICY) -> list[tuple[str, str | None, str | None, bool | None]]:
    """(name, argument fingerprint, result fingerprint, empty) of each replayed tool step."""
    return [
        (step.name, step.args_fingerprint, step.result_fingerprint, step.empty)
        for session in read_files([path], policy) for step in session.steps if step.kind == "tool"
    ]


def replay(path: Path, policy: Policy = POLICY) -> list[Judged]:
    return [
        Judged(v.stop_reason, [(a.probe, a.sequence, tuple(a.evidence)) for a in v.alerts], v.steps, v.tokens)
        for _, v in replay_files([path], policy)
    ]


def _child(instrumentation: str, scenario: Scenario, directory: Path) -> None:
    provider = TracerProvider()
    trace.set_tracer_provider(provider)  # where @ag.tool spans go
    recorder = SimpleSpanProcessor(OTLPJsonLinesSpanExporter(str(directory / "trace.jsonl")))
    provider.add_span_processor(recorder)
    exporter = InMemorySpanExporter()
    with instrumented(instrumentation, provider):
        run_scenario(instrumentation, scenario, provider)
        recorder.shutdown()  # the recording holds the foreign spans only
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(str(directory / "live.jsonl"))))
        provider.add_span_processor(AgentGuardSpanProcessor(POLICY, tracer_provider=provider))
        run_scenario(instrumentation, scenario, provider)
    provider.shutdown()
    spans = exporter.get_finished_spans()
    # Alerts go on the session span while it is open (Pydantic AI's invoke_agent), else on the verdict span.
    alerts: dict[str, list[Any]] = {}
    for span in spans:
        for event in span.events:
            if event.name == A.STALL_EVENT:
                alerts.setdefault(span.attributes[A.SESSION_ID], []).append(
                    [event.attributes[A.PROBE], event.attributes[A.SEQUENCE], list(event.attributes[A.EVIDENCE])])
    verdicts = [
        {"stop_reason": span.attributes[A.STOP_REASON], "alerts": alerts.get(span.attributes[A.SESSION_ID], []),
         "steps": span.attributes[A.STEPS], "tokens": span.attributes[A.TOKENS]}
        for span in spans if A.STOP_REASON in (span.attributes or {})
    ]
    (directory / "live.json").write_text(json.dumps(verdicts))


if __name__ == "__main__":
    _child(sys.argv[1], SCENARIOS[sys.argv[2]], Path(sys.argv[3]))
