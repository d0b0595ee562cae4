"""Reading LangChain objects: tool inputs and outputs, chat requests and responses.

Everything here is duck-typed on the shapes ``langchain-core`` has had since
0.3 (``ToolMessage``, ``AIMessage``/``AIMessageChunk``, ``ChatResult``), so a
provider package that adds fields breaks nothing, and nothing here raises into
the application: the wrappers call these inside ``try``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from otel_agentguard.instrumentation._model_call import ModelResult

EFFECT_METADATA_KEY = "agentguard_effect"
_EFFECTS = ("read", "write")
# What LangChain itself never hands to a tool's model-facing arguments.
_FILTERED_ARGS = frozenset({"run_manager", "callbacks"})
# Where providers report why generation stopped (OpenAI, Anthropic, Ollama, Bedrock).
_FINISH_KEYS = ("finish_reason", "stop_reason", "done_reason", "stopReason")
# A model that reports no finish reason and asked for no tool call has answered.
_IMPLIED_FINISH = "stop"
_MAX_DEPTH = 8

# --- tools ------------------------------------------------------------------------------------


def tool_arguments(tool: Any, tool_input: Any) -> Any:
    """The arguments the model gave: injected ones (graph state, runtime, store, call id) removed.

    LangGraph adds the agent's state or a ``ToolRuntime`` to a tool's input; they
    change every step and are no part of the call the model asked for, so they
    must not enter the fingerprint (a loop would never repeat) nor the size.
    """
    if not isinstance(tool_input, Mapping):
        return tool_input
    filtered = getattr(tool, "_filter_injected_args", None)
    if callable(filtered):  # langchain-core >= 1.0: the tool's own notion of injected arguments
        try:
            return filtered(dict(tool_input))
        except Exception:  # deliberate: an odd args_schema; fall back to the fixed names
            pass
    return {key: value for key, value in tool_input.items() if key not in _FILTERED_ARGS}


def tool_effect_hint(tool: Any) -> str | None:
    """``{"agentguard_effect": "write"}`` in the tool's metadata (the policy's contract still wins)."""
    metadata = getattr(tool, "metadata", None)
    if isinstance(metadata, Mapping):
        value = metadata.get(EFFECT_METADATA_KEY)
        if isinstance(value, str) and value.lower() in _EFFECTS:
            return value.lower()
    return None


def tool_output(tool: Any, content: str, tool_call_id: Any) -> Any:
    """What ``BaseTool.run`` returns for ``content``: a ``ToolMessage`` when it runs for a
    tool call (so the call keeps its result), else the content itself."""
    if not tool_call_id:
        return content
    from langchain_core.messages import ToolMessage

    return ToolMessage(content=content, tool_call_id=str(tool_call_id), name=getattr(tool, "name", None))


def tool_result(output: Any) -> Any:
    """What the model gets back, for the fingerprint.

    A ``ToolMessage`` carries a fresh ``tool_call_id`` on every call: only its
    content counts, or two identical results would never look the same.
    LangGraph ``Command`` updates are read the same way.
    """
    return _message_contents(output, 0)


def handled_tool_error(output: Any) -> bool:
    """True when LangChain caught the tool's error (``handle_tool_error``) and returned it as content."""
    return getattr(output, "type", None) == "tool" and getattr(output, "status", None) == "error"


