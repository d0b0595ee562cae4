"""output_repetition live: real openai, anthropic and langchain-core streams from the scripted model server.

Observe mode records the alert and lets the stream run to its end; enforce mode
closes the stream at the alert and raises AgentStopped with the partial text's
length. A replay of the exported trace reaches the same verdict from the
recorded summary alone, and from the captured text alone.
"""

from __future__ import annotations

import asyncio
import json

import anthropic
import openai
import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_agentguard import AgentStopped
from otel_agentguard import attributes as A
from otel_agentguard.environment_variables import OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT
from otel_agentguard.exporters import OTLPJsonLinesSpanExporter
from otel_agentguard.instrumentation.anthropic import AnthropicInstrumentor
from otel_agentguard.instrumentation.langchain import LangChainInstrumentor
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.judge.repetition import RepetitionSummary, summarize
from otel_agentguard.replay import replay_files
from otel_agentguard.replay.cli import run as cli_run
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

POLICY = parse_policy('version = "repetition"\n')
MESSAGES = [{"role": "user", "content": "Why does the deployment keep failing?"}]
PREFIX = (
    "The deployment fails because the readiness probe times out before the service has loaded its cache. "
    "The probe waits five seconds; loading the cache takes about twelve seconds on a cold node. Kubernetes "
    "then restarts the pod, which starts loading the cache again, and the rollout never completes.\n\n"
    "There are three ways out. You can raise the probe's initial delay to twenty seconds, which is the "
    "quickest fix. You can load the cache lazily, so the service is ready at once and warms up under "
    "traffic. Or you can ship a smaller cache snapshot with the image, which also speeds up every restart.\n\n"
    "I recommend the first fix today and the second one next sprint. Here is how to apply the first one: "
    "edit the deployment, find the readiness probe, and set initialDelaySeconds to 20. Then roll out again "
    "and watch the pods become ready.\n\n"
)
UNIT = "Let me check the readiness probe configuration again to be sure. "
CHANT = Turn.chant(PREFIX, UNIT, copies=300, input_tokens=400, output_tokens=2000)
ONSET = len(PREFIX) + len(UNIT)  # where the answer starts repeating what it said before
HONEST = Turn.answer(PREFIX * 1 + "\n".join(f"{n}. Check the pod named api-{n} and note its restart count."
                                             for n in range(1, 30)), input_tokens=400, output_tokens=900)


def tracing_for(mode: str):
    tracing = GuardedTracing(POLICY, mode)
    instrumentors = [OpenAIInstrumentor(), AnthropicInstrumentor(), LangChainInstrumentor()]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    return tracing, instrumentors


@pytest.fixture(params=["observe", "enforce"])
def guarded(request):
    tracing, instrumentors = tracing_for(request.param)
    try:
        yield tracing
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        tracing.shutdown()


# --- one reader per streamed API, each appending the text the application receives -------------------


def openai_chat(server, received):
    client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    for chunk in client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            received.append(chunk.choices[0].delta.content)


def openai_chat_async(server, received):
    async def run():
        client = openai.AsyncOpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
        stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)

    asyncio.run(run())


def openai_responses(server, received):
    client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
    for event in client.responses.create(model="gpt-4o", input="Why does it fail?", stream=True):
        if event.type == "response.output_text.delta":
            received.append(event.delta)


def anthropic_create(server, received):
    client = anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0)
    for event in client.messages.create(model="claude-sonnet-4-5", max_tokens=4096, messages=MESSAGES, stream=True):
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            received.append(event.delta.text)


def anthropic_stream_async(server, received):
    async def run():
        client = anthropic.AsyncAnthropic(base_url=server.anthropic_url, api_key="test", max_retries=0)
        async with client.messages.stream(model="claude-sonnet-4-5", max_tokens=4096, messages=MESSAGES) as stream:
            async for text in stream.text_stream:
                received.append(text)

    asyncio.run(run())


def anthropic_stream(server, received):
    client = anthropic.Anthropic(base_url=server.anthropic_url, api_key="test", max_retries=0)
    with client.messages.stream(model="claude-sonnet-4-5", max_tokens=4096, messages=MESSAGES) as stream:
        for text in stream.text_stream:
            received.append(text)


def langchain_stream(server, received):
    # langchain-core's own fake chat model streams the scripted answer word by word.
    model = GenericFakeChatModel(messages=iter([AIMessage(server.script(None).text)]))
    for chunk in model.stream("Why does it fail?"):
        received.append(chunk.content)


READERS = [openai_chat, openai_chat_async, openai_responses, anthropic_create, anthropic_stream,
           anthropic_stream_async, langchain_stream]


def run_session(tracing, reader, turn):
    """Run one streamed call in a session; (text received, AgentStopped or None)."""
    received: list[str] = []
    stopped = None
    with ScriptedModelServer(turns(turn)) as server:
        try:
            with tracing.session("s1"):
                reader(server, received)
        except AgentStopped as exc:
            stopped = exc
    return "".join(received), stopped


