"""What the judge needs, read from the Agents SDK's span data.

Pure functions on ``GenerationSpanData`` / ``ResponseSpanData`` /
``FunctionSpanData`` fields; nothing here imports ``agents``, so it can be
tested on plain values and never breaks the user's import.

The shapes (openai-agents 0.24):

* ``GenerationSpanData.output``: the chat-completions model writes
  ``[ChatCompletionMessage.model_dump()]`` when not streaming and
  ``[Response.model_dump()]`` (a Responses-API object converted from the
  chunks) when streaming; ``usage`` is a dict with ``input_tokens`` and
  ``output_tokens``.
* ``ResponseSpanData.response``: the ``openai`` ``Response`` object;
  ``usage`` as above.
* ``FunctionSpanData.input``: the tool call's JSON argument string;
  ``output``: the tool's return value as the function returned it.

The SDK fills ``output``, ``response`` and ``input`` only when the run's
``trace_include_sensitive_data`` is on (its default). Without them the
answer's shape is unknown: :func:`model_result` returns ``None`` and the
caller leaves finish reasons and tool-call counts to whoever else knows them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from otel_agentguard.instrumentation._model_call import ModelResult

# Responses-API output items that the client must execute and answer: they
# feed the tool-call balance. Hosted tools (web search, file search, code
# interpreter, remote MCP) run on the provider's side and need no result.
_CLIENT_TOOL_CALL_ITEMS = frozenset({
    "function_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call", "custom_tool_call",
})
_MAX_PARSE_CHARS = 1 << 20  # a tool argument string beyond 1 MiB is fingerprinted as text


def tool_arguments(raw: Any) -> Any:
    """The tool call's arguments as a mapping when they are a JSON object, else as given."""
    if isinstance(raw, str) and len(raw) <= _MAX_PARSE_CHARS:
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw


def usage(data: Any) -> tuple[int | None, int | None]:
    """``(input_tokens, output_tokens)`` from a span data's ``usage`` dict."""
    value = getattr(data, "usage", None)
    if not isinstance(value, Mapping):
        return None, None
    return _int(value.get("input_tokens")), _int(value.get("output_tokens"))


def model_result(data: Any) -> ModelResult | None:
    """Finish reasons, tool calls and answer text of a generation or response span; None if not recorded."""
    response = getattr(data, "response", None)
    if response is not None:  # ResponseSpanData
        return _from_response(_as_dict(response))
    output = getattr(data, "output", None)
    if not isinstance(output, (list, tuple)):
        return None
    result = ModelResult()
    saw_message = False
    for item in output:
        item = _as_dict(item)
        if item.get("object") == "response":  # a streamed chat completion, converted by the SDK
            return _from_response(item)
        saw_message = True
        calls = item.get("tool_calls")
        result.tool_calls += len(calls) if isinstance(calls, list) else 0
        if isinstance(item.get("function_call"), Mapping):  # the legacy single function call
            result.tool_calls += 1
        result.add_text(_message_text(item.get("content")) or _text(item.get("refusal")))
    if not saw_message:
        return None
    result.finish_reasons = ["tool_calls" if result.tool_calls else "stop"]
    return result


def response_model(data: Any) -> tuple[str | None, str | None]:
    """``(model, response id)`` of a ``ResponseSpanData``, when the SDK recorded them."""
    response = _as_dict(getattr(data, "response", None))
    model = response.get("model")
    # Without sensitive data the SDK keeps only the id (official endpoint only).
    response_id = response.get("id") or getattr(data, "_response_id", None)
    return (str(model) if model else None), (str(response_id) if response_id else None)


def _from_response(response: Mapping[str, Any]) -> ModelResult:
    result = ModelResult(
        response_model=_text(response.get("model")) or None,
        response_id=_real_id(response.get("id")),
    )
    for item in response.get("output") or ():
        item = _as_dict(item)
        kind = item.get("type")
        if kind in _CLIENT_TOOL_CALL_ITEMS:
            result.tool_calls += 1
        elif kind == "message":
            for part in item.get("content") or ():
                part = _as_dict(part)
                result.add_text(_text(part.get("text")) or _text(part.get("refusal")))
    status = response.get("status")
    if status == "incomplete":
        details = _as_dict(response.get("incomplete_details"))
        result.finish_reasons = [_text(details.get("reason")) or "length"]
    elif status == "failed":
        result.finish_reasons = ["error"]
    else:  # "completed", or None on the SDK's converted stream
        result.finish_reasons = ["tool_calls" if result.tool_calls else "stop"]
    return result


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(_text(_as_dict(part).get("text")) for part in content)
    return ""


def _as_dict(value: Any) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            dumped = dump()
        except Exception:  # deliberate: a model that cannot dump itself reads as empty
            return {}
        return dumped if isinstance(dumped, Mapping) else {}
    return {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _real_id(value: Any) -> str | None:
    # The SDK's converted stream carries a placeholder id.
    return value if isinstance(value, str) and value and value != "__fake_id__" else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
