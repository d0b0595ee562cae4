"""The LangChain instrumentor with real langchain-core tools, langchain-openai's ChatOpenAI and
LangGraph agents (``langchain.agents.create_agent``, ``langgraph.prebuilt.create_react_agent``),
talking HTTP to the scripted model server."""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import pytest
import wrapt
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, ToolMessage
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.tools import StructuredTool, ToolException, tool
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry import baggage, context, trace
from opentelemetry.instrumentation.utils import suppress_instrumentation, unwrap
from opentelemetry.trace import SpanKind, StatusCode

from otel_agentguard import attributes as A
from otel_agentguard.exporters import encode_request
from otel_agentguard.instrumentation._model_call import ModelCall, ModelResult
from otel_agentguard.instrumentation._stream import StreamProxy
from otel_agentguard.instrumentation.langchain import LangChainInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

ChatOpenAI = pytest.importorskip("langchain_openai").ChatOpenAI

POLICY = parse_policy('[tools.cancel_order]\neffect = "write"\n\n[tools.annotated]\neffect = "read"\n')
MODEL = "gpt-4o-mini"
ANSWER = "Order A1 is on its way and should arrive on Friday."
USER = {"messages": [{"role": "user", "content": "Where is order A1?"}]}


@pytest.fixture
def tracing(instrumented_tracing) -> Iterator[GuardedTracing]:
    with instrumented_tracing(LangChainInstrumentor(), policy=POLICY) as tracing:
        yield tracing


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(turns(Turn.answer(ANSWER))) as server:  # stopping one takes ~0.5 s: share it
        yield server


@pytest.fixture
def serve(model_server):
    """``with serve(script) as server``: the shared server, answering from a fresh script."""

    @contextmanager
    def serving(script) -> Iterator[ScriptedModelServer]:
        model_server.script = script
        model_server.requests.clear()
        yield model_server

    return serving


# --- tools and helpers -----------------------------------------------------------------------------


@tool
def lookup(order: str) -> dict:
    """Look up an order."""
    return {"order": order, "status": "in transit"}


@tool
async def alookup(order: str) -> dict:
    """Look up an order (async)."""
    return {"order": order, "status": "in transit"}


def _refund(order: str, amount: float) -> str:
    return "refunded"


refund = StructuredTool.from_function(_refund, name="refund", description="Refund an order.",
                                      metadata={"agentguard_effect": "write"})
annotated = StructuredTool.from_function(lambda order: "ok", name="annotated", description="Says write; policy: read.",
                                         metadata={"agentguard_effect": "write"})


def chat_model(server: ScriptedModelServer, **options) -> ChatOpenAI:
    # An unhashable timeout keeps langchain-openai from sharing one cached async client across tests
    # (and so across event loops) for the same base_url. It must be the Timeout of the HTTP library the
    # installed openai is built on (httpx or, from openai 3.63, only httpx2), which openai re-exports.
    return ChatOpenAI(model=MODEL, base_url=server.openai_url, api_key="test", max_retries=0, stream_usage=True,
                      timeout=openai.Timeout(10.0), **options)


def tool_call(name: str, call_id: str = "call_1", **args) -> dict:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def spans_of(tracing: GuardedTracing, operation: str) -> list:
    return [s for s in tracing.spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == operation]


def steps(tracing: GuardedTracing, session_id: str) -> list:
    """The session's step spans in sequence order: (name, sequence)."""
    found = [s for s in tracing.spans()
             if s.attributes.get(A.SESSION_ID) == session_id and A.SEQUENCE in s.attributes
             and A.VERDICT not in s.attributes]
    return sorted(((s.name, s.attributes[A.SEQUENCE]) for s in found), key=lambda item: item[1])


