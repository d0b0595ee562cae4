"""``@otel_agentguard.tool`` on sync and async functions."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry import context
from opentelemetry.trace import StatusCode

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.testing import GuardedTracing


def tool_spans(tracing: GuardedTracing):
    return [s for s in tracing.spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == "execute_tool"]


def test_sync_tool_span_has_fingerprints_keys_size_and_effect():
    with GuardedTracing() as tracing:
        @ag.tool(effect="write", tracer_provider=tracing.tracer_provider)
        def refund(order: str, amount: float, note: str = "") -> dict:
            return {"ok": True}

        assert refund("A1", 10.0) == {"ok": True}
        refund(order="A1", amount=10)  # same call: kwargs, 10 == 10.0, default applied
        first, second = tool_spans(tracing)
        assert first.name == "execute_tool refund"
        assert first.attributes[A.GEN_AI_TOOL_NAME] == "refund"
        assert first.attributes[A.TOOL_EFFECT] == "write"
        assert tuple(first.attributes[A.TOOL_ARGS_KEYS]) == ("amount", "note", "order")
        assert first.attributes[A.TOOL_ARGS_SIZE] > 0
        assert first.attributes[A.TOOL_ARGS_FINGERPRINT] == second.attributes[A.TOOL_ARGS_FINGERPRINT]
        assert first.attributes[A.TOOL_RESULT_FINGERPRINT] == second.attributes[A.TOOL_RESULT_FINGERPRINT]
        assert first.attributes[A.TOOL_RESULT_EMPTY] is False


def test_different_arguments_give_different_fingerprints():
    with GuardedTracing() as tracing:
        @ag.tool(tracer_provider=tracing.tracer_provider)
        def get_order(order: str) -> dict:
            return {}

        get_order("A1")
        get_order("A2")
        a, b = tool_spans(tracing)
        assert a.attributes[A.TOOL_ARGS_FINGERPRINT] != b.attributes[A.TOOL_ARGS_FINGERPRINT]
        assert a.attributes[A.TOOL_RESULT_EMPTY] is True


def test_async_tool_and_exceptions_propagate_with_error_status():
    with GuardedTracing() as tracing:
        @ag.tool(name="fetch_page", tracer_provider=tracing.tracer_provider)
        async def fetch(url: str) -> str:
            await asyncio.sleep(0)
            if url.endswith("404"):
                raise LookupError("not found")
            return "<html>"

        assert asyncio.run(fetch("https://x/200")) == "<html>"
        with pytest.raises(LookupError, match="not found"):
            asyncio.run(fetch("https://x/404"))
        ok, failed = tool_spans(tracing)
        assert ok.name == "execute_tool fetch_page"
        assert ok.status.status_code is StatusCode.UNSET
        assert failed.status.status_code is StatusCode.ERROR
        assert failed.attributes[A.ERROR_TYPE] == "LookupError"
        assert A.TOOL_RESULT_FINGERPRINT not in failed.attributes


def test_policy_contract_overrides_decorator_effect_and_supplies_noise_keys():
    policy = parse_policy('[tools.search]\neffect = "read"\nnoise_keys = ["page_token"]\n')
    with GuardedTracing(policy) as tracing:
        @ag.tool(effect="write", tracer_provider=tracing.tracer_provider)
        def search(q: str, page_token: str) -> list:
            return [1]

        search("x", "t1")
        search("x", "t2")
        a, b = tool_spans(tracing)
        assert a.attributes[A.TOOL_EFFECT] == "read"
        assert a.attributes[A.TOOL_ARGS_FINGERPRINT] == b.attributes[A.TOOL_ARGS_FINGERPRINT]


def test_suppressed_instrumentation_calls_straight_through():
    with GuardedTracing() as tracing:
        @ag.tool(tracer_provider=tracing.tracer_provider)
        def ping() -> str:
            return "pong"

        token = context.attach(context.set_value(context._SUPPRESS_INSTRUMENTATION_KEY, True))
        try:
            assert ping() == "pong"
        finally:
            context.detach(token)
        assert tool_spans(tracing) == []


def test_methods_are_fingerprinted_without_self():
    with GuardedTracing() as tracing:
        class Shop:
            def __init__(self, name: str):
                self.name = name

            @ag.tool(tracer_provider=tracing.tracer_provider)
            def stock(self, sku: str) -> int:
                return 3

        Shop("a").stock("S1")
        Shop("b").stock("S1")
        a, b = tool_spans(tracing)
        assert a.attributes[A.TOOL_ARGS_FINGERPRINT] == b.attributes[A.TOOL_ARGS_FINGERPRINT]
        assert tuple(a.attributes[A.TOOL_ARGS_KEYS]) == ("sku",)


def test_bad_effect_is_rejected_at_decoration():
    with pytest.raises(ValueError, match="effect"):
        ag.tool(effect="delete")
