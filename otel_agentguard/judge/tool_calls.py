"""Tool calls a model span asked for, and the tool results its input carried back.

Most GenAI instrumentations make no span when a hand-written loop runs a tool:
the call exists only in the model span that requested it, and its result only
in the next model call's input. These readers find both, in each of the shapes
instrumentations record them:

* the GenAI conventions: ``tool_call`` parts of ``gen_ai.output.messages`` and
  ``tool_call_response`` parts of ``gen_ai.input.messages`` (a JSON string);
* OpenInference: ``llm.output_messages.N.message.tool_calls.M.tool_call.*`` and
  tool-role ``llm.input_messages.N.message.*``;
* OpenLLMetry before it moved to the conventions:
  ``gen_ai.completion.N.tool_calls.M.*`` and tool-role ``gen_ai.prompt.N.*``.

All of these are content: they are on spans only when the instrumentation
captures message content. Without it a model span says no more than its
finish reason, and no call can be read back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_agentguard import attributes as A
from otel_agentguard.judge.fingerprints._json_text import decode_payload

_OI_CALL = re.compile(
    r"llm\.output_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\.(id|function\.name|function\.arguments)")
_OI_INPUT = re.compile(r"llm\.input_messages\.(\d+)\.message\.(role|tool_call_id|content)")
_LEGACY_CALL = re.compile(r"gen_ai\.completion\.(\d+)\.tool_calls\.(\d+)\.(id|name|arguments)")
_LEGACY_INPUT = re.compile(r"gen_ai\.prompt\.(\d+)\.(role|tool_call_id|content)")
_FIELD = {
    "id": "id", "function.name": "name", "name": "name", "function.arguments": "arguments", "arguments": "arguments"}


@dataclass(frozen=True, slots=True)
class RequestedCall:
    """One tool call a model response asked for."""

    call_id: str | None
    name: str
    arguments: Any = None  # a JSON string or a decoded value; None when not recorded


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What the next model call's input says a tool call returned."""

    result: Any
    failed: bool = False


def requested_calls(attrs: Mapping[str, Any]) -> list[RequestedCall]:
    """The tool calls a model span's response asked for, in order (empty when none are recorded)."""
    messages = _messages(attrs.get(A.GEN_AI_OUTPUT_MESSAGES))
    if messages is not None:
        return [
            RequestedCall(_text_or_none(part.get("id")), str(part.get("name") or "unknown"), part.get("arguments"))
            for part in _parts_of(messages, "tool_call")
        ]
    if _OI_OUTPUT_ROLE in attrs or _OI_FIRST_CALL in attrs:
        return _flattened_calls(attrs, "llm.output_messages.", _OI_CALL)
    if _LEGACY_FIRST_CALL in attrs:
        return _flattened_calls(attrs, "gen_ai.completion.", _LEGACY_CALL)
    return []


def records_requested_calls(attrs: Mapping[str, Any]) -> bool:
    """Whether a model span has any attribute :func:`requested_calls` reads (a cheap test:
    without captured content it has none)."""
    # REQUESTED_CALL_ATTRIBUTES, inline: a chain of tests runs fewer bytecodes than a loop.
    return (A.GEN_AI_OUTPUT_MESSAGES in attrs or _OI_OUTPUT_ROLE in attrs or _OI_FIRST_CALL in attrs
            or _LEGACY_FIRST_CALL in attrs)


def tool_outcomes(attrs: Mapping[str, Any]) -> dict[str, ToolOutcome]:
    """Tool results in a model span's input messages, by tool call id."""
    messages = _messages(attrs.get(A.GEN_AI_INPUT_MESSAGES))
    if messages is not None:
        outcomes: dict[str, ToolOutcome] = {}
        for part in _parts_of(messages, "tool_call_response"):
            call_id = _text_or_none(part.get("id"))
            if call_id is not None:
                result = part["response"] if "response" in part else part.get("result")
                outcomes[call_id] = ToolOutcome(result, _failed(part))
        return outcomes
    if "llm.input_messages.0.message.role" in attrs:
        return _flattened_outcomes(attrs, "llm.input_messages.", _OI_INPUT)
    if "gen_ai.prompt.0.role" in attrs:
        return _flattened_outcomes(attrs, "gen_ai.prompt.", _LEGACY_INPUT)
    return {}


def requested_call_count(attrs: Mapping[str, Any]) -> int | None:
    """How many tool calls a foreign model span asked for, or None when it does not say."""
    if (A.GEN_AI_OUTPUT_MESSAGES not in attrs and _OI_OUTPUT_ROLE not in attrs
            and "gen_ai.completion.0.role" not in attrs):  # REPLY_KEYS, inline: cheaper than a loop
        return None
    return len(requested_calls(attrs))


_OI_OUTPUT_ROLE = "llm.output_messages.0.message.role"
#: The attributes whose presence says a model span records its reply, and so its tool calls.
REPLY_KEYS = (A.GEN_AI_OUTPUT_MESSAGES, _OI_OUTPUT_ROLE, "gen_ai.completion.0.role")
_OI_FIRST_CALL = "llm.output_messages.0.message.tool_calls.0.tool_call.function.name"
_LEGACY_FIRST_CALL = "gen_ai.completion.0.tool_calls.0.name"
#: The attributes :func:`requested_calls` starts from: a model span without any names no call.
REQUESTED_CALL_ATTRIBUTES = (A.GEN_AI_OUTPUT_MESSAGES, _OI_OUTPUT_ROLE, _OI_FIRST_CALL, _LEGACY_FIRST_CALL)


# --- readers -----------------------------------------------------------------------------


def _messages(raw: Any) -> list[Any] | None:
    if isinstance(raw, str):
        raw = decode_payload(raw, "[")  # text that is no JSON list stays text: no calls in it
    return raw if isinstance(raw, list) else None


def _parts_of(messages: list[Any], kind: str) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for message in messages:
        parts = message.get("parts") if isinstance(message, Mapping) else None
        if isinstance(parts, list):
            found.extend(part for part in parts if isinstance(part, Mapping) and part.get("type") == kind)
    return found


def _flattened_calls(attrs: Mapping[str, Any], prefix: str, pattern: re.Pattern[str]) -> list[RequestedCall]:
    calls: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        match = pattern.fullmatch(key) if key.startswith(prefix) else None
        if match is not None:
            calls.setdefault((int(match[1]), int(match[2])), {})[_FIELD[match[3]]] = value
    return [
        RequestedCall(_text_or_none(fields.get("id")), str(fields.get("name") or "unknown"), fields.get("arguments"))
        for _, fields in sorted(calls.items())
    ]


def _flattened_outcomes(attrs: Mapping[str, Any], prefix: str, pattern: re.Pattern[str]) -> dict[str, ToolOutcome]:
    messages: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        match = pattern.fullmatch(key) if key.startswith(prefix) else None
        if match is not None:
            messages.setdefault(int(match[1]), {})[match[2]] = value
    outcomes: dict[str, ToolOutcome] = {}
    for _, fields in sorted(messages.items()):
        call_id = _text_or_none(fields.get("tool_call_id"))
        if fields.get("role") == "tool" and call_id is not None:
            outcomes[call_id] = ToolOutcome(fields.get("content"))
    return outcomes


def _failed(part: Mapping[str, Any]) -> bool:
    # Conventions have no error flag on a tool response; some providers' shapes do.
    return part.get("is_error") is True or part.get("status") == "error"


def _text_or_none(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None
