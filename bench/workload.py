"""A realistic span stream of agent sessions, driven through a real SDK TracerProvider.

Each session is an ``invoke_agent`` span (as ``otel_agentguard.session`` makes it) with,
inside it, the spans an instrumented agent writes: ``chat`` model spans that ask for one
or two tool calls, ``execute_tool`` spans carrying the fingerprint attributes the
instrumentation stamps (so the processor judges them without re-fingerprinting), and a
final answer. A share of the sessions loop on one call, so some alerts fire as in real
traffic. Both variants of a comparison drive the very same spans; only the processors differ.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench._harness import guard_stayed_in
from otel_agentguard import attributes as A
from otel_agentguard.judge.policy import Policy, parse_policy
from otel_agentguard.live._context import SessionContext, with_session
from otel_agentguard.live.processor import AgentGuardSpanProcessor

TOOLS = ("search_orders", "get_order", "check_policy", "lookup_customer", "fetch_sources", "update_order")


class DropExporter(SpanExporter):
    """Counts and drops: the export itself is not what is measured."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[object]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


@dataclass(frozen=True)
class StepSpec:
    name: str
    start: dict
    end: dict


def _hex(rnd: random.Random) -> str:
    return f"{rnd.getrandbits(128):032x}"


def tool_step(rnd: random.Random, tool: str, args_fp: str, result_fp: str) -> StepSpec:
    start = {
        A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL,
        A.GEN_AI_TOOL_NAME: tool,
        "gen_ai.tool.type": "function",
        A.TOOL_ARGS_FINGERPRINT: args_fp,
        A.TOOL_ARGS_KEYS: ["order_id", "region"],
        A.TOOL_ARGS_SIZE: 48,
    }
    if tool == "update_order":
        start[A.TOOL_EFFECT] = "write"
    end = {A.TOOL_RESULT_FINGERPRINT: result_fp, A.TOOL_RESULT_EMPTY: False}
    return StepSpec(f"{A.OP_EXECUTE_TOOL} {tool}", start, end)


def model_step(rnd: random.Random, tool_calls: int) -> StepSpec:
    start = {
        A.GEN_AI_OPERATION_NAME: "chat",
        A.GEN_AI_PROVIDER_NAME: "openai",
        A.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
    }
    end = {
        A.GEN_AI_RESPONSE_FINISH_REASONS: ["tool_calls" if tool_calls else "stop"],
        A.RESPONSE_TOOL_CALLS: tool_calls,
        A.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini-2024-07-18",
        "gen_ai.response.id": "chatcmpl-" + _hex(rnd)[:12],
        A.GEN_AI_USAGE_INPUT_TOKENS: rnd.randint(200, 900),
        A.GEN_AI_USAGE_OUTPUT_TOKENS: rnd.randint(10, 120),
    }
    if not tool_calls:
        end[A.FINAL_CLAIMS] = []
    return StepSpec("chat gpt-4o-mini", start, end)


def session_steps(rnd: random.Random, steps: int, looping: bool, unique: bool = False) -> list[StepSpec]:
    """About ``steps`` spans: model turns asking for 1-2 tool calls, their tool spans, a final answer.

    ``looping`` sessions repeat one call with the same result (tool_loop fires); ``unique``
    gives every call new arguments and results, so no probe ever fires and each keeps working.
    """
    out: list[StepSpec] = []
    loop_call = (rnd.choice(TOOLS), _hex(rnd), _hex(rnd))
    pool = [(rnd.choice(TOOLS), _hex(rnd), _hex(rnd)) for _ in range(6)]
    while len(out) < steps - 1:
        calls = rnd.choice((1, 1, 2))
        out.append(model_step(rnd, calls))
        for _ in range(calls):
            if unique:
                call = (rnd.choice(TOOLS), _hex(rnd), _hex(rnd))
            elif looping:
                call = loop_call
            else:
                call = rnd.choice(pool)
            out.append(tool_step(rnd, *call))
    out.append(model_step(rnd, 0))
    return out