def run_agent(agent, how: str, config: dict | None = None) -> str:
    """Run a LangGraph agent one of four ways; the final answer's text."""
    if how == "invoke":
        return agent.invoke(USER, config)["messages"][-1].content
    if how == "ainvoke":
        return asyncio.run(agent.ainvoke(USER, config))["messages"][-1].content
    if how == "stream":
        # "messages" mode: LangGraph streams the model's tokens through the chat model's callbacks.
        pieces = [chunk.content for chunk, _ in agent.stream(USER, config, stream_mode="messages")
                  if chunk.type == "AIMessageChunk"]
        return "".join(pieces)
    if how == "astream":
        async def collect() -> str:
            last = None
            async for update in agent.astream(USER, config, stream_mode="values"):
                last = update
            return last["messages"][-1].content
        return asyncio.run(collect())
    raise AssertionError(how)


AGENT_RUNS = ("invoke", "ainvoke", "stream", "astream")

# --- tool spans ------------------------------------------------------------------------------------


def test_sync_tool_span_has_the_documented_attributes(tracing):
    output = lookup.invoke(tool_call("lookup", call_id="call_7", order="A1"))

    assert isinstance(output, ToolMessage)
    (span,) = spans_of(tracing, A.OP_EXECUTE_TOOL)
    attributes = span.attributes
    fingerprinter = POLICY.fingerprinter("lookup")
    assert span.name == "execute_tool lookup"
    assert span.kind is SpanKind.INTERNAL
    assert span.status.status_code is StatusCode.UNSET
    assert attributes[A.GEN_AI_TOOL_NAME] == "lookup"
    assert attributes[A.GEN_AI_TOOL_CALL_ID] == "call_7"
    assert attributes[A.TOOL_ARGS_FINGERPRINT] == fingerprinter.arguments({"order": "A1"}).fingerprint
    assert tuple(attributes[A.TOOL_ARGS_KEYS]) == ("order",)
    assert attributes[A.TOOL_ARGS_SIZE] == fingerprinter.arguments({"order": "A1"}).size
    # The model sees the message's content; its fresh tool_call_id is no part of the result.
    assert attributes[A.TOOL_RESULT_FINGERPRINT] == fingerprinter.result(output.content)
    assert attributes[A.TOOL_RESULT_EMPTY] is False
    assert attributes[A.SEQUENCE] == 1
    assert A.SESSION_ID in attributes
    assert A.TOOL_EFFECT not in attributes  # no contract, no hint


def test_same_call_twice_has_the_same_fingerprints(tracing):
    lookup.invoke(tool_call("lookup", call_id="call_1", order="A1"))
    lookup.invoke(tool_call("lookup", call_id="call_2", order="A1"))
    lookup.invoke(tool_call("lookup", call_id="call_3", order="B2"))

    first, second, other = spans_of(tracing, A.OP_EXECUTE_TOOL)
    for key in (A.TOOL_ARGS_FINGERPRINT, A.TOOL_RESULT_FINGERPRINT):
        assert first.attributes[key] == second.attributes[key]
        assert first.attributes[key] != other.attributes[key]


def test_async_tool_span_is_current_while_the_tool_runs(tracing):
    seen = []

    async def probe(order: str) -> str:
        seen.append(trace.get_current_span().get_span_context())
        return "ok"

    async_tool = StructuredTool.from_function(coroutine=probe, name="probe", description="probe")
    asyncio.run(async_tool.ainvoke(tool_call("probe", order="A1")))
    asyncio.run(alookup.ainvoke({"order": "A1"}))

    probe_span, alookup_span = spans_of(tracing, A.OP_EXECUTE_TOOL)
    assert probe_span.name == "execute_tool probe"
    assert seen == [probe_span.get_span_context()]
    assert alookup_span.name == "execute_tool alookup"
    assert tuple(alookup_span.attributes[A.TOOL_ARGS_KEYS]) == ("order",)
    assert A.TOOL_RESULT_FINGERPRINT in alookup_span.attributes


