"""Enforce mode on a real LangGraph agent (create_agent + ChatOpenAI) against the strict scripted server."""

from __future__ import annotations

import openai
import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.history import history_problems
from otel_agentguard.instrumentation.langchain import LangChainInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.scripted_model import Request, ScriptedModelServer, Turn

ChatOpenAI = pytest.importorskip("langchain_openai").ChatOpenAI
POLICY = parse_policy("[profiles.default]\nmax_steps = 40\nmax_tokens = 100000\n")

calls: list[str] = []


@tool
def track(order: str) -> dict:
    """Track the parcel of an order."""
    calls.append(order)
    return {"order": order, "state": "stalled at hub"}


def looping(request: Request) -> Turn:
    return Turn.call("track", order="A1")


@pytest.fixture
def enforced(instrumented_tracing):
    calls.clear()
    with instrumented_tracing(LangChainInstrumentor(), policy=POLICY, mode="enforce") as tracing:
        yield tracing


def agent(server: ScriptedModelServer):
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.openai_url, api_key="test", max_retries=0,
                       timeout=openai.Timeout(10.0))
    return create_agent(model, [track])


def test_a_looping_langgraph_agent_is_nudged_then_stopped_with_every_call_paired(enforced):
    with ScriptedModelServer(looping) as server:
        graph = agent(server)
        with pytest.raises(ag.AgentStopped) as stopped:
            with enforced.session("graph-loop"):
                graph.invoke({"messages": [{"role": "user", "content": "Where is order A1?"}]},
                             {"recursion_limit": 50})
    assert stopped.value.stop_reason == "tool_loop"
    assert calls == ["A1"] * 3  # the 4th and 5th identical calls were answered by the guard
    assert server.rejected == []
    last_history = server.requests[-1].body["messages"]
    assert history_problems(last_history) == []
    nudges = [m["content"] for m in last_history if m["role"] == "tool" and "otel_agentguard" in m["content"]]
    # the 4th call's nudge went out; the 5th call (nudged again, escalated) ended at the cut point
    assert len(nudges) == 1 and "Do not call it again" in nudges[0]
    assert len(server.requests) == 5
    assert enforced.session_span("graph-loop").attributes[A.STOP_REASON] == "tool_loop"


def test_a_langgraph_agent_that_takes_the_nudge_ends_cleanly(enforced):
    def listens(request: Request) -> Turn:
        results = [m["content"] for m in request.body["messages"] if m["role"] == "tool"]
        if results and "otel_agentguard" in results[-1]:
            return Turn.answer("Order A1 is stalled at the hub and has not moved since Monday.")
        return Turn.call("track", order="A1")

    with ScriptedModelServer(listens) as server:
        graph = agent(server)
        with enforced.session("graph-recovers"):
            state = graph.invoke({"messages": [{"role": "user", "content": "Where is order A1?"}]})
    assert state["messages"][-1].content.startswith("Order A1 is stalled")
    assert calls == ["A1"] * 3
    assert server.rejected == []


def test_async_langgraph_stop_is_raised_from_ainvoke(enforced):
    import asyncio

    async def run(graph) -> None:
        async with enforced.session("graph-async"):
            await graph.ainvoke({"messages": [{"role": "user", "content": "Where is order A1?"}]},
                                {"recursion_limit": 50})

    with ScriptedModelServer(looping) as server:
        with pytest.raises(ag.AgentStopped) as stopped:
            asyncio.run(run(agent(server)))
    assert stopped.value.stop_reason == "tool_loop"
    assert calls == ["A1"] * 3
    assert server.rejected == []
