"""A LangGraph supervisor routing between two workers in turn, on the real ``langgraph`` and
``langchain-openai`` against the scripted model server: each model call runs in a graph node,
which our LangChain instrumentation names as the step's agent, so the routing that never gets
anything done is a ``handoff_loop``, live and on replay."""

from __future__ import annotations

import json
from typing import TypedDict

import openai
import pytest
from langgraph.graph import END, START, StateGraph

from otel_agentguard import attributes as A
from otel_agentguard.exporters import encode_request
from otel_agentguard.instrumentation.langchain import LangChainInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.replay.runner import replay_files
from otel_agentguard.scripted_model import ScriptedModelServer, Turn

ChatOpenAI = pytest.importorskip("langchain_openai").ChatOpenAI
POLICY = parse_policy("[profiles.default]\nmax_steps = 40\nmax_tokens = 100000\n")
WORKERS = ("billing", "shipping")


class State(TypedDict):
    turn: int


def supervisor_graph(server: ScriptedModelServer, rounds: int):
    model = ChatOpenAI(model="gpt-4o-mini", base_url=server.openai_url, api_key="test", max_retries=0,
                       timeout=openai.Timeout(10.0))

    def supervisor(state: State) -> State:
        model.invoke("Which worker should take the customer's refund next?")
        return {"turn": state["turn"] + 1}

    def worker(state: State) -> State:
        model.invoke("Handle the refund request, or hand it back.")
        return state

    def route(state: State) -> str:
        return WORKERS[state["turn"] % 2] if state["turn"] <= rounds else END

    graph = StateGraph(State)
    graph.add_node("supervisor", supervisor)
    for name in WORKERS:
        graph.add_node(name, worker)
        graph.add_edge(name, "supervisor")
    graph.add_edge(START, "supervisor")
    graph.add_conditional_edges("supervisor", route, [*WORKERS, END])
    return graph.compile()


@pytest.fixture
def tracing(instrumented_tracing):
    with instrumented_tracing(LangChainInstrumentor(), policy=POLICY) as tracing:
        yield tracing


@pytest.mark.parametrize(("rounds", "expected"), [(3, A.HANDOFF_LOOP), (1, A.COMPLETED)])
def test_a_supervisor_routing_to_the_same_workers_in_turn(tracing, tmp_path, rounds, expected):
    with ScriptedModelServer(lambda request: Turn.answer("Passing it on.")) as server:
        with tracing.session("routing"):
            supervisor_graph(server, rounds).invoke({"turn": 0})
    models = sorted((s for s in tracing.spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == "chat"),
                    key=lambda s: s.attributes[A.SEQUENCE])
    agents = [s.attributes.get(A.GEN_AI_AGENT_NAME) for s in models]
    assert agents[:4] == ["supervisor", "shipping", "supervisor", "billing"][:len(agents[:4])]
    verdict = tracing.verdict("routing")
    assert verdict.stop_reason == expected
    recording = tmp_path / "trace.jsonl"
    recording.write_text(json.dumps(encode_request([s for s in tracing.spans()
                                                   if not s.attributes.get(A.VERDICT)])) + "\n")
    (replayed,) = [v for _, v in replay_files([recording], POLICY)]
    assert (replayed.stop_reason, [a.evidence for a in replayed.alerts]) == \
        (verdict.stop_reason, [a.evidence for a in verdict.alerts])