def test_sync_tool_called_async_is_one_span(tracing):
    asyncio.run(lookup.ainvoke(tool_call("lookup", order="A1")))

    (span,) = spans_of(tracing, A.OP_EXECUTE_TOOL)
    assert span.name == "execute_tool lookup"
    assert A.TOOL_RESULT_FINGERPRINT in span.attributes


def test_effect_from_tool_metadata_and_policy_contract(tracing):
    refund.invoke({"order": "A1", "amount": 5})
    annotated.invoke({"order": "A1"})
    cancel_order = StructuredTool.from_function(lambda order: "cancelled", name="cancel_order",
                                                description="Cancel an order.")
    cancel_order.invoke({"order": "A1"})

    effects = {s.attributes[A.GEN_AI_TOOL_NAME]: s.attributes.get(A.TOOL_EFFECT)
               for s in spans_of(tracing, A.OP_EXECUTE_TOOL)}
    assert effects == {"refund": "write", "annotated": "read", "cancel_order": "write"}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tool_that_raises_is_an_error_span_and_the_exception_reaches_the_caller(tracing, mode):
    raised = []

    def explode(order: str) -> str:
        raised.append(LookupError(f"no order {order}"))
        raise raised[-1]

    async def aexplode(order: str) -> str:
        return explode(order)

    broken = StructuredTool.from_function(func=explode, coroutine=aexplode, name="broken", description="fails")
    with pytest.raises(LookupError) as caught:
        if mode == "sync":
            broken.invoke(tool_call("broken", order="A1"))
        else:
            asyncio.run(broken.ainvoke(tool_call("broken", order="A1")))

    assert caught.value is raised[0]
    (span,) = spans_of(tracing, A.OP_EXECUTE_TOOL)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == "LookupError"
    assert A.TOOL_RESULT_FINGERPRINT not in span.attributes
    assert not span.events  # the message quotes an argument: only with capture on


def test_tool_error_handled_by_langchain_is_still_an_error_span(tracing):
    def flaky(order: str) -> str:
        raise ToolException("backend down")

    handled = StructuredTool.from_function(flaky, name="flaky", description="fails", handle_tool_error=True)
    output = handled.invoke(tool_call("flaky", order="A1"))

    assert output.status == "error" and output.content == "backend down"  # LangChain's behaviour, unchanged
    (span,) = spans_of(tracing, A.OP_EXECUTE_TOOL)
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == "tool_error"


def test_injected_arguments_stay_out_of_the_fingerprint(tracing, serve):
    @tool
    def where(order: str, runtime: ToolRuntime) -> str:
        """Where is the order."""
        return f"{order} in transit ({len(runtime.state['messages'])} messages so far)"

    script = turns(Turn.call("where", order="A1"), Turn.call("where", order="A1"), Turn.answer(ANSWER))
    with serve(script) as server:
        create_agent(chat_model(server), [where]).invoke(USER)

    first, second = spans_of(tracing, A.OP_EXECUTE_TOOL)
    expected = POLICY.fingerprinter("where").arguments({"order": "A1"})
    for span in (first, second):
        assert tuple(span.attributes[A.TOOL_ARGS_KEYS]) == ("order",)
        assert span.attributes[A.TOOL_ARGS_FINGERPRINT] == expected.fingerprint
        assert span.attributes[A.TOOL_ARGS_SIZE] == expected.size


# --- chat model spans ------------------------------------------------------------------------------


