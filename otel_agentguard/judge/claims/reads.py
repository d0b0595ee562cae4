"""What a session read, as a model request carries it: the results its read tools returned.

A final answer that restates one of those states ("your parcel was delivered") claims nothing.
The request of the call that produced the answer holds the conversation so far, tool results
included, in the provider's own shape; this module takes the results out of it, in process,
leaving out those of tools whose contract says they write and those that failed. Nothing is
exported: the texts only ground the claim rules (see :class:`~otel_agentguard.judge.claims.Grounds`).

Shapes read: OpenAI chat messages (``role: tool``, with the names from the assistant's
``tool_calls``), OpenAI Responses input items (``function_call_output``), Anthropic content blocks
(``tool_result``, names from ``tool_use``), LangChain messages (``ToolMessage``, names from
``AIMessage.tool_calls``), and the GenAI conventions' ``tool_call_response`` parts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_MAX_MESSAGES = 200  # the last ones: a session's recent reads are the ones an answer restates
_MAX_TEXT = 4096  # characters of one result


def reads_in_messages(messages: Any, effect_of: Callable[[str], str | None]) -> list[str]:
    """The texts of the tool results in ``messages`` whose tool is not a write tool
    (``effect_of(name)`` says, from the policy's contracts) and did not fail."""
    if not isinstance(messages, (list, tuple)):
        return []
    recent = list(messages[-_MAX_MESSAGES:])
    names: dict[str, str] = {}
    for message in recent:
        for call_id, name in _calls_named(message):
            names[call_id] = name
    reads: list[str] = []
    for message in recent:
        for call_id, result, failed in _results(message):
            name = names.get(call_id, "")
            if failed or (name and effect_of(name) == "write"):
                continue
            text = _text(result)
            if text:
                reads.append(text[:_MAX_TEXT])
    return reads


def _get(item: Any, key: str) -> Any:
    if isinstance(item, Mapping):
        return item.get(key)
    return getattr(item, key, None)


def _calls_named(message: Any) -> Iterable[tuple[str, str]]:
    """(call id, tool name) of each tool call a message asks for."""
    for call in _get(message, "tool_calls") or ():  # OpenAI chat, LangChain AIMessage
        function = _get(call, "function")
        name = _get(function, "name") if function is not None else _get(call, "name")
        call_id = _get(call, "id")
        if isinstance(call_id, str) and isinstance(name, str):
            yield call_id, name
    if _get(message, "type") == "function_call":  # OpenAI Responses input item
        call_id, name = _get(message, "call_id"), _get(message, "name")
        if isinstance(call_id, str) and isinstance(name, str):
            yield call_id, name
    content = _get(message, "content")
    if isinstance(content, list):  # Anthropic content blocks
        for block in content:
            if _get(block, "type") == "tool_use":
                call_id, name = _get(block, "id"), _get(block, "name")
                if isinstance(call_id, str) and isinstance(name, str):
                    yield call_id, name


def _results(message: Any) -> Iterable[tuple[str, Any, bool]]:
    """(call id, result, failed) of each tool result a message carries."""
    role = _get(message, "role") or _get(message, "type")
    if role == "tool":  # OpenAI chat, LangChain ToolMessage
        yield str(_get(message, "tool_call_id") or ""), _get(message, "content"), _get(message, "status") == "error"
    elif role == "function_call_output":  # OpenAI Responses
        yield str(_get(message, "call_id") or ""), _get(message, "output"), False
    content = _get(message, "content")
    if isinstance(content, list):
        for block in content:
            kind = _get(block, "type")
            if kind == "tool_result":  # Anthropic
                yield str(_get(block, "tool_use_id") or ""), _get(block, "content"), bool(_get(block, "is_error"))
            elif kind == "tool_call_response":  # GenAI conventions' message parts
                yield str(_get(block, "id") or ""), _get(block, "response") or _get(block, "result"), False
    parts = _get(message, "parts")
    if isinstance(parts, list):
        for part in parts:
            if _get(part, "type") == "tool_call_response":
                yield str(_get(part, "id") or ""), _get(part, "response") or _get(part, "result"), False


def _text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, list):  # content parts
        return " ".join(_text(_get(part, "text") if _get(part, "text") is not None else part) for part in result)
    if result is None:
        return ""
    try:
        return json.dumps(result, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return ""
