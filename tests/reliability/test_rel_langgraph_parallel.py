"""LangGraph's parallel tool execution: a real ``langchain.agents.create_agent`` agent whose model
asks for three tool calls at once (the ToolNode runs them concurrently: threads for ``invoke``,
asyncio tasks for ``ainvoke``), against the scripted model server through ``ChatOpenAI``.

Every concurrent tool span lands in its own session, with unique sequence numbers, and the
verdict is the one the same run gets alone.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from rel_support import verdict_key

from otel_agentguard import attributes as A
from otel_agentguard.instrumentation.langchain import LangChainInstrumentor
from otel_agentguard.scripted_model import Request, ScriptedModelServer, Turn
from otel_agentguard.testing import GuardedTracing

ChatOpenAI = pytest.importorskip("langchain_openai").ChatOpenAI

MODEL = "gpt-4o-mini"
ANSWER = "Orders A1 and B2 are in transit; C3 was audited."
USER = {"messages": [{"role": "user", "content": "Where are my orders?"}]}
PAUSE_S = 0.25
_runs: list[tuple[str, float, float]] = []  # (tool, start, end) of every tool run
_runs_lock = threading.Lock()


def _record(name: str, start: float) -> None:
    with _runs_lock:
        _runs.append((name, start, time.monotonic()))


@tool
def lookup(order: str) -> dict:
    """Look up an order."""
    start = time.monotonic()
    time.sleep(PAUSE_S)
    _record("lookup", start)
    return {"order": order, "status": "in transit"}


@tool
def audit(order: str) -> str:
    """Audit an order."""
    start = time.monotonic()
    time.sleep(PAUSE_S)
    _record("audit", start)
    return f"{order} audited"


@tool
async def alookup(order: str) -> dict:
    """Look up an order (async)."""
    start = time.monotonic()
    await asyncio.sleep(PAUSE_S)
    _record("alookup", start)
    return {"order": order, "status": "in transit"}


@tool
async def aaudit(order: str) -> str:
    """Audit an order (async)."""
    start = time.monotonic()
    await asyncio.sleep(PAUSE_S)
    _record("aaudit", start)
    return f"{order} audited"


def parallel_then_answer(prefix: str):
    """Three calls in one turn while no tool result is in the history; then the answer."""

    def script(request: Request) -> Turn:
        if any(message.get("role") == "tool" for message in request.body.get("messages", [])):
            return Turn.answer(ANSWER, input_tokens=300, output_tokens=12)
        return Turn.calls((f"{prefix}lookup", {"order": "A1"}), (f"{prefix}lookup", {"order": "B2"}),
                          (f"{prefix}audit", {"order": "C3"}), input_tokens=200, output_tokens=20)

    return script


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(parallel_then_answer("")) as running:
        yield running


@pytest.fixture
def tracing(instrumented_tracing: Any) -> Iterator[GuardedTracing]:
    with instrumented_tracing(LangChainInstrumentor()) as guarded:
        yield guarded


def chat_model(server: ScriptedModelServer) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=server.openai_url, api_key="test", max_retries=0, stream_usage=True,
                      timeout=openai.Timeout(10.0))


def session_steps(tracing: GuardedTracing, session_id: str) -> list[tuple[int, str, int]]:
    found = [s for s in tracing.spans() if (s.attributes or {}).get(A.SESSION_ID) == session_id
             and A.SEQUENCE in s.attributes and not s.attributes.get(A.VERDICT)]
    return sorted((s.attributes[A.SEQUENCE], s.name, s.context.trace_id) for s in found)


def assert_one_parallel_run(tracing: GuardedTracing, session_id: str, prefix: str) -> None:
    steps = session_steps(tracing, session_id)
    assert [sequence for sequence, _, _ in steps] == [1, 2, 3, 4, 5]  # none lost or reused
    names = [name for _, name, _ in steps]
    assert names[0] == names[4] == f"chat {MODEL}"
    assert sorted(names[1:4]) == sorted([f"execute_tool {prefix}lookup"] * 2 + [f"execute_tool {prefix}audit"])
    session_trace = tracing.session_span(session_id).context.trace_id
    assert {trace_id for _, _, trace_id in steps} == {session_trace}  # all inside this session's run
    verdict = tracing.verdict(session_id)
    assert (verdict.stop_reason, verdict.steps, verdict.model_calls, verdict.tokens) == (A.COMPLETED, 4, 2, 532)


def tools_overlapped(names: set[str], since: float) -> bool:
    """Whether the tools of one batch ran at the same time (the latest start before the earliest end)."""
    batch = [(start, end) for name, start, end in _runs if name in names and start >= since]
    return len(batch) >= 3 and max(s for s, _ in batch) < min(e for _, e in batch)


def test_parallel_tool_calls_in_threads_stay_in_their_session(tracing, server):
    server.script = parallel_then_answer("")
    agent = create_agent(chat_model(server), [lookup, audit])
    since = time.monotonic()
    with tracing.session("alone"):
        assert agent.invoke(USER)["messages"][-1].content == ANSWER
    assert tools_overlapped({"lookup", "audit"}, since), "LangGraph did not run the calls concurrently"
    assert_one_parallel_run(tracing, "alone", "")

    # Two such agents at once, each fanning out: nothing crosses between the sessions.
    results: dict[str, str] = {}

    def run(session_id: str) -> None:
        with tracing.session(session_id):
            results[session_id] = agent.invoke(USER)["messages"][-1].content

    threads = [threading.Thread(target=run, args=(f"twin-{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {"twin-0": ANSWER, "twin-1": ANSWER}
    for session_id in results:
        assert_one_parallel_run(tracing, session_id, "")
        assert verdict_key(tracing.verdict(session_id)) == verdict_key(tracing.verdict("alone"))


def test_parallel_tool_calls_as_asyncio_tasks_stay_in_their_session(tracing, server):
    server.script = parallel_then_answer("a")
    agent = create_agent(chat_model(server), [alookup, aaudit])

    async def run(session_id: str) -> str:
        async with tracing.session(session_id):
            return (await agent.ainvoke(USER))["messages"][-1].content

    async def main() -> list[str]:
        return await asyncio.gather(run("async-0"), run("async-1"), run("async-2"))

    since = time.monotonic()
    assert asyncio.run(main()) == [ANSWER] * 3
    assert tools_overlapped({"alookup", "aaudit"}, since)
    for n in range(3):
        assert_one_parallel_run(tracing, f"async-{n}", "a")


def test_parallel_tool_calls_under_a_thread_id_session(tracing, server):
    """No ag.session: LangGraph's thread_id names the session (no session span; the final answer ends it)."""
    server.script = parallel_then_answer("")
    agent = create_agent(chat_model(server), [lookup, audit])
    agent.invoke(USER, {"configurable": {"thread_id": "thread-7"}})
    steps = session_steps(tracing, "thread-7")
    assert [sequence for sequence, _, _ in steps] == [1, 2, 3, 4, 5]
    assert tracing.session_span("thread-7").attributes[A.STOP_REASON] == A.COMPLETED