def test_chat_model_calls_are_model_spans(tracing, serve):
    script = turns(Turn.call("lookup", order="A1"),
                   Turn.answer("I have cancelled order A1.", input_tokens=300, output_tokens=12))
    with serve(script) as server:
        model = chat_model(server, temperature=0.2)
        asked = model.bind_tools([lookup]).invoke("Where is A1?")
        answered = model.invoke("Cancel A1.")

    assert len(asked.tool_calls) == 1 and answered.content == "I have cancelled order A1."
    tool_turn, final = spans_of(tracing, "chat")
    assert tool_turn.name == f"chat {MODEL}"
    assert tool_turn.kind is SpanKind.CLIENT
    assert tool_turn.attributes[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert tool_turn.attributes[A.GEN_AI_REQUEST_MODEL] == MODEL
    assert tool_turn.attributes[A.GEN_AI_RESPONSE_MODEL] == MODEL
    assert tool_turn.attributes["gen_ai.request.temperature"] == 0.2
    assert tool_turn.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert tool_turn.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 30
    assert tuple(tool_turn.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("tool_calls",)
    assert tool_turn.attributes[A.RESPONSE_TOOL_CALLS] == 1
    assert A.FINAL_CLAIMS not in tool_turn.attributes
    assert final.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 300
    assert final.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 12
    assert tuple(final.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)
    assert final.attributes[A.RESPONSE_TOOL_CALLS] == 0
    assert tuple(final.attributes[A.FINAL_CLAIMS]) == ("write",)


@pytest.mark.parametrize("mode", ["stream", "astream"])
def test_streamed_chat_model_call_is_one_model_span(tracing, mode, serve):
    script = turns(Turn.calls(("lookup", {"order": "A1"}), ("lookup", {"order": "B2"})),
                   Turn.answer("Your refund has been submitted.", input_tokens=300, output_tokens=12))
    with serve(script) as server:
        model = chat_model(server).bind_tools([lookup])

        prompts = ("Where are A1 and B2?", "Refund A1.")

        async def collect() -> list:  # one event loop: the async client belongs to it
            streams = []
            for prompt in prompts:  # not a comprehension: async ones nest only from Python 3.11
                streams.append([chunk async for chunk in model.astream(prompt)])
            return streams

        streams = [list(model.stream(prompt)) for prompt in prompts] if mode == "stream" else asyncio.run(collect())
        assert all(len(chunks) > 2 for chunks in streams)
        assert all(request.stream for request in server.requests)

    tool_turn, final = spans_of(tracing, "chat")
    assert tool_turn.attributes[A.RESPONSE_TOOL_CALLS] == 2
    assert tuple(tool_turn.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("tool_calls",)
    assert tool_turn.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 120
    assert final.attributes[A.RESPONSE_TOOL_CALLS] == 0
    assert final.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 300
    assert final.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 12
    assert tuple(final.attributes[A.FINAL_CLAIMS]) == ("write",)


class SplitUsageModel(BaseChatModel):
    """Reports usage the way Anthropic streams do: input tokens first, output tokens last."""

    @property
    def _llm_type(self) -> str:
        return "split-usage"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        raise NotImplementedError

    def _stream(self, messages, stop=None, run_manager=None, **kwargs):
        usage = {"input_tokens": 100, "output_tokens": 0, "total_tokens": 100}
        yield ChatGenerationChunk(message=AIMessageChunk(content="Order A1 ", usage_metadata=usage))
        yield ChatGenerationChunk(message=AIMessageChunk(content="is in transit."))
        usage = {"input_tokens": 0, "output_tokens": 7, "total_tokens": 7}
        yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=usage,
                                                         response_metadata={"stop_reason": "end_turn"}))


def test_usage_split_across_chunks_is_added_up(tracing):
    chunks = list(SplitUsageModel().stream("Where is A1?"))

    assert "".join(chunk.content for chunk in chunks) == "Order A1 is in transit."
    (span,) = spans_of(tracing, "chat")
    assert span.name == "chat"  # this model names no model
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 100
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 7
    assert tuple(span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("end_turn",)


def test_stream_abandoned_early_ends_its_span_once_without_error(tracing, serve):
    with serve(turns(Turn.answer("A long answer, streamed in many small pieces."))) as server:
        model = chat_model(server)
        stream = model.stream("Tell me.")
        assert spans_of(tracing, "chat") == []  # like the call itself, nothing starts before the first chunk
        next(stream)
        next(stream)
        assert spans_of(tracing, "chat") == []  # still open
        stream.close()
        stream.close()

    (span,) = spans_of(tracing, "chat")
    assert span.status.status_code is StatusCode.UNSET


def test_a_model_that_reports_no_finish_reason_still_gives_a_final_answer(tracing):
    call = {"name": "lookup", "args": {"order": "A1"}, "id": "call_1", "type": "tool_call"}
    model = GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=[call]), AIMessage(ANSWER)]))
    with tracing.session("fake-model"):
        model.invoke("Where is A1?")
        model.invoke("And now?")

    tool_turn, final = spans_of(tracing, "chat")
    assert tool_turn.attributes[A.RESPONSE_TOOL_CALLS] == 1
    assert tuple(tool_turn.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ()
    assert tuple(final.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)  # an answer, no tool call
    assert tracing.verdict("fake-model").stop_reason == A.COMPLETED


def test_model_error_is_an_error_span_and_reaches_the_caller(tracing):
    model = ChatOpenAI(model=MODEL, base_url="http://127.0.0.1:9/v1", api_key="test", max_retries=0, timeout=2)
    with pytest.raises(Exception) as caught:
        model.invoke("Hello?")

    (span,) = spans_of(tracing, "chat")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == type(caught.value).__qualname__


# --- LangGraph agents end to end ---------------------------------------------------------------------


@pytest.mark.parametrize("how", AGENT_RUNS)
def test_agent_run_completes(tracing, how, serve):
    script = turns(Turn.call("lookup", order="A1"), Turn.answer(ANSWER))
    with serve(script) as server:
        agent = create_agent(chat_model(server), [lookup])
        with tracing.session("ok"):
            answer = run_agent(agent, how)

    assert answer == ANSWER
    assert steps(tracing, "ok") == [(f"chat {MODEL}", 1), ("execute_tool lookup", 2), (f"chat {MODEL}", 3)]
    verdict = tracing.verdict("ok")
    assert verdict.stop_reason == A.COMPLETED
    assert (verdict.steps, verdict.model_calls, verdict.tokens) == (2, 2, 300)  # steps: tools + final answer


def test_react_agent_from_langgraph_prebuilt_completes(tracing, serve):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated in favour of create_agent, still widely used
        from langgraph.prebuilt import create_react_agent

        script = turns(Turn.call("lookup", order="A1"), Turn.answer(ANSWER))
        with serve(script) as server:
            agent = create_react_agent(chat_model(server), [lookup])
            with tracing.session("react"):
                agent.invoke(USER)

    assert [name for name, _ in steps(tracing, "react")] == [f"chat {MODEL}", "execute_tool lookup", f"chat {MODEL}"]
    assert tracing.verdict("react").stop_reason == A.COMPLETED


@pytest.mark.parametrize("how", AGENT_RUNS)
def test_agent_stuck_on_one_call_gets_tool_loop(tracing, how, serve):
    script = turns(*[Turn.call("lookup", order="A1") for _ in range(4)], Turn.answer(ANSWER))
    with serve(script) as server:
        agent = create_agent(chat_model(server), [lookup])
        with tracing.session("loop"):
            run_agent(agent, how)

    # model 1, lookup 2, model 3, lookup 4, model 5, lookup 6: the third identical call.
    verdict = tracing.verdict("loop")
    assert verdict.stop_reason == A.TOOL_LOOP
    events = [e for e in tracing.session_span("loop").events if e.name == A.STALL_EVENT]
    assert events[0].attributes[A.PROBE] == A.TOOL_LOOP
    assert events[0].attributes[A.SEQUENCE] == 6
    assert tuple(events[0].attributes[A.EVIDENCE]) == (2, 4, 6)


# LangGraph hands a run's config to the asyncio tasks it starts only from Python 3.11 on
# (create_task's context argument): before, a chat model in an async run cannot see the thread.
BEFORE_ASYNC_CONTEXT = pytest.mark.xfail(sys.version_info < (3, 11), strict=True,
                                         reason="LangGraph propagates config to async tasks from Python 3.11 on")


@pytest.mark.parametrize("how", ["invoke", pytest.param("astream", marks=BEFORE_ASYNC_CONTEXT)])
def test_thread_id_becomes_the_session(tracing, how, serve):
    script = turns(Turn.call("lookup", order="A1"), Turn.answer(ANSWER))
    with serve(script) as server:
        agent = create_agent(chat_model(server), [lookup], checkpointer=InMemorySaver())
        run_agent(agent, how, {"configurable": {"thread_id": "thread-42"}})

    made = spans_of(tracing, "chat") + spans_of(tracing, A.OP_EXECUTE_TOOL)
    assert len(made) == 3
    for span in made:
        assert span.attributes[A.SESSION_ID] == "thread-42"
        assert span.attributes[A.GEN_AI_CONVERSATION_ID] == "thread-42"
    assert steps(tracing, "thread-42") == [(f"chat {MODEL}", 1), ("execute_tool lookup", 2), (f"chat {MODEL}", 3)]
    # Without a session span the final answer ends the session: its verdict span names the thread.
    assert tracing.session_span("thread-42").attributes[A.STOP_REASON] == A.COMPLETED


def test_an_active_session_wins_over_thread_id(tracing, serve):
    with serve(turns(Turn.call("lookup", order="A1"), Turn.answer(ANSWER))) as server:
        agent = create_agent(chat_model(server), [lookup])
        with tracing.session("chosen"):
            agent.invoke(USER, {"configurable": {"thread_id": "thread-42"}})

    made = spans_of(tracing, "chat") + spans_of(tracing, A.OP_EXECUTE_TOOL)
    assert {span.attributes[A.SESSION_ID] for span in made} == {"chosen"}
    assert all(A.GEN_AI_CONVERSATION_ID not in span.attributes for span in made)
    assert tracing.verdict("chosen").stop_reason == A.COMPLETED


def test_a_baggage_session_wins_over_thread_id(tracing, serve):
    token = context.attach(baggage.set_baggage("session.id", "from-baggage"))
    try:
        with serve(turns(Turn.answer(ANSWER))) as server:
            create_agent(chat_model(server), [lookup]).invoke(USER, {"configurable": {"thread_id": "thread-42"}})
    finally:
        context.detach(token)

    (span,) = spans_of(tracing, "chat")
    assert span.attributes[A.SESSION_ID] == "from-baggage"


# --- privacy -------------------------------------------------------------------------------------------


SECRETS = {
    "prompt": "lc-prompt-secret-4d2e",
    "argument": "lc-argument-secret-91bc",
    "result": "lc-result-secret-c0de",
    "answer": "lc-answer-secret-5e11",
}


@pytest.mark.parametrize("capture", [False, True])
def test_raw_content_stays_out_of_exported_bytes_unless_capture_is_on(tracing, monkeypatch, capture, serve):
    if capture:
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    else:
        monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)

    @tool
    def account(customer: str) -> str:
        """Look up a customer account."""
        return f"account of {customer}: {SECRETS['result']}"

    script = turns(Turn.call("account", customer=SECRETS["argument"]),
                   Turn.answer(f"Here it is: {SECRETS['answer']}"))
    with serve(script) as server:
        agent = create_agent(chat_model(server), [account])
        agent.invoke({"messages": [{"role": "user", "content": f"My id is {SECRETS['prompt']}"}]})
        agent_stream = create_agent(chat_model(server), [account])
        server.script = turns(Turn.call("account", customer=SECRETS["argument"]),
                              Turn.answer(f"Here it is: {SECRETS['answer']}"))
        for _ in agent_stream.stream({"messages": [{"role": "user", "content": f"My id is {SECRETS['prompt']}"}]},
                                     stream_mode="messages"):
            pass

    exported = json.dumps(encode_request(tracing.spans()))
    assert len(spans_of(tracing, A.OP_EXECUTE_TOOL)) == 2
    for where, secret in SECRETS.items():
        assert (secret in exported) is capture, f"the {where} secret, capture={capture}"


