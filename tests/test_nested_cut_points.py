"""Enforce-mode stops are safe at every level of nesting, with the real SDKs.

An agent's tool may run another agent (a sub-agent, a summariser) that calls the
model itself. Whatever the nesting (depth 1 to 3), batch sizes, failing tools,
streamed calls and tools the guard cannot see, a stop must leave every history
the application holds with a result for every tool call the model asked for:
the strict scripted server refuses any request that does not, as the providers
do, and :func:`history_problems` checks the history in hand after the stop.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.history import history_problems
from otel_agentguard.instrumentation.anthropic import AnthropicInstrumentor
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.scripted_model import Request, ScriptedModelServer, Turn
from otel_agentguard.testing import GuardedTracing

POLICY = parse_policy(
    "version = 'nested'\n[profiles.default]\nmax_steps = 200\nmax_tokens = 1000000\n"
    + "".join(f"[profiles.calls{n}]\nmax_model_calls = {n}\n" for n in range(1, 9))
)


@dataclass(frozen=True)
class Call:
    kind: str  # "plain", "fail" or "sub"
    guarded: bool  # wrapped with @ag.tool, or a tool the guard cannot see
    sub: Agent | None = None


@dataclass(frozen=True)
class Agent:
    turns: tuple[tuple[Call, ...], ...]


def agents(depth: int) -> st.SearchStrategy[Agent]:
    kinds = ["plain", "fail"] + (["sub"] if depth < 3 else [])
    call = st.builds(
        lambda kind, guarded, sub: Call(kind, guarded, sub if kind == "sub" else None),
        st.sampled_from(kinds), st.booleans(),
        agents(depth + 1) if depth < 3 else st.none(),
    )
    return st.builds(Agent, st.lists(st.lists(call, min_size=1, max_size=3).map(tuple), min_size=1, max_size=3)
                     .map(tuple))


@dataclass
class Run:
    """One generated run: the agents by id, and what the driver saw."""

    plans: dict[str, Agent] = field(default_factory=dict)
    executions: int = 0
    stop_at_execution: int | None = None
    session_id: str = ""
    nested_stops: int = 0

    def register(self, agent: Agent, agent_id: str) -> None:
        self.plans[agent_id] = agent
        for t, turn in enumerate(agent.turns):
            for c, call in enumerate(turn):
                if call.sub is not None:
                    self.register(call.sub, f"{agent_id}.{t}.{c}")


def _agent_of(request: Request) -> tuple[str, int]:
    """Which agent sent the request (its first user message names it) and how many turns it had."""
    body = request.body
    messages = body.get("messages") or []
    first = next(m for m in messages if m.get("role") == "user")
    content = first["content"] if isinstance(first["content"], str) else first["content"][0]["text"]
    done = sum(1 for m in messages if m.get("role") == "assistant")
    return content.removeprefix("run agent "), done


def script_for(run: Run):
    def answer(request: Request) -> Turn:
        agent_id, done = _agent_of(request)
        turns = run.plans[agent_id].turns
        if done >= len(turns):
            return Turn.answer(f"agent {agent_id} finished")
        return Turn.calls(*[(f"{call.kind}_{c}", {"agent": agent_id, "turn": done, "n": c})
                            for c, call in enumerate(turns[done])])

    return answer


class Driver:
    """A hand-written agent loop for one provider; nested agents run inside tools."""

    def __init__(self, provider: str, run: Run, tracing: GuardedTracing, server: ScriptedModelServer,
                 streams: itertools.cycle):
        self.provider = provider
        self.run = run
        self.streams = streams
        if provider == "openai":
            self.client: Any = openai.OpenAI(base_url=server.openai_url, api_key="t", max_retries=0)
        else:
            self.client = anthropic.Anthropic(base_url=server.anthropic_url, api_key="t", max_retries=0)
        self.guarded = ag.tool(name="tool", tracer_provider=tracing.tracer_provider)(self._execute)
        self.histories: dict[str, list[dict[str, Any]]] = {}  # every agent's history, as the application holds it

    # --- one model call, plain or streamed ---------------------------------------------------
    def ask(self, messages: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, dict[str, Any]]]]:
        stream = next(self.streams)
        if self.provider == "openai":
            return self._ask_openai(messages, stream)
        return self._ask_anthropic(messages, stream)

    def _ask_openai(self, messages: list[dict[str, Any]], stream: bool) -> Any:
        if stream:
            text, calls = "", {}
            for chunk in self.client.chat.completions.create(model="m", messages=messages, stream=True):
                delta = chunk.choices[0].delta if chunk.choices else None
                text += (delta.content or "") if delta else ""
                for part in (delta.tool_calls or []) if delta else []:
                    entry = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] = part.id or entry["id"]
                    entry["name"] += (part.function.name or "") if part.function else ""
                    entry["arguments"] += (part.function.arguments or "") if part.function else ""
            found = [(c["id"], c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
        else:
            message = self.client.chat.completions.create(model="m", messages=messages).choices[0].message
            text = message.content or ""
            found = [(c.id, c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
        reply: dict[str, Any] = {"role": "assistant", "content": text or None}
        if found:
            reply["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                                   for i, n, a in found]
        messages.append(reply)
        return text, found

    def _ask_anthropic(self, messages: list[dict[str, Any]], stream: bool) -> Any:
        if stream:
            with self.client.messages.stream(model="m", max_tokens=256, messages=messages) as events:
                message = events.get_final_message()
        else:
            message = self.client.messages.create(model="m", max_tokens=256, messages=messages)
        blocks = [block.model_dump(exclude_none=True) for block in message.content]
        messages.append({"role": "assistant", "content": blocks})
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        return text, [(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]

    def answer(self, messages: list[dict[str, Any]], results: list[tuple[str, str]]) -> None:
        if self.provider == "openai":
            messages.extend({"role": "tool", "tool_call_id": i, "content": r} for i, r in results)
        else:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": i, "content": r} for i, r in results]})

    # --- the agent loop ----------------------------------------------------------------------
    def run_agent(self, agent_id: str) -> tuple[str, list[dict[str, Any]]]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"run agent {agent_id}"}]
        self.histories[agent_id] = messages
        try:
            for _ in range(10):
                text, calls = self.ask(messages)
                if not calls:
                    return text, messages
                results = []
                for call_id, name, args in calls:
                    call = self.run.plans[args["agent"]].turns[args["turn"]][args["n"]]
                    tool = self.guarded if call.guarded else self._execute
                    try:
                        results.append((call_id, json.dumps(tool(name=name, args=args))))
                    except RuntimeError as failed:
                        results.append((call_id, f"error: {failed}"))
                self.answer(messages, results)
            return "", messages
        except ag.AgentStopped:
            if agent_id != "a":
                self.run.nested_stops += 1
            raise

    def _execute(self, name: str, args: dict[str, Any]) -> Any:
        run = self.run
        run.executions += 1
        if run.executions == run.stop_at_execution:
            ag.request_stop(run.session_id, "drained")
        call = run.plans[args["agent"]].turns[args["turn"]][args["n"]]
        if call.kind == "fail":
            raise RuntimeError("the backend is down")
        if call.kind == "sub":
            text, _ = self.run_agent(f"{args['agent']}.{args['turn']}.{args['n']}")
            return {"summary": text}
        return {"value": run.executions}


_sessions = itertools.count()


@pytest.fixture(scope="module")
def guarded(instrumented_tracing):
    with instrumented_tracing(OpenAIInstrumentor(), AnthropicInstrumentor(), policy=POLICY, mode="enforce") as tracing:
        yield tracing


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    top=agents(1).filter(lambda agent: any(call.kind == "sub" for turn in agent.turns for call in turn)),
    provider=st.sampled_from(["openai", "anthropic"]),
    budget=st.integers(min_value=1, max_value=8),
    stop_at=st.none() | st.integers(min_value=1, max_value=12),
    streams=st.lists(st.booleans(), min_size=1, max_size=5),
)
def test_no_stop_leaves_a_tool_call_without_its_result(guarded, top, provider, budget, stop_at, streams):
    run = Run(stop_at_execution=stop_at, session_id=f"nested-{next(_sessions)}")
    run.register(top, "a")
    with ScriptedModelServer(script_for(run)) as server:
        driver = Driver(provider, run, guarded, server, itertools.cycle(streams))
        stopped = None
        with guarded.session(run.session_id, profile=f"calls{budget}"):
            try:
                driver.run_agent("a")
            except ag.AgentStopped as stop:
                stopped = stop
        assert server.rejected == []
        assert run.nested_stops == 0  # never raised inside a tool: the outer batch would be cut
        for agent_id, history in driver.histories.items():
            assert history_problems(history, provider) == [], agent_id
    if stopped is not None:  # a budget, a drain, or a probe's alert (failing tools make streaks)
        assert stopped.stop_reason in ("budget_exceeded", "drained", *A.PROBE_NAMES)


def test_a_budget_due_inside_a_sub_agent_waits_for_the_outer_turn(guarded):
    """max_model_calls = 2, three tool calls, the second runs a sub-agent that calls the model:
    the budget is spent inside it, but the stop comes at the outer agent's next call."""
    sub = Agent(((Call("plain", True),),))
    for provider, guarded_sub in itertools.product(("openai", "anthropic"), (True, False)):
        top = Agent(((Call("plain", True), Call("sub", guarded_sub, sub), Call("plain", False)),))
        run = Run(session_id=f"nested-{next(_sessions)}")
        run.register(top, "a")
        with ScriptedModelServer(script_for(run)) as server:
            driver = Driver(provider, run, guarded, server, itertools.cycle([False]))
            with pytest.raises(ag.AgentStopped) as stopped:
                with guarded.session(run.session_id, profile="calls2"):
                    driver.run_agent("a")
        assert stopped.value.stop_reason == "budget_exceeded"
        assert run.nested_stops == 0
        assert run.executions == 4  # the whole outer batch ran, sub-agent and its tool included
        outer = driver.histories["a"]
        assert len(outer) == (5 if provider == "openai" else 3)  # the request, the batch, all three results
        assert history_problems(outer, provider) == []
        assert server.rejected == []


