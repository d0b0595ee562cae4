"""What some instrumentations record in span events, read as the attributes the judge reads.

The GenAI conventions moved message content from span events to attributes; instrumentations
written in between still put it in events. Strands Agents, for one, records a model call's finish
reason and answer in a ``gen_ai.choice`` event, a tool call's arguments in a ``gen_ai.tool.message``
event and its result in a ``gen_ai.choice`` event; with the latest conventions it records the
messages as attributes of a ``gen_ai.client.inference.operation.details`` event. A step span
that lacks those attributes gets them from its events here, live and in replay alike; an
attribute the span has always wins.

Placeholders an instrumentation writes where content capture is off (``[REDACTED]``,
``__REDACTED__``) are no content: nothing is read from them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from otel_agentguard import attributes as A

CHOICE = "gen_ai.choice"
TOOL_MESSAGE = "gen_ai.tool.message"
OPERATION_DETAILS = "gen_ai.client.inference.operation.details"
#: The events read; a span with none of them is not looked at further.
EVENT_NAMES = frozenset({CHOICE, TOOL_MESSAGE, OPERATION_DETAILS})
#: What instrumentations write in place of content they do not capture.
HIDDEN = frozenset({"[REDACTED]", "__REDACTED__", "<redacted>"})

# The keys an operation-details event may carry that a step reads.
_DETAIL_KEYS = (A.GEN_AI_INPUT_MESSAGES, A.GEN_AI_OUTPUT_MESSAGES, A.GEN_AI_RESPONSE_FINISH_REASONS,
                A.GEN_AI_TOOL_CALL_ARGUMENTS, A.GEN_AI_TOOL_CALL_RESULT)
_TOOL_NEEDS = (A.GEN_AI_TOOL_CALL_ARGUMENTS, A.GEN_AI_TOOL_CALL_RESULT)


def hidden(value: Any) -> bool:
    """A placeholder for content that was not captured."""
    return type(value) is str and value in HIDDEN


def needs_events(tool: bool, attrs: Mapping[str, Any]) -> bool:
    """Whether a step span lacks what its events may hold (checked before the events are read).
    The guard's own spans never do: they carry fingerprints, or the claims and tool calls found."""
    if tool:
        return A.TOOL_ARGS_FINGERPRINT not in attrs and any(key not in attrs for key in _TOOL_NEEDS)
    return A.GEN_AI_RESPONSE_FINISH_REASONS not in attrs or (
        A.GEN_AI_OUTPUT_MESSAGES not in attrs and A.FINAL_CLAIMS not in attrs and A.RESPONSE_TOOL_CALLS not in attrs)


def event_attributes(tool: bool, attrs: Mapping[str, Any],
                     events: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The attributes ``attrs`` lacks that the span's ``(name, attributes)`` events give."""
    added: dict[str, Any] = {}
    for name, values in events:
        if name == OPERATION_DETAILS:
            for key in _DETAIL_KEYS:
                value = values.get(key)
                if value is not None and not hidden(value) and key not in attrs:
                    added.setdefault(key, value)
        elif name == CHOICE:
            if tool:
                result = _text_of(values.get("message"))
                if result is not None and A.GEN_AI_TOOL_CALL_RESULT not in attrs:
                    added.setdefault(A.GEN_AI_TOOL_CALL_RESULT, result)
            else:
                _read_choice(values, attrs, added)
        elif name == TOOL_MESSAGE and tool:
            content = values.get("content")
            if content is not None and not hidden(content) and A.GEN_AI_TOOL_CALL_ARGUMENTS not in attrs:
                added.setdefault(A.GEN_AI_TOOL_CALL_ARGUMENTS, content)
    return added


def _read_choice(values: Mapping[str, Any], attrs: Mapping[str, Any], added: dict[str, Any]) -> None:
    """A model's choice: its finish reason, and its answer and tool calls as output messages."""
    finish = values.get("finish_reason")
    if finish is not None and A.GEN_AI_RESPONSE_FINISH_REASONS not in attrs:
        added.setdefault(A.GEN_AI_RESPONSE_FINISH_REASONS, (str(finish),))
    message = values.get("message")
    if message is None or hidden(message) or A.GEN_AI_OUTPUT_MESSAGES in attrs:
        return
    parts = _parts(message)
    if parts:
        output = {"role": "assistant", "parts": parts}
        if finish is not None:
            output["finish_reason"] = str(finish)
        added.setdefault(A.GEN_AI_OUTPUT_MESSAGES, json.dumps([output]))


def _parts(message: Any) -> list[dict[str, Any]]:
    """A message as GenAI parts: Bedrock-style content blocks (``{"text": ...}``,
    ``{"toolUse": {...}}``) in a JSON string, or plain text."""
    blocks = _decoded(message)
    if not isinstance(blocks, list):
        return [{"type": "text", "content": message}] if isinstance(message, str) and message else []
    parts: list[dict[str, Any]] = []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if isinstance(block.get("text"), str):
            parts.append({"type": "text", "content": block["text"]})
        use = block.get("toolUse")
        if isinstance(use, Mapping):
            parts.append({"type": "tool_call", "id": use.get("toolUseId"), "name": use.get("name"),
                          "arguments": use.get("input")})
    return parts


def _text_of(message: Any) -> str | None:
    """A tool result: the text of its content blocks, else the message as it is."""
    if message is None or hidden(message):
        return None
    blocks = _decoded(message)
    if isinstance(blocks, list):
        texts = [block["text"] for block in blocks if isinstance(block, Mapping) and isinstance(block.get("text"), str)]
        if texts:
            return "\n".join(texts)
    return message if isinstance(message, str) else json.dumps(message, default=str)


def _decoded(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, (list, dict)) else None