# --- one model step per call when the provider SDK is instrumented too ----------------------------------

_COMPLETIONS = "openai.resources.chat.completions.completions"


@contextmanager
def foreign_openai_instrumentation(tracer: trace.Tracer) -> Iterator[None]:
    """What openai-v2 or OpenLLMetry do: a chat span of their own around each SDK call, blind to ours."""

    def create(wrapped, instance, args, kwargs):
        span = tracer.start_span(f"chat {kwargs.get('model')}", kind=SpanKind.CLIENT, attributes={
            A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_PROVIDER_NAME: "openai",
            A.GEN_AI_REQUEST_MODEL: kwargs.get("model"), A.GEN_AI_USAGE_INPUT_TOKENS: 120,
            A.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
        })
        with trace.use_span(span, end_on_exit=False):
            try:
                response = wrapped(*args, **kwargs)
            except BaseException:
                span.end()
                raise
        if kwargs.get("stream"):
            return StreamProxy(response, lambda chunk: None, lambda error: span.end())
        span.end()
        return response

    import openai.resources.chat.completions.completions as module

    wrapt.wrap_function_wrapper(module, "Completions.create", create)
    try:
        yield
    finally:
        unwrap(module.Completions, "create")


@contextmanager
def enriching_openai_instrumentation(tracer: trace.Tracer) -> Iterator[None]:
    """What agentguard's own provider instrumentors do: ``ModelCall`` enriches an open model span."""

    def start(kwargs) -> ModelCall:
        call = ModelCall.start(tracer, provider="openai", request_model=kwargs.get("model"))
        assert call is not None
        call.span.set_attribute("test.seen_by_provider_instrumentation", True)
        return call

    def done(call: ModelCall, response, kwargs):
        if kwargs.get("stream"):
            return StreamProxy(response, lambda chunk: None, lambda error: call.finish(ModelResult(), error))
        call.finish(ModelResult(), None)
        return response

    def create(wrapped, instance, args, kwargs):
        call = start(kwargs)
        with call.activated():
            response = wrapped(*args, **kwargs)
        return done(call, response, kwargs)

    async def acreate(wrapped, instance, args, kwargs):
        call = start(kwargs)
        with call.activated():
            response = await wrapped(*args, **kwargs)
        return done(call, response, kwargs)

    import openai.resources.chat.completions.completions as module

    wrapt.wrap_function_wrapper(module, "Completions.create", create)
    wrapt.wrap_function_wrapper(module, "AsyncCompletions.create", acreate)
    try:
        yield
    finally:
        unwrap(module.Completions, "create")
        unwrap(module.AsyncCompletions, "create")


