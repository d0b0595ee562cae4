"""One variant of the instrumented ``openai`` chat call, in its own process (see ``openai_call.py``).

Usage: ``python -m bench._openai_worker VARIANT CALLS WARMUP``; prints one JSON line:
``{"variant": ..., "per_call_us": ..., "spans": ...}``. With a fourth argument, ``PAIRS``, an
instrumented variant times ``PAIRS`` pairs of blocks of ``CALLS`` calls in this one process,
instrumented and uninstrumented in alternating order (the instrumentor is switched off and on
between blocks, outside the timing), and prints both lists: ``{"variant": ...,
"instrumented_us": [...], "bare_us": [...], "spans": ...}``. A block's pair shares the process
and the moment, so their difference is the instrumentation's cost without the noise between
processes (memory layout, the machine's drift). Variants: ``none`` (uninstrumented),
``openai_v2`` (the official OpenTelemetry instrumentation), ``openllmetry`` (Traceloop's),
``agentguard`` (this package, observe mode). Each instrumented variant runs on an SDK
TracerProvider with a BatchSpanProcessor and an exporter that drops spans, so all pay the
same SDK cost; only the instrumentation (and, for agentguard, its processor) differs.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

_COMPLETION = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-4o-mini-2024-07-18",
    "system_fingerprint": "fp_bench",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "logprobs": None,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_order", "arguments": "{\"order_id\": \"A-1001\"}"}},
                    {"id": "call_2", "type": "function",
                     "function": {"name": "check_policy", "arguments": "{\"topic\": \"refunds\", \"region\": \"EU\"}"}},
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 412, "completion_tokens": 58, "total_tokens": 470},
}
_BODY = json.dumps(_COMPLETION).encode()

MESSAGES = [
    {"role": "system", "content": "You are a support agent. Use the tools."},
    {"role": "user", "content": "Where is my refund for order A-1001?"},
]
TOOLS = [
    {"type": "function", "function": {"name": "get_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {"name": "check_policy", "parameters": {
        "type": "object", "properties": {"topic": {"type": "string"}, "region": {"type": "string"}}}}},
]


class _DropExporter:
    """A SpanExporter that counts and drops: export cost is not what is measured."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[object]) -> object:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _client():  # noqa: ANN202 - openai types are optional here
    import openai

    # openai 3.x sends through httpx2; the mock transport plugs into the client it really uses.
    try:
        import httpx2 as transport_lib
    except ImportError:  # openai 1.x/2.x use httpx
        import httpx as transport_lib

    def handler(request):  # noqa: ANN001, ANN202
        return transport_lib.Response(200, content=_BODY, headers={"content-type": "application/json"})

    http_client = transport_lib.Client(transport=transport_lib.MockTransport(handler))
    return openai.OpenAI(api_key="sk-bench", base_url="http://bench.invalid/v1", http_client=http_client, max_retries=0)


def _provider(exporter: _DropExporter, with_guard: bool):  # noqa: ANN202
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 16))
    if with_guard:
        import otel_agentguard as ag

        ag.install(tracer_provider=provider, mode="observe")
    trace.set_tracer_provider(provider)
    return provider


def _instrument(variant: str, provider):  # noqa: ANN001, ANN202 - the instrumentor, to switch it off and on
    if variant == "none":
        return None
    if variant == "openai_v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    elif variant == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    elif variant == "agentguard":
        from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor


def _report(variant: str, figures: dict) -> None:
    """Print a variant's figures for the parent, once the guard is known to have kept working."""
    if variant == "agentguard":
        from bench._harness import guard_stayed_in

        guard_stayed_in("openai call")
    print(json.dumps(figures))


def _timed(call, calls: int) -> float:  # noqa: ANN001
    """Microseconds per call over ``calls`` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def _paired(variant: str, instrumentor, provider, exporter: _DropExporter, call, calls: int, warmup: int,  # noqa: ANN001
            pairs: int) -> int:
    import gc

    gc.collect()  # once, before the first block
    timed: dict[bool, list[float]] = {True: [], False: []}
    switched_on = True  # main() instrumented it
    for pair in range(pairs):
        for instrumented in (True, False) if pair % 2 == 0 else (False, True):
            if instrumented and not switched_on:
                instrumentor.instrument(tracer_provider=provider)
            elif not instrumented and switched_on:
                instrumentor.uninstrument()
            switched_on = instrumented
            for _ in range(warmup):
                call()
            provider.force_flush()
            # No collection here: a block pays the collections its own allocations trigger (a
            # guard keeps a session per call, and what that costs the collector is its cost).
            exported = exporter.spans
            timed[instrumented].append(_timed(call, calls))
            provider.force_flush()
            made = exporter.spans - exported
            if made != (calls if instrumented else 0):  # each call one span, or none when switched off
                raise SystemExit(f"{variant}: {made} spans for {calls} calls, instrumentation "
                                 f"{'on' if instrumented else 'off'}: it did not switch cleanly")
    _report(variant, {"variant": variant, "instrumented_us": timed[True], "bare_us": timed[False],
                      "spans": exporter.spans})
    return 0


def main(argv: Sequence[str]) -> int:
    bytecodes = "--bytecodes" in argv
    argv = [arg for arg in argv if arg != "--bytecodes"]
    variant, calls, warmup = argv[0], int(argv[1]), int(argv[2])
    pairs = int(argv[3]) if len(argv) > 3 else 0
    exporter = _DropExporter()
    provider = None if variant == "none" else _provider(exporter, with_guard=variant == "agentguard")
    instrumentor = _instrument(variant, provider)
    client = _client()

    def call() -> object:
        return client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS)

    for _ in range(warmup):
        call()
    reply = call()
    assert len(reply.choices[0].message.tool_calls) == 2
    if bytecodes:  # counted, not timed: the Python bytecodes of ``calls`` calls on this thread
        from bench.bytecodes import counted

        def calls_made() -> int:
            for _ in range(calls):
                call()
            return calls

        executed, _ = counted(calls_made)
        if provider is not None:
            provider.force_flush()
        _report(variant, {"variant": variant, "bytecodes_per_call": executed / calls, "spans": exporter.spans})
        return 0
    if pairs:
        if instrumentor is None:
            raise SystemExit("paired blocks compare an instrumented variant with itself switched off")
        return _paired(variant, instrumentor, provider, exporter, call, calls, max(warmup // 10, 3), pairs)
    import gc

    gc.collect()
    per_call_us = _timed(call, calls)
    if provider is not None:
        provider.force_flush()
    _report(variant, {"variant": variant, "per_call_us": per_call_us, "spans": exporter.spans})
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
