"""Read Anthropic requests, messages and stream events into what the judge needs.

Access is defensive (``getattr`` or mapping lookup, with defaults): the SDK's
models gain and rename fields between releases, requests mix plain dicts with
the SDK's own models (an agent loop sends ``response.content`` back), and an
unexpected shape must cost only an attribute, never the user's call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from otel_agentguard.instrumentation._model_call import ModelResult

TOOL_USE = "tool_use"  # the only block the client must answer with a tool_result (server tools need none)

_REQUEST_NUMBERS = {
    "max_tokens": "gen_ai.request.max_tokens",
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "top_k": "gen_ai.request.top_k",
}


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# --- responses -----------------------------------------------------------------------------------


def is_message(returned: Any) -> bool:
    return _get(returned, "type") == "message" or (hasattr(returned, "content") and hasattr(returned, "stop_reason"))


def message_result(message: Any) -> ModelResult:
    """A whole ``Message``: ``tool_use`` blocks are tool calls, ``stop_reason`` the finish reason."""
    result = ModelResult(response_model=_str(_get(message, "model")), response_id=_str(_get(message, "id")))
    _usage(result, _get(message, "usage"), with_output=True)
    reason = _get(message, "stop_reason")
    if reason:
        result.finish_reasons.append(str(reason))
    for block in _get(message, "content") or ():
        kind = _get(block, "type")
        if kind == TOOL_USE:
            result.tool_calls += 1
            _add_id(result, _get(block, "id"))
        elif kind == "text":
            # Joined without a separator, like the SDK's get_final_text(): citations split one
            # sentence into several text blocks.
            result.add_text(_get(block, "text"))
    return result


class MessageEvents:
    """Accumulates the raw events of a streamed message (``stream=True`` or ``messages.stream``)."""

    def __init__(self) -> None:
        self.result = ModelResult()

    def add(self, event: Any) -> None:
        kind = _get(event, "type")
        result = self.result
        if kind == "content_block_delta":
            delta = _get(event, "delta")
            if _get(delta, "type") == "text_delta":
                result.add_text(_get(delta, "text"))
        elif kind == "content_block_start":
            block = _get(event, "content_block")
            block_kind = _get(block, "type")
            if block_kind == TOOL_USE:
                result.tool_calls += 1
                _add_id(result, _get(block, "id"))
            elif block_kind == "text":
                result.add_text(_get(block, "text"))
        elif kind == "message_start":
            message = _get(event, "message")
            result.response_model = _str(_get(message, "model"))
            result.response_id = _str(_get(message, "id"))
            # message_start's output_tokens is a placeholder: the real count comes with message_delta.
            _usage(result, _get(message, "usage"), with_output=False)
        elif kind == "message_delta":
            reason = _get(_get(event, "delta"), "stop_reason")
            if reason:
                result.finish_reasons = [str(reason)]
            _usage(result, _get(event, "usage"), with_output=True)


def _usage(result: ModelResult, usage: Any, *, with_output: bool) -> None:
    """Input tokens include cache reads and writes (GenAI conventions; the SDK's own spans agree)."""
    if usage is None:
        return
    tokens_in = _get(usage, "input_tokens")
    if isinstance(tokens_in, int):
        cached = [_get(usage, "cache_read_input_tokens"), _get(usage, "cache_creation_input_tokens")]
        result.input_tokens = tokens_in + sum(n for n in cached if isinstance(n, int))
    tokens_out = _get(usage, "output_tokens")
    if with_output and isinstance(tokens_out, int):
        result.output_tokens = tokens_out


# --- requests --------------------------------------------------------------------------------------


def request_attributes(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for key, name in _REQUEST_NUMBERS.items():
        value = kwargs.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[name] = value
    return attributes


def input_messages(messages: Any) -> list[dict[str, Any]] | None:
    """``messages`` in the GenAI parts format, for content capture only.

    Only a list or tuple is read: ``messages`` may be any iterable, and a
    generator read here would be empty for the SDK.
    """
    if not isinstance(messages, (list, tuple)):
        return None
    return [{"role": str(_get(m, "role") or "user"), "parts": _parts(_get(m, "content"))} for m in messages]


def system_instructions(system: Any) -> str | None:
    """``gen_ai.system_instructions`` (a JSON string), for content capture only."""
    if isinstance(system, str):
        parts = [{"type": "text", "content": system}] if system else []
    elif isinstance(system, (list, tuple)):
        parts = _parts(system)
    else:
        return None
    return json.dumps(parts, ensure_ascii=False, default=str) if parts else None


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    if not isinstance(content, (list, tuple)):
        return []
    parts: list[dict[str, Any]] = []
    for block in content:
        kind = _get(block, "type")
        if kind == "text":
            parts.append({"type": "text", "content": _get(block, "text")})
        elif kind == TOOL_USE:
            parts.append({"type": "tool_call", "id": _get(block, "id"), "name": _get(block, "name"),
                          "arguments": _plain(_get(block, "input"))})
        elif kind == "tool_result":
            parts.append({"type": "tool_call_response", "id": _get(block, "tool_use_id"),
                          "response": _plain(_get(block, "content"))})
        else:  # images, documents, thinking ...: named, not copied
            parts.append({"type": str(kind)})
    return parts


def _plain(value: Any) -> Any:
    """SDK models as plain data (JSON-ready); anything else as it is."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _add_id(result: ModelResult, call_id: Any) -> None:
    if isinstance(call_id, str) and call_id:
        result.tool_call_ids.append(call_id)
