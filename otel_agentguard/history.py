"""Repair a conversation history so every tool call has its result, as providers require.

Providers reject a history whose tool calls and results do not pair up, and
they keep rejecting it on every later request: the session is "bricked". Cutting
a run at a safe point (see the enforcement docs) prevents new damage; this
module repairs old damage::

    messages, report = ag.repair_history(messages, provider="openai")
    if report.changed:
        log.info("repaired history: %s", report)

The rules checked (and restored) are the providers' own:

* OpenAI chat: an assistant message with ``tool_calls`` must be followed by one
  ``tool`` message per call id, before any other message; a ``tool`` message
  must answer a call of the assistant message just before it.
* Anthropic messages: every ``tool_use`` block of an assistant message needs a
  ``tool_result`` block with its id at the start of the next user message.

Repairs: a synthetic, clearly marked result for every call that has none;
orphan results dropped; duplicate call ids renamed (with their results).
Repairing a repaired history changes nothing. Messages may be dicts or SDK
objects; the returned history holds dicts.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from otel_agentguard.judge.fingerprints import _readable

Provider = Literal["openai", "anthropic"]

SYNTHETIC_RESULT = (
    "[otel_agentguard] No result: this tool call was cut off before it returned. "
    "This message was added to keep the conversation valid; the call may not have run."
)


@dataclass(frozen=True)
class RepairReport:
    synthetic_results: int = 0
    orphans_dropped: int = 0
    duplicates_renamed: int = 0
    results_moved: int = 0

    @property
    def total(self) -> int:
        return self.synthetic_results + self.orphans_dropped + self.duplicates_renamed + self.results_moved

    @property
    def changed(self) -> bool:
        return self.total > 0


def repair_history(messages: Iterable[Any], provider: Provider = "openai") -> tuple[list[dict[str, Any]], RepairReport]:
    """A valid copy of ``messages`` and what was repaired. The input is not modified."""
    normalized = [_as_dict(message) for message in messages]
    if provider == "openai":
        return _OpenAIRepair().run(normalized)
    if provider == "anthropic":
        return _AnthropicRepair().run(normalized)
    raise ValueError(f"provider must be 'openai' or 'anthropic', got {provider!r}")


def history_problems(messages: Iterable[Any], provider: Provider = "openai") -> list[str]:
    """What a provider would reject in this history (empty when it is valid)."""
    normalized = [_as_dict(message) for message in messages]
    if provider == "openai":
        return _openai_problems(normalized)
    if provider == "anthropic":
        return _anthropic_problems(normalized)
    raise ValueError(f"provider must be 'openai' or 'anthropic', got {provider!r}")


def _as_dict(message: Any) -> dict[str, Any]:
    if isinstance(message, Mapping):
        return copy.deepcopy(dict(message))
    dump = getattr(message, "model_dump", None)
    if callable(dump):
        dumped: dict[str, Any] = dump(exclude_none=True)
        return dumped
    raise TypeError(f"a message must be a mapping or an SDK model, not {type(message).__name__}")


class _Ids:
    """Hands out unique ids: a repeated id gets a suffix, so each call pairs with one result."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def unique(self, call_id: str) -> str:
        if call_id not in self.seen:
            self.seen.add(call_id)
            return call_id
        index = 2
        while f"{call_id}~{index}" in self.seen:
            index += 1
        renamed = f"{call_id}~{index}"
        self.seen.add(renamed)
        return renamed


class _Repair:
    """What both repairs keep: the counts of each repair and the call ids handed out."""

    def __init__(self) -> None:
        self.synthetic = self.orphans = self.renamed = self.moved = 0
        self.ids = _Ids()

    def unique_id(self, call: dict[str, Any], key: str) -> tuple[str, str]:
        """``(original, unique)`` id of a call; a repeated id is renamed in place."""
        original = str(call.get(key))
        unique = self.ids.unique(original)
        if unique != original:
            call[key] = unique
            self.renamed += 1
        return original, unique

    def report(self) -> RepairReport:
        return RepairReport(self.synthetic, self.orphans, self.renamed, self.moved)


# --- OpenAI chat completions --------------------------------------------------------------------