def model_span(tracing):
    spans = [s for s in tracing.spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == "chat"]
    assert len(spans) == 1
    return spans[0]


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__)
def test_a_chanting_stream_is_caught_while_it_streams(guarded, reader):
    text, stopped = run_session(guarded, reader, CHANT)
    span = model_span(guarded)
    summary = RepetitionSummary.from_attribute(span.attributes[A.OUTPUT_REPETITION])
    found = summary.finding
    assert found is not None and found.period == 1
    assert found.end_offset <= 1.3 * ONSET
    session = guarded.session_span("s1")
    assert session.attributes[A.STOP_REASON] == A.OUTPUT_REPETITION_PROBE
    [stall] = [e for e in session.events if e.name == A.STALL_EVENT]
    assert stall.attributes[A.PROBE] == A.OUTPUT_REPETITION_PROBE
    assert tuple(stall.attributes[A.EVIDENCE]) == (span.attributes[A.SEQUENCE],)
    assert tuple(stall.attributes[A.REPETITION_OFFSETS]) == (found.first_offset, found.trigger_offset)
    if guarded.processor.mode == "observe":
        assert stopped is None
        assert text == CHANT.text  # the stream ran to its end
        assert summary.max_repeats == 300
    else:
        assert stopped is not None and stopped.stop_reason == A.OUTPUT_REPETITION_PROBE
        assert stopped.breakpoint["partial_text_chars"] == len(text)
        assert ONSET < len(text) <= found.end_offset < len(CHANT.text) // 10
        assert text == CHANT.text[: len(text)]
        assert session.attributes[A.ENFORCED] is True
        assert summary.chunks < 20  # the span ended at the alert


@pytest.mark.parametrize("reader", READERS, ids=lambda r: r.__name__)
def test_an_honest_long_stream_is_left_alone(guarded, reader):
    text, stopped = run_session(guarded, reader, HONEST)
    assert stopped is None and text == HONEST.text
    summary = RepetitionSummary.from_attribute(model_span(guarded).attributes[A.OUTPUT_REPETITION])
    assert summary.finding is None and summary.max_repeats == 1
    assert guarded.session_span("s1").attributes[A.STOP_REASON] == A.COMPLETED


def test_a_non_streamed_answer_is_checked_at_the_end():
    tracing, instrumentors = tracing_for("observe")
    try:
        with ScriptedModelServer(turns(CHANT)) as server:
            client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
            with tracing.session("s1"):
                client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        summary = RepetitionSummary.from_attribute(model_span(tracing).attributes[A.OUTPUT_REPETITION])
        assert summary == summarize(CHANT.text)
        assert tracing.session_span("s1").attributes[A.STOP_REASON] == A.OUTPUT_REPETITION_PROBE
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        tracing.shutdown()


def test_no_answer_text_leaves_the_process_without_capture(monkeypatch):
    monkeypatch.delenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, raising=False)
    tracing, instrumentors = tracing_for("enforce")
    try:
        run_session(tracing, openai_chat, CHANT)
        written = json.dumps([
            {"attributes": dict(s.attributes), "events": [dict(e.attributes) for e in s.events]}
            for s in tracing.spans()
        ], default=str)
        assert "readiness probe" not in written and "Let me check" not in written
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        tracing.shutdown()


# --- replay agrees --------------------------------------------------------------------------------------


def _strip(path, tmp_path, name, key):
    """A copy of an OTLP JSON-lines trace with one attribute removed from every span."""
    out = tmp_path / name
    lines = []
    for line in path.read_text().splitlines():
        payload = json.loads(line)
        for resource in payload["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    span["attributes"] = [a for a in span["attributes"] if a["key"] != key]
        lines.append(json.dumps(payload))
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize("mode", ["observe", "enforce"])
def test_replay_reaches_the_live_verdict_from_the_summary_or_from_the_text(mode, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "true")
    path = tmp_path / "trace.jsonl"
    tracing, instrumentors = tracing_for(mode)
    tracing.tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPJsonLinesSpanExporter(path)))
    try:
        run_session(tracing, anthropic_create, CHANT)
    finally:
        for instrumentor in instrumentors:
            instrumentor.uninstrument()
        tracing.shutdown()
    live = tracing.verdict("s1")
    assert live.stop_reason == A.OUTPUT_REPETITION_PROBE
    expected = [(a.probe, a.sequence, a.evidence, a.offsets) for a in live.alerts]
    assert expected[0][3] is not None
    for source in (path,
                   _strip(path, tmp_path, "no-summary.jsonl", A.OUTPUT_REPETITION),
                   _strip(path, tmp_path, "no-text.jsonl", A.GEN_AI_OUTPUT_MESSAGES)):
        [(session, verdict)] = [(s, v) for s, v in replay_files([source], POLICY) if s.session_id == "s1"]
        assert verdict.stop_reason == live.stop_reason, source.name
        assert [(a.probe, a.sequence, a.evidence, a.offsets) for a in verdict.alerts] == expected, source.name
    # The command line shows the same, offsets included.
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text('version = "repetition"\n')
    assert cli_run(["replay", str(_strip(path, tmp_path, "cli.jsonl", A.GEN_AI_OUTPUT_MESSAGES)),
                    "--policy", str(policy_file), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    [session] = [s for s in document["sessions"] if s["session_id"] == "s1"]
    assert session["stop_reason"] == A.OUTPUT_REPETITION_PROBE
    assert [tuple(a["offsets"]) for a in session["alerts"]] == [expected[0][3]]


def test_a_disabled_probe_checks_nothing_and_records_nothing():
    policy = parse_policy('[profiles.default]\ndisabled_probes = ["output_repetition"]\n')
    tracing = GuardedTracing(policy, "enforce")
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracing.tracer_provider)
    try:
        text, stopped = run_session(tracing, openai_chat, CHANT)
        assert stopped is None and text == CHANT.text
        assert A.OUTPUT_REPETITION not in model_span(tracing).attributes
        assert tracing.session_span("s1").attributes[A.STOP_REASON] == A.COMPLETED
    finally:
        instrumentor.uninstrument()
        tracing.shutdown()
