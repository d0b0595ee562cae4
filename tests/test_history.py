"""History repair against the providers' pairing rules (and the real SDKs through the strict server)."""

from __future__ import annotations

import anthropic
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import otel_agentguard as ag
from otel_agentguard.history import SYNTHETIC_RESULT, history_problems, repair_history
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns

IDS = st.sampled_from(["a", "b", "c", "d"])


def openai_call(call_id: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


OPENAI_MESSAGES = st.one_of(
    st.builds(lambda: {"role": "user", "content": "hi"}),
    st.builds(lambda ids: {"role": "assistant", "tool_calls": [openai_call(i) for i in ids]},
              st.lists(IDS, min_size=1, max_size=3)),
    st.builds(lambda: {"role": "assistant", "content": "ok"}),
    st.builds(lambda i: {"role": "tool", "tool_call_id": i, "content": f"result {i}"}, IDS),
)

ANTHROPIC_MESSAGES = st.one_of(
    st.builds(lambda: {"role": "user", "content": "hi"}),
    st.builds(lambda ids: {"role": "assistant", "content": [{"type": "text", "text": "let me look"}] + [
        {"type": "tool_use", "id": i, "name": "lookup", "input": {}} for i in ids]}, st.lists(IDS, min_size=1, max_size=3)),
    st.builds(lambda ids, text: {"role": "user", "content": ([{"type": "text", "text": "note"}] if text else []) + [
        {"type": "tool_result", "tool_use_id": i, "content": "r"} for i in ids]}, st.lists(IDS, max_size=3), st.booleans()),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(OPENAI_MESSAGES, max_size=12))
def test_openai_repair_gives_a_valid_history_and_is_idempotent(messages):
    repaired, report = repair_history(messages, "openai")
    assert history_problems(repaired, "openai") == []
    again, second = repair_history(repaired, "openai")
    assert again == repaired and not second.changed
    if not history_problems(messages, "openai"):
        assert repaired == messages and not report.changed  # a valid history is left alone


@settings(max_examples=400, deadline=None)
@given(st.lists(ANTHROPIC_MESSAGES, max_size=12))
def test_anthropic_repair_gives_a_valid_history_and_is_idempotent(messages):
    repaired, report = repair_history(messages, "anthropic")
    assert history_problems(repaired, "anthropic") == []
    again, second = repair_history(repaired, "anthropic")
    assert again == repaired and not second.changed
    if not history_problems(messages, "anthropic"):
        assert repaired == messages and not report.changed


def test_openai_report_counts_each_kind_of_repair():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [openai_call("x"), openai_call("y")]},
        {"role": "tool", "tool_call_id": "x", "content": "ok"},
        {"role": "tool", "tool_call_id": "ghost", "content": "??"},
        {"role": "assistant", "tool_calls": [openai_call("x")]},
        {"role": "tool", "tool_call_id": "x", "content": "again"},
    ]
    repaired, report = repair_history(messages)
    assert (report.synthetic_results, report.orphans_dropped, report.duplicates_renamed) == (1, 1, 1)
    assert [m.get("tool_call_id") for m in repaired if m["role"] == "tool"] == ["x", "y", "x~2"]
    assert repaired[3]["content"] == SYNTHETIC_RESULT
    assert messages[4]["tool_calls"][0]["id"] == "x"  # the input is untouched


def test_sdk_message_objects_are_accepted():
    message = openai.types.chat.ChatCompletionMessage(
        role="assistant", content=None,
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}])
    repaired, report = repair_history([{"role": "user", "content": "x"}, message])
    assert report.synthetic_results == 1
    assert repaired[-1] == {"role": "tool", "tool_call_id": "c1", "content": SYNTHETIC_RESULT}


def test_unknown_provider_is_rejected():
    with pytest.raises(ValueError, match="provider"):
        repair_history([], "gemini")


def test_repaired_histories_are_accepted_by_the_real_sdks_and_broken_ones_are_not():
    openai_broken = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [openai_call("c1")]},
                     {"role": "user", "content": "and?"}]
    anthropic_broken = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {}}]},
        {"role": "user", "content": "and?"},
    ]
    with ScriptedModelServer(turns(Turn.answer("ok"))) as server:
        openai_client = openai.OpenAI(base_url=server.openai_url, api_key="t", max_retries=0)
        anthropic_client = anthropic.Anthropic(base_url=server.anthropic_url, api_key="t", max_retries=0)
        with pytest.raises(openai.BadRequestError):
            openai_client.chat.completions.create(model="m", messages=openai_broken)
        with pytest.raises(anthropic.BadRequestError):
            anthropic_client.messages.create(model="m", max_tokens=10, messages=anthropic_broken)
        openai_client.chat.completions.create(model="m", messages=ag.repair_history(openai_broken, "openai")[0])
        anthropic_client.messages.create(model="m", max_tokens=10,
                                         messages=ag.repair_history(anthropic_broken, "anthropic")[0])
        assert len(server.rejected) == 2 and len(server.requests) == 2


def test_results_that_answer_every_call_in_another_order_are_left_alone():
    """Found by the property above on a fresh clone: calls b, a answered a, b is a valid history."""
    messages = [{"role": "assistant", "tool_calls": [openai_call("b"), openai_call("a")]},
                {"role": "tool", "tool_call_id": "a", "content": "result a"},
                {"role": "tool", "tool_call_id": "b", "content": "result b"}]
    repaired, report = repair_history(messages, "openai")
    assert repaired == messages and not report.changed