def _message_contents(value: Any, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        return value
    if _is_message(value):
        return value.content
    if isinstance(value, Mapping):
        return {key: _message_contents(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_message_contents(item, depth + 1) for item in value]
    update = getattr(value, "update", None)
    if type(value).__name__ == "Command" and update is not None:
        return {"update": _message_contents(update, depth + 1), "goto": _message_contents(value.goto, depth + 1)}
    return value


def _is_message(value: Any) -> bool:
    return isinstance(getattr(value, "type", None), str) and hasattr(value, "content") and hasattr(value, "id")


# --- chat models ------------------------------------------------------------------------------


def request_model(model: Any, stop: Any, call_kwargs: Mapping[str, Any]) -> tuple[str, str | None, dict[str, Any]]:
    """``(provider, model name, request attributes)`` of a chat call, as LangChain reports them
    to its own tracing (``_get_ls_params``)."""
    provider: str | None = None
    name: str | None = None
    attributes: dict[str, Any] = {}
    try:
        params = model._get_ls_params(stop=stop, **call_kwargs)
        provider = params.get("ls_provider")
        name = params.get("ls_model_name")
        for source, target in _REQUEST_PARAMS:
            value = params.get(source)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attributes[target] = value
    except Exception:  # deliberate: older or unusual models; fall back to plain attributes
        pass
    if not name:
        for attribute in ("model_name", "model", "model_id"):
            value = getattr(model, attribute, None)
            if isinstance(value, str) and value:
                name = value
                break
    if not provider:
        try:
            provider = str(model._llm_type)
        except Exception:  # deliberate: a model without _llm_type is still a model
            provider = "langchain"
    return provider, name, attributes


_REQUEST_PARAMS = (("ls_temperature", "gen_ai.request.temperature"), ("ls_max_tokens", "gen_ai.request.max_tokens"))


def result_from_chat_result(chat_result: Any) -> ModelResult:
    """A ``ChatResult`` (from ``_generate``): its first generation is the answer."""
    generations = getattr(chat_result, "generations", None) or []
    accumulator = StreamAccumulator()
    if generations:
        generation = generations[0]
        accumulator.add(getattr(generation, "message", None))
        info = getattr(generation, "generation_info", None)
        if isinstance(info, Mapping):
            accumulator.add_metadata(info)
    llm_output = getattr(chat_result, "llm_output", None)
    if isinstance(llm_output, Mapping):
        accumulator.add_metadata(llm_output, finish=False)
    return accumulator.result()


def result_from_message(message: Any) -> ModelResult:
    accumulator = StreamAccumulator()
    accumulator.add(message)
    return accumulator.result()


class StreamAccumulator:
    """Folds ``AIMessageChunk``s (or whole messages) into a :class:`ModelResult`.

    Chunks are not added together (``chunk + chunk`` copies the text so far
    every time): only the numbers the judge needs are kept, and the text is
    bounded by :meth:`ModelResult.add_text`.
    """

    __slots__ = ("_result", "_tool_calls", "_whole_tool_calls", "_usage_seen", "_reported_usage")

    def __init__(self) -> None:
        self._result = ModelResult()
        self._tool_calls: set[Any] = set()
        self._whole_tool_calls = 0
        self._usage_seen = False
        self._reported_usage: Any = None  # OpenAI-style token_usage, for models without usage_metadata

    def add(self, message: Any) -> None:
        if message is None:
            return
        message = getattr(message, "message", message)  # a ChatGenerationChunk holds the chunk
        result = self._result
        result.add_text(_text(getattr(message, "content", None)))
        usage = getattr(message, "usage_metadata", None)
        if isinstance(usage, Mapping):
            self._usage_seen = True
            result.input_tokens = (result.input_tokens or 0) + int(usage.get("input_tokens") or 0)
            result.output_tokens = (result.output_tokens or 0) + int(usage.get("output_tokens") or 0)
        metadata = getattr(message, "response_metadata", None)
        if isinstance(metadata, Mapping):
            self.add_metadata(metadata)
        chunks = getattr(message, "tool_call_chunks", None)
        if chunks:
            for position, chunk in enumerate(chunks):
                key = _get(chunk, "index")
                if key is None:
                    key = _get(chunk, "id") or (_get(chunk, "name") and ("position", position))
                if key is not None:
                    self._tool_calls.add(key)
                self._add_id(_get(chunk, "id"))
        else:
            calls = getattr(message, "tool_calls", None)
            if calls:
                self._whole_tool_calls += len(calls)
                for call in calls:
                    self._add_id(_get(call, "id"))

    def _add_id(self, call_id: Any) -> None:
        ids = self._result.tool_call_ids
        if isinstance(call_id, str) and call_id and call_id not in ids:
            ids.append(call_id)

    def add_metadata(self, metadata: Mapping[str, Any], *, finish: bool = True) -> None:
        """``response_metadata`` (or ``generation_info`` / ``llm_output``): finish reason, model, id."""
        result = self._result
        reason = _finish_reason(metadata) if finish else None
        if reason:
            result.finish_reasons = [reason]
        model = metadata.get("model_name") or metadata.get("model")
        if isinstance(model, str) and model:
            result.response_model = model
        response_id = metadata.get("id")
        if isinstance(response_id, str) and response_id:
            result.response_id = response_id
        if metadata.get("token_usage") or metadata.get("usage"):
            self._reported_usage = metadata

    def result(self) -> ModelResult:
        self._result.tool_calls = len(self._tool_calls) + self._whole_tool_calls
        if not self._usage_seen:
            _usage_from_llm_output(self._result, self._reported_usage)
        return _imply_finish(self._result)


def input_messages(messages: Any) -> list[dict[str, Any]]:
    """The prompt as GenAI semantic-convention messages (built only when content capture is on)."""
    if isinstance(messages, Sequence) and not isinstance(messages, str) and messages:
        if isinstance(messages[0], Sequence) and not isinstance(messages[0], str) and not _is_message(messages[0]):
            messages = messages[0]  # generate() takes a batch of prompts
    else:
        messages = [messages]
    converted = []
    for message in messages:
        if isinstance(message, str):
            converted.append({"role": "user", "parts": [{"type": "text", "content": message}]})
            continue
        role = _ROLES.get(getattr(message, "type", ""), getattr(message, "type", "user"))
        parts: list[dict[str, Any]] = []
        text = _text(getattr(message, "content", None))
        if role == "tool":
            parts.append({"type": "tool_call_response", "id": getattr(message, "tool_call_id", None),
                          "response": text})
        elif text:
            parts.append({"type": "text", "content": text})
        for call in getattr(message, "tool_calls", None) or ():
            parts.append({"type": "tool_call", "id": _get(call, "id"), "name": _get(call, "name"),
                          "arguments": _get(call, "args")})
        converted.append({"role": role, "parts": parts})
    return converted


_ROLES = {"human": "user", "ai": "assistant", "AIMessageChunk": "assistant", "system": "system", "tool": "tool"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        pieces = []
        for block in content:
            if isinstance(block, str):
                pieces.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    pieces.append(text)
        return "".join(pieces)
    return ""


def _finish_reason(metadata: Mapping[str, Any]) -> str | None:
    for key in _FINISH_KEYS:
        value = metadata.get(key)
        if value:
            value = getattr(value, "value", value)  # some SDKs report an enum
            return str(value).lower()
    return None


def _usage_from_llm_output(result: ModelResult, output: Any) -> None:
    """Older integrations report usage only as OpenAI-style ``token_usage``."""
    usage = (output.get("token_usage") or output.get("usage")) if isinstance(output, Mapping) else None
    if not isinstance(usage, Mapping):
        return
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    if isinstance(prompt, int):
        result.input_tokens = prompt
    if isinstance(completion, int):
        result.output_tokens = completion


def _imply_finish(result: ModelResult) -> ModelResult:
    if not result.finish_reasons and result.tool_calls == 0 and result.text:
        result.finish_reasons = [_IMPLIED_FINISH]
    return result


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, Mapping) else getattr(item, key, None)

