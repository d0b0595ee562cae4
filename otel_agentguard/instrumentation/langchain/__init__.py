"""LangChain and LangGraph instrumentation: tool runs and chat-model calls as judged GenAI spans.

What is traced
    * Every ``langchain_core`` tool execution, sync and async (``tool.invoke``,
      ``ainvoke``, ``run``, ``arun``, LangGraph's ``ToolNode``,
      ``langchain.agents.create_agent``, ``langgraph.prebuilt.create_react_agent``):
      an ``execute_tool {name}`` span with ``gen_ai.tool.name``,
      ``gen_ai.tool.call.id``, ``agentguard.tool.args.fingerprint`` / ``.keys`` /
      ``.size``, ``agentguard.tool.result.fingerprint`` and
      ``agentguard.tool.effect``. Arguments LangGraph injects (graph state,
      ``ToolRuntime``, store) are left out of the fingerprint. A tool that raises
      gets an ERROR span with ``error.type`` and the exception reaches the caller
      unchanged; an error LangChain turned into content (``handle_tool_error``)
      is an ERROR span too.
    * Every chat-model call (``invoke``, ``ainvoke``, ``batch``, ``stream``,
      ``astream``, and the streaming LangGraph does inside a run): a
      ``chat {model}`` span with ``gen_ai.provider.name``, request and response
      model, token usage (``AIMessage.usage_metadata``), finish reasons
      (``response_metadata``), ``agentguard.response.tool_calls`` and, for a final
      answer, ``agentguard.final.claims`` (found in process; the text stays out).
      When the model calls a provider SDK that is instrumented as well
      (``agentguard_openai``, openai-v2, OpenLLMetry), that call runs under this
      span and is counted once: the judge sees one model step per call.

Effects
    The policy's tool contract (``[tools.<name>] effect = "write"``) decides; a
    tool without a contract may declare its own in its metadata:
    ``StructuredTool.from_function(..., metadata={"agentguard_effect": "write"})``.

Session identity
    Inside ``otel_agentguard.session()`` (or with ``session.id`` /
    ``gen_ai.conversation.id`` in OpenTelemetry baggage) that session is used.
    Otherwise a LangGraph run's ``config["configurable"]["thread_id"]`` names the
    session: the spans carry it as ``gen_ai.conversation.id`` and
    ``agentguard.session.id``. Without either, the trace is the session.

Content
    Raw arguments, results, prompts and answers go on spans only with
    ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

Usage
    ``opentelemetry-instrument python app.py`` loads it as ``agentguard_langchain``;
    or in code::

        from otel_agentguard.instrumentation.langchain import LangChainInstrumentor
        LangChainInstrumentor().instrument(tracer_provider=provider)

    Turn it off with ``OTEL_PYTHON_DISABLED_INSTRUMENTATIONS=agentguard_langchain``
    or ``LangChainInstrumentor().uninstrument()``.
"""

from __future__ import annotations

from otel_agentguard.instrumentation._base import GuardInstrumentor, PatchTarget
from otel_agentguard.instrumentation.langchain._wrappers import (
    agenerate_wrapper,
    astream_wrapper,
    generate_wrapper,
    stream_wrapper,
    tool_arun_wrapper,
    tool_run_wrapper,
)
from otel_agentguard.instrumentation.langchain.package import _instruments

_TOOLS_MODULE = "langchain_core.tools.base"
_CHAT_MODULE = "langchain_core.language_models.chat_models"


class LangChainInstrumentor(GuardInstrumentor):
    instruments = _instruments
    targets = (
        PatchTarget(_TOOLS_MODULE, "BaseTool.run", tool_run_wrapper),
        PatchTarget(_TOOLS_MODULE, "BaseTool.arun", tool_arun_wrapper),
        PatchTarget(_CHAT_MODULE, "BaseChatModel._generate_with_cache", generate_wrapper),
        PatchTarget(_CHAT_MODULE, "BaseChatModel._agenerate_with_cache", agenerate_wrapper),
        PatchTarget(_CHAT_MODULE, "BaseChatModel.stream", stream_wrapper),
        PatchTarget(_CHAT_MODULE, "BaseChatModel.astream", astream_wrapper),
    )


__all__ = ["LangChainInstrumentor"]