def test_a_budget_is_enforced_when_no_tool_is_guarded(guarded):
    """Tools the guard cannot see never close the balance: the next model call is the cut point."""
    top = Agent(tuple((Call("plain", False), Call("plain", False)) for _ in range(6)))
    run = Run(session_id=f"nested-{next(_sessions)}")
    run.register(top, "a")
    with ScriptedModelServer(script_for(run)) as server:
        driver = Driver("openai", run, guarded, server, itertools.cycle([False]))
        with pytest.raises(ag.AgentStopped) as stopped:
            with guarded.session(run.session_id, profile="calls2"):
                driver.run_agent("a")
    assert stopped.value.stop_reason == "budget_exceeded"
    assert len(server.requests) == 2


def test_a_drain_requested_inside_a_sub_agent_is_honoured_at_the_outer_turn(guarded):
    sub = Agent(((Call("plain", False),), (Call("plain", False),)))
    top = Agent(((Call("sub", False, sub), Call("plain", False)), (Call("plain", False),)))
    run = Run(session_id=f"nested-{next(_sessions)}", stop_at_execution=2)  # inside the sub-agent's first batch
    run.register(top, "a")
    with ScriptedModelServer(script_for(run)) as server:
        driver = Driver("anthropic", run, guarded, server, itertools.cycle([False, True]))
        with pytest.raises(ag.AgentStopped) as stopped:
            with guarded.session(run.session_id):
                driver.run_agent("a")
    assert stopped.value.stop_reason == "drained" and stopped.value.resumable
    assert run.nested_stops == 0
    assert server.rejected == []


