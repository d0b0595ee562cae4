"""Instrumentations report to the guard they were given; without one, the choice is deterministic."""

from __future__ import annotations

import pytest
from langchain_core.tools import tool
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_agentguard import attributes as A
from otel_agentguard.instrumentation.langchain import LangChainInstrumentor
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.live.guard_ref import GuardRef
from otel_agentguard.live.processor import AgentGuardSpanProcessor

REFUND_WRITES = parse_policy('version = "refund-writes"\n[tools.refund]\neffect = "write"\n')
REFUND_READS = parse_policy('version = "refund-reads"\n[tools.refund]\neffect = "read"\n')


@tool
def refund(order_id: str) -> str:
    """Refund an order."""
    return f"refunded {order_id}"


class Guarded:
    """A provider with its own guard and an in-memory exporter."""

    def __init__(self, policy):
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.guard = AgentGuardSpanProcessor(REFUND_WRITES if policy is None else policy, tracer_provider=self.provider)
        self.provider.add_span_processor(self.guard)

    def tool_effects(self) -> list[object]:
        return [s.attributes.get(A.TOOL_EFFECT) for s in self.exporter.get_finished_spans()
                if s.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OP_EXECUTE_TOOL]

    def shutdown(self) -> None:
        self.provider.shutdown()


@pytest.fixture
def two_guards():
    older, newer = Guarded(REFUND_WRITES), Guarded(REFUND_READS)
    yield older, newer
    LangChainInstrumentor().uninstrument()
    older.shutdown()
    newer.shutdown()


def test_the_choice_without_an_explicit_guard_is_the_providers_then_the_newest(two_guards):
    older, newer = two_guards
    assert GuardRef(tracer_provider=older.provider).processor() is older.guard
    assert GuardRef(tracer_provider=newer.provider).processor() is newer.guard
    assert GuardRef(tracer_provider=TracerProvider()).processor() is newer.guard  # no guard there: the newest
    assert GuardRef().processor() is newer.guard
    assert GuardRef(older.guard).processor() is older.guard  # explicit wins over newer
    assert GuardRef(older.guard).policy is REFUND_WRITES


def test_a_guard_that_was_shut_down_no_longer_counts(two_guards):
    older, newer = two_guards
    newer.shutdown()
    assert GuardRef().processor() is older.guard
    assert GuardRef(newer.guard).processor() is older.guard


def test_an_explicit_guard_is_the_one_an_instrumentation_uses(two_guards):
    older, newer = two_guards
    # Spans go to the newer provider, whose own guard would say "read": the given guard decides.
    LangChainInstrumentor().instrument(tracer_provider=newer.provider, guard=older.guard)
    refund.invoke({"order_id": "A1"})
    assert newer.tool_effects() == ["write"]


def test_without_guard_the_instrumentation_uses_its_providers_guard(two_guards):
    older, newer = two_guards
    LangChainInstrumentor().instrument(tracer_provider=older.provider)
    refund.invoke({"order_id": "A1"})
    assert older.tool_effects() == ["write"]


def test_anything_but_a_guard_processor_is_refused_by_name(two_guards):
    with pytest.raises(TypeError, match=r"instrument\(guard=\.\.\.\).*got str"):
        LangChainInstrumentor().instrument(guard="enforce")


TIGHT = parse_policy('version = "tight"\n[profiles.default]\nmax_model_calls = 2\n')


def test_enforcement_goes_to_the_given_guard_not_the_newest(tmp_path):
    """Two guards on one provider: an enforcing one, then a newer observing one. Without guard=,
    the wrapper would ask the newest (which enforces nothing); given the enforcing one, the
    openai wrapper stops the agent before the model call that crosses its budget."""
    import json

    import openai

    import otel_agentguard as ag
    from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
    from otel_agentguard.scripted_model import ScriptedModelServer, Turn

    provider = TracerProvider()
    enforcing = AgentGuardSpanProcessor(TIGHT, "enforce", tracer_provider=provider)
    provider.add_span_processor(enforcing)
    observing = AgentGuardSpanProcessor(TIGHT, "observe", tracer_provider=provider)
    provider.add_span_processor(observing)
    assert GuardRef(tracer_provider=provider).processor() is observing  # the newest on the provider
    OpenAIInstrumentor().instrument(tracer_provider=provider, guard=enforcing)
    try:
        with ScriptedModelServer(lambda request: Turn.call("lookup", order="A1")) as server:
            client = openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0)
            messages: list[dict] = [{"role": "user", "content": "Where is my parcel?"}]
            with pytest.raises(ag.AgentStopped) as stopped, ag.session("budget", tracer_provider=provider):
                for _ in range(5):
                    message = client.chat.completions.create(model="gpt-4o", messages=messages).choices[0].message
                    messages.append(message.model_dump(exclude_none=True))
                    for call in message.tool_calls or ():
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"ok": 1})})
            assert stopped.value.stop_reason == "budget_exceeded"
            assert len(server.requests) == 2  # the third call was never sent
    finally:
        OpenAIInstrumentor().uninstrument()
        provider.shutdown()


def test_the_hooks_ask_an_enforcing_guard_only_while_one_runs():
    """In a process where every guard observes, the hooks return at once; an enforce-mode guard
    is asked from the moment it is made until it is shut down or dropped."""
    import gc

    from otel_agentguard.live import registry as _registry

    gc.collect()  # guards other tests dropped without shutting down
    observing = AgentGuardSpanProcessor(TIGHT, "observe")
    assert not _registry.any_enforcing
    assert GuardRef()._enforcing() is None
    enforcing = AgentGuardSpanProcessor(TIGHT, "enforce")
    assert _registry.any_enforcing
    assert GuardRef()._enforcing() is enforcing
    enforcing.shutdown()
    assert not _registry.any_enforcing
    dropped = AgentGuardSpanProcessor(TIGHT, "enforce")
    assert GuardRef(observing)._enforcing() is None  # the explicit guard observes
    assert GuardRef()._enforcing() is dropped
    del dropped
    gc.collect()
    assert not _registry.any_enforcing
    with pytest.raises(AttributeError):
        observing.mode = "enforce"  # type: ignore[misc]  # fixed when made: the flag relies on it
    observing.shutdown()