@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_one_model_step_per_call_next_to_a_foreign_provider_instrumentation(tracing, how, serve):
    with foreign_openai_instrumentation(tracing.tracer_provider.get_tracer("foreign")):
        with serve(turns(Turn.call("lookup", order="A1"), Turn.answer(ANSWER))) as server:
            agent = create_agent(chat_model(server), [lookup])
            with tracing.session("two-instrumentations"):
                run_agent(agent, how)

    chat_spans = spans_of(tracing, "chat")
    ours = [s for s in chat_spans if s.instrumentation_scope.name.endswith(".langchain")]
    theirs = [s for s in chat_spans if s.instrumentation_scope.name == "foreign"]
    assert len(ours) == len(theirs) == 2
    for inner in theirs:  # the provider's span ran under ours: flagged, not a second step
        assert inner.parent.span_id in {s.context.span_id for s in ours}
        assert inner.attributes[A.NESTED_STEP] is True
        assert A.SEQUENCE not in inner.attributes
    verdict = tracing.verdict("two-instrumentations")
    assert (verdict.stop_reason, verdict.model_calls, verdict.tokens) == (A.COMPLETED, 2, 300)


@pytest.mark.parametrize("how", ["invoke", "stream"])
def test_one_model_span_per_call_with_an_enriching_provider_instrumentation(tracing, how, serve):
    with enriching_openai_instrumentation(tracing.tracer_provider.get_tracer("agentguard-like")):
        with serve(turns(Turn.call("lookup", order="A1"), Turn.answer(ANSWER))) as server:
            agent = create_agent(chat_model(server), [lookup])
            with tracing.session("enriched"):
                run_agent(agent, how)

    chat_spans = spans_of(tracing, "chat")
    assert len(chat_spans) == 2  # one per request: the provider call enriched our span
    assert all(span.attributes.get("test.seen_by_provider_instrumentation") for span in chat_spans)
    assert tracing.verdict("enriched").model_calls == 2