def test_answered_ids_are_read_from_every_message_shape_and_unknown_shapes_say_so():
    from anthropic.types import ToolResultBlockParam  # a TypedDict: a plain dict at run time
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from openai.types.chat import ChatCompletionMessage

    from otel_agentguard.live.hooks import answered_tool_call_ids

    openai_chat = [{"role": "user", "content": "hi"},
                   ChatCompletionMessage(role="assistant", content=None),
                   {"role": "tool", "tool_call_id": "call_1", "content": "{}"}]
    assert answered_tool_call_ids(openai_chat) == {"call_1"}
    responses = [{"type": "function_call_output", "call_id": "call_2", "output": "{}"}]
    assert answered_tool_call_ids(responses) == {"call_2"}
    block: ToolResultBlockParam = {"type": "tool_result", "tool_use_id": "toolu_3", "content": "ok"}
    assert answered_tool_call_ids([{"role": "user", "content": [block]}]) == {"toolu_3"}
    langchain = [HumanMessage("hi"), AIMessage(""), ToolMessage("ok", tool_call_id="call_4")]
    assert answered_tool_call_ids(langchain) == {"call_4"}
    assert answered_tool_call_ids([{"role": "user", "content": "hi"}]) == frozenset()

    class Custom:  # an application's own message type: unknown, not "answers nothing"
        role = "tool"

    assert answered_tool_call_ids([Custom()]) is None
    assert answered_tool_call_ids("not a list") is None


@pytest.mark.parametrize("mode", ["observe", "enforce"])
def test_the_history_is_read_for_answered_ids_in_enforce_mode_only(mode, monkeypatch):
    """Observe mode has no cut point to place: a long history is not walked for nothing."""
    from otel_agentguard.live import guard_ref
    from otel_agentguard.live.processor import AgentGuardSpanProcessor

    walked: list[Any] = []
    monkeypatch.setattr(guard_ref, "answered_tool_call_ids", lambda history: walked.append(history) or frozenset())
    processor = AgentGuardSpanProcessor(mode=mode)
    try:
        history = [{"role": "tool", "tool_call_id": "call_1", "content": "{}"}]
        assert guard_ref.GuardRef(processor).before_model_call("s-1", history=history) is None
        assert walked == ([history] if mode == "enforce" else [])
    finally:
        processor.shutdown()
