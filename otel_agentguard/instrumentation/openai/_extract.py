"""Read a ModelResult out of OpenAI responses and stream events, whatever their shape.

Attribute access is defensive (``getattr`` with defaults): the SDK's models
gain and rename fields between releases, and an unexpected shape must cost
only the attribute, never the user's call.
"""

from __future__ import annotations

from typing import Any

from otel_agentguard.instrumentation._model_call import ModelResult


def chat_completion(completion: Any) -> ModelResult:
    result = ModelResult(
        response_model=getattr(completion, "model", None),
        response_id=getattr(completion, "id", None),
    )
    _usage(result, getattr(completion, "usage", None), "prompt_tokens", "completion_tokens")
    for index, choice in enumerate(getattr(completion, "choices", None) or ()):
        reason = getattr(choice, "finish_reason", None)
        if reason:
            result.finish_reasons.append(str(reason))
        message = getattr(choice, "message", None)
        for call in getattr(message, "tool_calls", None) or ():
            result.tool_calls += 1
            _add_id(result, getattr(call, "id", None))
        if index == 0:
            result.add_text(getattr(message, "content", None))
    return result


class ChatChunks:
    """Accumulates a chat-completions stream, chunk by chunk."""

    def __init__(self) -> None:
        self.result = ModelResult()
        self._tool_calls: set[tuple[int, int]] = set()

    def add(self, chunk: Any) -> None:
        result = self.result
        result.response_model = result.response_model or getattr(chunk, "model", None)
        result.response_id = result.response_id or getattr(chunk, "id", None)
        _usage(result, getattr(chunk, "usage", None), "prompt_tokens", "completion_tokens")
        for choice in getattr(chunk, "choices", None) or ():
            index = getattr(choice, "index", 0) or 0
            delta = getattr(choice, "delta", None)
            for call in getattr(delta, "tool_calls", None) or ():
                self._tool_calls.add((index, getattr(call, "index", 0) or 0))
                _add_id(result, getattr(call, "id", None))  # the first delta of each call names it
            if index == 0:
                result.add_text(getattr(delta, "content", None))
            reason = getattr(choice, "finish_reason", None)
            if reason:
                result.finish_reasons.append(str(reason))
        result.tool_calls = len(self._tool_calls)


def response(resp: Any) -> ModelResult:
    """A Responses API ``Response``: function calls are tool calls; status maps to a finish reason."""
    result = ModelResult(response_model=getattr(resp, "model", None), response_id=getattr(resp, "id", None))
    _usage(result, getattr(resp, "usage", None), "input_tokens", "output_tokens")
    for item in getattr(resp, "output", None) or ():
        kind = getattr(item, "type", None)
        if kind == "function_call":
            result.tool_calls += 1
            _add_id(result, getattr(item, "call_id", None))
        elif kind == "message":
            for part in getattr(item, "content", None) or ():
                if getattr(part, "type", None) == "output_text":
                    result.add_text(getattr(part, "text", None))
    status = getattr(resp, "status", None)
    if status == "completed":
        result.finish_reasons.append("tool_calls" if result.tool_calls else "stop")
    elif status == "incomplete":
        details = getattr(resp, "incomplete_details", None)
        result.finish_reasons.append(str(getattr(details, "reason", None) or "incomplete"))
    elif status:
        result.finish_reasons.append(str(status))
    return result


class ResponseEvents:
    """Accumulates a Responses API event stream; the terminal event carries the whole response."""

    _TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        self.result = ModelResult()

    def add(self, event: Any) -> None:
        if getattr(event, "type", None) in self._TERMINAL:
            self.result = response(getattr(event, "response", None))


def _usage(result: ModelResult, usage: Any, input_name: str, output_name: str) -> None:
    if usage is None:
        return
    tokens_in = getattr(usage, input_name, None)
    tokens_out = getattr(usage, output_name, None)
    if isinstance(tokens_in, int):
        result.input_tokens = tokens_in
    if isinstance(tokens_out, int):
        result.output_tokens = tokens_out


def _add_id(result: ModelResult, call_id: Any) -> None:
    if isinstance(call_id, str) and call_id:
        result.tool_call_ids.append(call_id)
