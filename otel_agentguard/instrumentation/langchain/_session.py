"""Session identity without code changes: a LangGraph run's ``thread_id``.

LangGraph keeps one conversation per ``config["configurable"]["thread_id"]``
(and LangChain copies it into the run's ``metadata``). The spans this
instrumentation makes name that thread as their session, through
``gen_ai.conversation.id`` and ``agentguard.session.id``, so the guard judges
each thread as one session.

A session the application chose itself wins: inside ``otel_agentguard.session()``
or with a session in OpenTelemetry baggage (``session.id``,
``gen_ai.conversation.id``), nothing is stamped and the processor resolves the
session as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_agentguard import attributes as A
from otel_agentguard.live.resolution import baggage_session, enclosing_session

_THREAD_KEY = "thread_id"
_NODE_KEY = "langgraph_node"  # the graph node running now: in a multi-agent graph, the agent
_NAMESPACE_KEY = "langgraph_checkpoint_ns"  # "worker:<id>|model:<id>": the nodes, outermost first

try:  # the config of the runnable that is running now (langchain-core >= 0.2)
    from langchain_core.runnables.config import var_child_runnable_config as _current_config
except ImportError:  # pragma: no cover - older langchain-core: explicit config and metadata only
    _current_config = None  # type: ignore[assignment]  # absent in this version: callers check for None


def thread_id(*sources: Any) -> str | None:
    """The LangGraph thread of this call: from the given configs/metadata, else the running config.

    Each source is a ``RunnableConfig`` (its ``configurable`` and ``metadata``
    are read) or a plain metadata mapping.
    """
    for source in sources:
        found = _from_source(source)
        if found:
            return found
    if _current_config is not None:
        return _from_source(_current_config.get())
    return None


def session_attributes(thread: str | None) -> dict[str, Any]:
    """The attributes naming ``thread`` as the session, unless the application chose one."""
    if not thread or enclosing_session() is not None or baggage_session() is not None:
        return {}
    return {A.GEN_AI_CONVERSATION_ID: thread, A.SESSION_ID: thread}


def session_of(thread: str | None) -> str | None:
    """The session id a call of this thread is judged in, when the thread names it (else the
    context decides, as for any span)."""
    return session_attributes(thread).get(A.SESSION_ID)


def agent_attributes(*sources: Any) -> dict[str, Any]:
    """``gen_ai.agent.name`` of a model call: the node of the outermost LangGraph graph it runs in
    (a supervisor, a worker: a worker that is itself a ReAct subgraph still counts as one agent),
    from the given configs/metadata, else the running config; nothing outside a graph."""
    for source in (*sources, _current_config.get() if _current_config is not None else None):
        if isinstance(source, Mapping):
            metadata = source.get("metadata")
            found = metadata if isinstance(metadata, Mapping) else source
            namespace = found.get(_NAMESPACE_KEY)
            node = namespace.split(":", 1)[0] if isinstance(namespace, str) and namespace else found.get(_NODE_KEY)
            if isinstance(node, str) and node and not node.startswith("__"):
                return {A.GEN_AI_AGENT_NAME: node}
    return {}


def _from_source(source: Any) -> str | None:
    if not isinstance(source, Mapping):
        return None
    for section in (source.get("configurable"), source.get("metadata"), source):
        if isinstance(section, Mapping):
            value = section.get(_THREAD_KEY)
            if value is not None and value != "":
                return str(value)
    return None

