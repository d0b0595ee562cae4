"""A streamed final answer is judged at its end like a plain one, live and in replay.

The real ``openai`` and ``anthropic`` SDKs stream from the scripted model server; the
answers claim a write in words no verb list holds, after a session that only read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.instrumentation.anthropic import AnthropicInstrumentor
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.replay import replay_files
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

POLICY = parse_policy('[tools.get_order]\neffect = "read"\n[tools.change_plan]\neffect = "write"\n')
CLAIM = "Thanks for waiting. I went ahead and downgraded the plan, so the next bill is lower."
HONEST = "Under our terms, deposits are refunded within 14 days of checkout."
CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
MESSAGES = [{"role": "user", "content": "Please downgrade my plan."}]


@pytest.fixture(autouse=True)
def _content_capture_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE, raising=False)


@pytest.fixture
def tracing(tmp_path: Path, instrumented_tracing: Any) -> Iterator[GuardedTracing]:
    with instrumented_tracing(OpenAIInstrumentor(), AnthropicInstrumentor(), policy=POLICY) as guarded:
        guarded.tracer_provider.add_span_processor(
            SimpleSpanProcessor(OTLPJsonLinesSpanExporter(str(tmp_path / "trace.jsonl"))))
        yield guarded


def openai_stream(server: ScriptedModelServer) -> str:
    client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    stream = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def openai_async_stream(server: ScriptedModelServer) -> str:
    async def run() -> str:
        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        return "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])

    return asyncio.run(run())


def openai_stream_helper(server: ScriptedModelServer) -> str:
    client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    with client.chat.completions.stream(model="gpt-4o", messages=MESSAGES) as stream:
        return stream.get_final_completion().choices[0].message.content or ""


def anthropic_text_stream(server: ScriptedModelServer) -> str:
    with anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0) as client, client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=256, messages=MESSAGES
    ) as stream:
        return "".join(stream.text_stream)


STREAMS = pytest.mark.parametrize(
    "stream", [openai_stream, openai_async_stream, openai_stream_helper, anthropic_text_stream],
    ids=["openai", "openai_async", "openai_helper", "anthropic"])


def run_session(tracing: GuardedTracing, stream: Callable[[ScriptedModelServer], str], answer: str) -> str:
    @ag.tool(tracer_provider=tracing.tracer_provider)
    def get_order(order: str) -> dict:
        return {"order": order, "plan": "Pro"}

    with ScriptedModelServer(turns(Turn.answer(answer, input_tokens=40, output_tokens=20))) as server:
        with tracing.session("s1"):
            get_order("A1")
            assert stream(server) == answer
    return "s1"


@STREAMS
def test_a_streamed_claim_without_a_write_is_a_fake_completion_live_and_in_replay(
        tracing: GuardedTracing, stream: Callable[[ScriptedModelServer], str], tmp_path: Path) -> None:
    session = run_session(tracing, stream, CLAIM)

    verdict = tracing.verdict(session)
    assert verdict.stop_reason == "fake_completion"
    (alert,) = [a for a in verdict.alerts if a.probe == "fake_completion"]
    assert "rule first_person, clause 2" in alert.detail
    final = [s for s in tracing.spans() if (s.attributes or {}).get(A.FINAL_CLAIMS) is not None]
    assert [tuple(s.attributes[A.FINAL_CLAIMS]) for s in final] == [("write",)]
    assert final[0].attributes[A.FINAL_CLAIM_RULE] == "first_person"
    assert final[0].attributes[A.FINAL_CLAIM_CLAUSE] == 2
    # the answer itself never leaves the process with capture off
    for span in tracing.spans():
        assert not any("downgraded" in str(value) for value in (span.attributes or {}).values())
        assert not any("downgraded" in str(e.attributes) for e in span.events)

    (replayed,) = [v for s, v in replay_files([tmp_path / "trace.jsonl"], POLICY) if s.session_id == session]
    assert replayed.stop_reason == "fake_completion"
    assert [a.detail for a in replayed.alerts if a.probe == "fake_completion"] == [alert.detail]


@STREAMS
def test_a_streamed_policy_statement_is_no_claim(tracing: GuardedTracing, stream: Callable[[ScriptedModelServer], str]) -> None:
    session = run_session(tracing, stream, HONEST)

    assert tracing.verdict(session).stop_reason == "completed"
