"""Replay keeps only the span attributes its readers ask for: nothing they read is dropped.

The readers (step adapter, tool-call readers, derived steps, the OTLP collector) run over
real traces with every attribute kept, through a mapping that records each key asked for;
every such key must be one replay keeps. The same traces judged with every attribute kept
and with only the kept ones give the same verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from test_live_replay import POLICY, run_scripted_sessions

from otel_agentguard import attributes as A
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter, encode_attributes
from otel_agentguard.live.processor import AgentGuardSpanProcessor
from otel_agentguard.replay import otlp, replay_files, sources

FOREIGN = Path(__file__).resolve().parent / "data" / "foreign"


class _Recording(dict):
    """A dict that remembers every key looked up in it."""

    asked: set[str] = set()

    def get(self, key: Any, default: Any = None) -> Any:
        _Recording.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        _Recording.asked.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        _Recording.asked.add(key)  # type: ignore[arg-type]
        return super().__contains__(key)


def _span(span_id: str, parent: str | None, name: str, attrs: dict[str, Any], start: int) -> dict[str, Any]:
    span = {"traceId": "a" * 32, "spanId": span_id, "name": name, "startTimeUnixNano": str(start),
            "endTimeUnixNano": str(start + 1000), "attributes": encode_attributes(attrs), "status": {}}
    if parent:
        span["parentSpanId"] = parent
    return span


def _flattened_foreign_trace(path: Path) -> Path:
    """OpenInference's and the Vercel AI SDK's spellings: flattened messages, span-kind attributes."""
    root = {"openinference.span.kind": "AGENT", "session.id": "oi-1", "http.method": "POST"}
    asks = {
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "llm.token_count.prompt": 90,
        "llm.token_count.completion": 12, "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "lookup",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"order": "A1"}',
        "llm.provider": "openai", "llm.invocation_parameters": '{"temperature": 0}',
    }
    answers = {
        "openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "llm.token_count.prompt": 120,
        "llm.token_count.completion": 20, "llm.input_messages.0.message.role": "tool",
        "llm.input_messages.0.message.tool_call_id": "c1", "llm.input_messages.0.message.content": "[]",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": "I refunded the order.", "llm.finish_reason": "stop",
    }
    ai_sdk = {"ai.operationId": "ai.toolCall", "ai.toolCall.name": "lookup", "ai.toolCall.args": '{"order": "A1"}',
              "ai.toolCall.result": "[]", "session.id": "oi-1", "operation.name": "ai.toolCall"}
    spans = [_span("1" * 16, None, "agent", root, 1_000), _span("2" * 16, "1" * 16, "llm", asks, 2_000),
             _span("3" * 16, "1" * 16, "llm", answers, 4_000), _span("4" * 16, "1" * 16, "tool", ai_sdk, 6_000)]
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}) + "\n")
    return path


def _live_trace(path: Path) -> Path:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    provider.add_span_processor(AgentGuardSpanProcessor(POLICY, tracer_provider=provider))
    run_scripted_sessions(provider)
    provider.shutdown()
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("traces")
    return [*sorted(FOREIGN.glob("*.jsonl")), _live_trace(folder / "live.jsonl"),
            _flattened_foreign_trace(folder / "flattened.jsonl")]


def _judge(paths: list[Path]) -> list[tuple[str, str, list[tuple[Any, ...]], int, int]]:
    return [(s.session_id, v.stop_reason, [(a.probe, a.sequence, a.evidence) for a in v.alerts], v.steps, v.tokens)
            for s, v in replay_files(paths, POLICY)]


@pytest.fixture
def reference_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines read by the reference decoder, which the tests below patch. The typed reader, used when
    msgspec is installed, decodes lines itself; test_replay_typed_reader holds it to this one."""
    monkeypatch.setattr(sources, "_read_typed", None)


@pytest.mark.usefixtures("reference_reader")
def test_every_key_the_readers_ask_for_is_kept(traces, monkeypatch):
    _Recording.asked = set()
    monkeypatch.setattr(otlp, "decode_read_attributes", lambda items: _Recording(otlp.decode_attributes(items)))
    judged = _judge(traces)
    assert len(judged) >= 10 and {"oi-1", "looping"} <= {session for session, *_ in judged}
    asked = {key for key in _Recording.asked if isinstance(key, str)}
    assert A.GEN_AI_OPERATION_NAME in asked and "llm.model_name" in asked  # the recording sees the readers
    missing = sorted(key for key in asked
                     if key not in otlp.READ_KEYS and not key.startswith(otlp.READ_KEY_PREFIXES))
    assert missing == []


@pytest.mark.usefixtures("reference_reader")
def test_verdicts_are_those_with_every_attribute_kept(traces, monkeypatch):
    kept = _judge(traces)
    monkeypatch.setattr(otlp, "decode_read_attributes", otlp.decode_attributes)
    assert kept == _judge(traces)
    assert any(stop != "completed" for _, stop, *_ in kept)


def test_attributes_nobody_reads_are_dropped_but_still_checked(tmp_path):
    attrs = [{"key": "http.method", "value": {"stringValue": "POST"}},
             {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
             {"key": "agentguard.tool.args.size", "value": {"intValue": "48"}}]
    assert otlp.decode_read_attributes(attrs) == {"gen_ai.operation.name": "chat"}
    with pytest.raises(ValueError):
        otlp.decode_read_attributes([{"key": "http.status_code", "value": {"intValue": str(2**70)}}])