class _OpenAIRepair(_Repair):

    def run(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], RepairReport]:
        repaired: list[dict[str, Any]] = []
        index = 0
        while index < len(messages):
            message = messages[index]
            index += 1
            if message.get("role") == "tool":
                self.orphans += 1  # a result with no call right before it
                continue
            if message.get("role") != "assistant" or not message.get("tool_calls"):
                repaired.append(message)
                continue
            results: list[dict[str, Any]] = []
            while index < len(messages) and messages[index].get("role") == "tool":
                results.append(messages[index])
                index += 1
            repaired.append(message)
            repaired.extend(self._pair(message, results))
        return repaired, self.report()

    def _pair(self, message: dict[str, Any], results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The results of a message's calls: those that came, in the order they came (a valid
        history stays as it is), then a synthetic one for each call that got none."""
        pending: dict[str, list[str]] = {}  # a call's id as sent -> the ids its calls now have, in order
        calls: list[str] = []
        for call in message["tool_calls"]:
            original, call_id = self.unique_id(call, "id")
            pending.setdefault(original, []).append(call_id)
            calls.append(call_id)
        paired = []
        answered: set[str] = set()
        for result in results:
            waiting = pending.get(str(result.get("tool_call_id")))
            if waiting:
                result["tool_call_id"] = call_id = waiting.pop(0)
                answered.add(call_id)
                paired.append(result)
            else:
                self.orphans += 1
        for call_id in calls:
            if call_id not in answered:
                self.synthetic += 1
                paired.append({"role": "tool", "tool_call_id": call_id, "content": SYNTHETIC_RESULT})
        return paired


def _openai_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems = []
    seen_ids: set[str] = set()
    expected: list[str] = []
    for position, message in enumerate(messages, start=1):
        role = message.get("role")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id in expected:
                expected.remove(call_id)
            else:
                problems.append(f"message {position}: tool result {call_id!r} answers no pending tool call")
            continue
        if expected:
            problems.append(f"message {position}: tool calls {expected} have no result before this {role} message")
            expected = []
        calls = (message.get("tool_calls") or ()) if role == "assistant" else ()
        for call in calls:
            call_id = str(call.get("id"))
            if call_id in seen_ids:
                problems.append(f"message {position}: duplicate tool call id {call_id!r}")
            seen_ids.add(call_id)
            expected.append(call_id)
    if expected:
        problems.append(f"end: tool calls {expected} have no result")
    return problems


# --- Anthropic messages ---------------------------------------------------------------------------


def _blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _block_type(block: Any) -> str | None:
    return block.get("type") if isinstance(block, Mapping) else None


class _AnthropicRepair(_Repair):

    def run(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], RepairReport]:
        repaired: list[dict[str, Any]] = []
        index = 0
        pending: list[str] = []  # tool_use ids of the assistant message just added
        renames: dict[str, list[str]] = {}
        while index < len(messages):
            message = messages[index]
            index += 1
            if message.get("role") == "assistant":
                if pending:  # the previous calls got no user turn at all
                    repaired.append(self._results_message(pending, []))
                repaired.append(message)
                pending, renames = self._register_calls(message)
                continue
            if message.get("role") == "user":
                fixed = self._answer(message, pending, renames)
                pending, renames = [], {}
                if fixed is not None:
                    repaired.append(fixed)
                continue
            repaired.append(message)
        if pending:
            repaired.append(self._results_message(pending, []))
        return repaired, self.report()

    def _register_calls(self, message: dict[str, Any]) -> tuple[list[str], dict[str, list[str]]]:
        pending: list[str] = []
        renames: dict[str, list[str]] = {}
        for block in _blocks(message):
            if _block_type(block) != "tool_use":
                continue
            original, call_id = self.unique_id(block, "id")
            renames.setdefault(original, []).append(call_id)
            pending.append(call_id)
        return pending, renames

    def _answer(
        self, message: dict[str, Any], pending: list[str], renames: dict[str, list[str]]
    ) -> dict[str, Any] | None:
        blocks = _blocks(message)
        results = [b for b in blocks if _block_type(b) == "tool_result"]
        others = [b for b in blocks if _block_type(b) != "tool_result"]
        if not pending and not results:
            return message
        by_id: dict[str, dict[str, Any]] = {}
        for result in results:
            original = str(result.get("tool_use_id"))
            targets = renames.get(original) or []
            target = next((t for t in targets if t not in by_id), None)
            if target is None:
                self.orphans += 1
                continue
            result["tool_use_id"] = target
            by_id[target] = result
        ordered = [result for result in results if any(result is kept for kept in by_id.values())]
        self.moved += sum(
            1 for place, block in enumerate(ordered) if place >= len(blocks) or blocks[place] is not block)
        fixed = self._results_message(pending, ordered)["content"] + others
        if not fixed:
            return None  # only orphan results: nothing left to say
        if isinstance(message.get("content"), str):
            fixed.append({"type": "text", "text": message["content"]})
        return {**message, "content": fixed}

    def _results_message(self, pending: list[str], answered: list[dict[str, Any]]) -> dict[str, Any]:
        present = {str(block.get("tool_use_id")) for block in answered}
        content = list(answered)
        for call_id in pending:
            if call_id not in present:
                self.synthetic += 1
                content.append({"type": "tool_result", "tool_use_id": call_id, "is_error": True,
                                "content": SYNTHETIC_RESULT})
        return {"role": "user", "content": content}


def _anthropic_problems(messages: list[dict[str, Any]]) -> list[str]:
    problems = []
    seen_ids: set[str] = set()
    pending: list[str] = []
    for position, message in enumerate(messages, start=1):
        blocks = _blocks(message)
        if message.get("role") == "user":
            leading: list[str] = []
            for block in blocks:
                if _block_type(block) != "tool_result":
                    break
                leading.append(str(block.get("tool_use_id")))
            answered: set[str] = set()
            for block in blocks:
                if _block_type(block) != "tool_result":
                    continue
                result_id = str(block.get("tool_use_id"))
                if result_id not in pending or result_id in answered:
                    problems.append(f"message {position}: tool_result {result_id!r} answers no pending tool_use")
                answered.add(result_id)
            missing = [call_id for call_id in pending if call_id not in leading]
            if missing:
                problems.append(f"message {position}: tool_use ids {missing} have no tool_result first in this message")
            pending = []
            continue
        if pending:
            problems.append(f"message {position}: tool_use ids {pending} are not answered by the next user message")
        pending = []
        for block in blocks:
            if _block_type(block) == "tool_use":
                call_id = str(block.get("id"))
                if call_id in seen_ids:
                    problems.append(f"message {position}: duplicate tool_use id {call_id!r}")
                seen_ids.add(call_id)
                pending.append(call_id)
    if pending:
        problems.append(f"end: tool_use ids {pending} have no tool_result")
    return problems


_MAX_ANSWERED_MESSAGES = 10_000


def answered_tool_call_ids(messages: Any) -> frozenset[str] | None:
    """The tool call ids a request's history answers, in the OpenAI (chat and responses)
    and Anthropic formats or as LangChain ``ToolMessage`` objects; None when it cannot tell.

    Reads plain dicts and pydantic models (the SDKs' and LangChain's message types) through
    their stored fields only: the history is the application's, and the guard runs none of
    its code. A message of any other type makes the answer unknown (None), never a guess.
    """
    if type(messages) is not list:
        return None
    answered: set[str] = set()
    for message in messages[:_MAX_ANSWERED_MESSAGES]:
        fields = _stored_fields(message)
        if fields is None:
            return None
        kind = fields.get("type")
        if fields.get("role") == "tool" or kind == "tool":  # OpenAI chat, LangChain
            _add_call_id(answered, fields.get("tool_call_id"))
        elif kind == "function_call_output":  # OpenAI responses
            _add_call_id(answered, fields.get("call_id"))
        content = fields.get("content")
        if fields.get("role") == "user" and type(content) is list:  # Anthropic tool_result blocks
            for block in content[:_MAX_ANSWERED_MESSAGES]:
                block_fields = _stored_fields(block)
                if block_fields is not None and block_fields.get("type") == "tool_result":
                    _add_call_id(answered, block_fields.get("tool_use_id"))
    return frozenset(answered)


def _stored_fields(value: Any) -> dict[str, Any] | None:
    if type(value) is dict:
        return value
    fields = _readable.pydantic_fields(value)
    return dict(fields) if fields is not None else None


def _add_call_id(answered: set[str], call_id: Any) -> None:
    if type(call_id) is str and call_id:
        answered.add(call_id)