@pytest.mark.parametrize("mode", ["stream", "astream"])
def test_model_stream_runs_under_its_model_span(tracing, mode, serve):
    with enriching_openai_instrumentation(tracing.tracer_provider.get_tracer("agentguard-like")):
        with serve(turns(Turn.answer(ANSWER))) as server:
            model = chat_model(server)

            async def collect() -> list:
                return [chunk async for chunk in model.astream("Where is A1?")]

            chunks = list(model.stream("Where is A1?")) if mode == "stream" else asyncio.run(collect())

    assert "".join(chunk.content for chunk in chunks) == ANSWER
    (span,) = spans_of(tracing, "chat")
    assert span.attributes.get("test.seen_by_provider_instrumentation") is True
    assert tuple(span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS]) == ("stop",)


def test_one_model_span_per_call_with_agentguard_openai_instrumentor(tracing, serve):
    openai_instrumentation = pytest.importorskip("otel_agentguard.instrumentation.openai")
    instrumentor = openai_instrumentation.OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    try:
        script = turns(Turn.call("lookup", order="A1"), Turn.answer(ANSWER), Turn.call("lookup", order="A1"),
                       Turn.answer(ANSWER))
        with serve(script) as server:
            agent = create_agent(chat_model(server), [lookup])
            with tracing.session("with-openai"):
                run_agent(agent, "invoke")
                run_agent(agent, "stream")
    finally:
        instrumentor.uninstrument()

    chat_spans = spans_of(tracing, "chat")
    assert len(chat_spans) == len(server.requests) == 4
    assert all(s.instrumentation_scope.name.endswith(".langchain") for s in chat_spans)
    assert tracing.verdict("with-openai").model_calls == 4


# --- switching it off -------------------------------------------------------------------------------------


def test_uninstrument_stops_the_spans(tracing, serve):
    with serve(turns(Turn.answer(ANSWER))) as server:
        model = chat_model(server)
        lookup.invoke({"order": "A1"})
        model.invoke("Hi")
        LangChainInstrumentor().uninstrument()  # a new handle: the instrumentor is a singleton
        lookup.invoke({"order": "A1"})
        asyncio.run(alookup.ainvoke({"order": "A1"}))
        model.invoke("Hi")
        list(model.stream("Hi"))

    assert len(spans_of(tracing, A.OP_EXECUTE_TOOL)) == 1
    assert len(spans_of(tracing, "chat")) == 1
    assert len(server.requests) == 3  # the calls themselves still went through


def test_suppressed_instrumentation_makes_no_spans(tracing, serve):
    with serve(turns(Turn.answer(ANSWER))) as server:
        with suppress_instrumentation():
            lookup.invoke({"order": "A1"})
            chat_model(server).invoke("Hi")
            list(chat_model(server).stream("Hi"))

    assert tracing.spans() == ()