def foreign_step(spec: StepSpec) -> StepSpec:
    """The same step as another GenAI instrumentation writes it: raw tool arguments and result
    (JSON text) instead of our fingerprints, and none of our own attributes."""
    start = {key: value for key, value in spec.start.items() if not key.startswith("agentguard.")}
    end = {key: value for key, value in spec.end.items() if not key.startswith("agentguard.")}
    if A.TOOL_ARGS_FINGERPRINT in spec.start:  # the same call gives the same arguments: loops stay loops
        seed = spec.start[A.TOOL_ARGS_FINGERPRINT]
        start[A.GEN_AI_TOOL_CALL_ARGUMENTS] = json.dumps(
            {"order_id": seed[:8], "region": "eu", "page": 1, "filters": {"status": ["open", "late"]}})
        end[A.GEN_AI_TOOL_CALL_RESULT] = json.dumps(
            {"status": "ok", "items": [{"sku": spec.end.get(A.TOOL_RESULT_FINGERPRINT, "")[:6], "qty": 1}]})
    return StepSpec(spec.name, start, end)


class Driver:
    """One TracerProvider with a BatchSpanProcessor and a dropping exporter, with or without the guard."""

    def __init__(self, guard: bool, policy: Policy | None = None, max_sessions: int | None = None):
        self.exporter = DropExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(BatchSpanProcessor(self.exporter, max_queue_size=1 << 17))
        self.processor = None
        if guard:
            self.processor = AgentGuardSpanProcessor(
                policy, "observe", tracer_provider=self.provider, max_sessions=max_sessions
            )
            self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("bench")

    def open(self, session_id: str) -> tuple[trace.Span, object]:
        span = self.tracer.start_span(
            "invoke_agent bench",
            attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.SESSION_ID: session_id},
        )
        context = with_session(SessionContext(session_id), trace.set_span_in_context(span))
        return span, context

    def open_foreign(self, session_id: str) -> tuple[trace.Span, object]:
        """An agent span of another instrumentation: the session is named only by gen_ai.conversation.id."""
        span = self.tracer.start_span(
            "invoke_agent bench",
            attributes={A.GEN_AI_OPERATION_NAME: A.OP_INVOKE_AGENT, A.GEN_AI_CONVERSATION_ID: session_id},
        )
        return span, trace.set_span_in_context(span)

    def step(self, context: object, spec: StepSpec) -> None:
        span = self.tracer.start_span(spec.name, context=context, attributes=spec.start)  # type: ignore[arg-type]
        span.set_attributes(spec.end)
        span.end()

    def close(self, span: trace.Span) -> None:
        if self.processor is not None:
            self.processor.end_session(span)  # what otel_agentguard.session() does on exit
        span.end()

    def shutdown(self) -> None:
        self.provider.shutdown()
        if self.processor is not None:
            guard_stayed_in("processor benchmark")


def make_sessions(count: int, steps: int, seed: int, loop_share: float = 0.1) -> list[tuple[str, list[StepSpec]]]:
    rnd = random.Random(seed)
    return [(f"sess-{seed}-{i}", session_steps(rnd, steps, rnd.random() < loop_share)) for i in range(count)]


def run_concurrent(driver: Driver, sessions: list[tuple[str, list[StepSpec]]], seed: int,
                   foreign: bool = False) -> tuple[float, int]:
    """All sessions open at once; their steps interleave in random order. Returns (seconds, spans).

    ``foreign``: the sessions are agent spans of another instrumentation (no session scope of ours)."""
    rnd = random.Random(seed)
    start = time.perf_counter()
    opener = driver.open_foreign if foreign else driver.open
    opened = [opener(session_id) for session_id, _ in sessions]
    cursors = [0] * len(sessions)
    live = list(range(len(sessions)))
    spans = len(sessions)
    step = driver.step
    while live:
        index = rnd.randrange(len(live))
        which = live[index]
        steps = sessions[which][1]
        step(opened[which][1], steps[cursors[which]])
        spans += 1
        cursors[which] += 1
        if cursors[which] == len(steps):
            driver.close(opened[which][0])
            live[index] = live[-1]
            live.pop()
    return time.perf_counter() - start, spans


LONG_RUN_POLICY = """
version = "bench"
[profiles.default]
window = {window}
repeat_threshold = 3
no_progress_steps = 4
error_streak = 4
max_steps = 1000000000
max_tokens = 1000000000000
"""


def long_run_policy(window: int) -> Policy:
    """Budgets that never run out: sessions stay live and every probe keeps doing its work."""
    return parse_policy(LONG_RUN_POLICY.format(window=window))
