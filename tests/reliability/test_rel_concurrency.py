"""Concurrency: 100 threads and 1,000 concurrent asyncio sessions on one guard.

Within a session no sequence number is lost, reused or out of start order; no session's steps
land in another session; every verdict equals the verdict of the same session run alone.
Context follows the work into asyncio tasks and into thread pools that run it under
``contextvars.copy_context().run``.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from concurrently import run_concurrently
from rel_support import verdict_key

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.testing import GuardedTracing

THREADS = 100
ASYNC_SESSIONS = 1000
SHAPES = ("loop", "cycle", "honest", "fake", "errors", "budget", "parallel", "chant", "handoff")
CHANT = "Order A1 is delayed at the depot. " + "Let me check the status of the order again. " * 40


class Tools:
    """The agent's tools on one provider, sync and async."""

    def __init__(self, tracing: GuardedTracing):
        provider = tracing.tracer_provider
        self.tracing = tracing

        @ag.tool(tracer_provider=provider)
        def lookup(order: str) -> dict:
            return {"order": order, "state": "stalled"}

        @ag.tool(tracer_provider=provider, effect="write")
        def refund(order: str) -> dict:
            return {"refunded": order}

        @ag.tool(tracer_provider=provider)
        def step(name: str) -> dict:
            return {"visited": name}

        @ag.tool(tracer_provider=provider)
        def flaky(n: int) -> dict:
            raise TimeoutError("upstream timed out")

        @ag.tool(name="lookup", tracer_provider=provider)
        async def alookup(order: str) -> dict:
            await asyncio.sleep(0)
            return {"order": order, "state": "stalled"}

        @ag.tool(name="refund", tracer_provider=provider, effect="write")
        async def arefund(order: str) -> dict:
            await asyncio.sleep(0)
            return {"refunded": order}

        @ag.tool(name="step", tracer_provider=provider)
        async def astep(name: str) -> dict:
            await asyncio.sleep(0)
            return {"visited": name}

        @ag.tool(name="flaky", tracer_provider=provider)
        async def aflaky(n: int) -> dict:
            await asyncio.sleep(0)
            raise TimeoutError("upstream timed out")

        self.sync = {"lookup": lookup, "refund": refund, "step": step, "flaky": flaky}
        self.aio = {"lookup": alookup, "refund": arefund, "step": astep, "flaky": aflaky}

    def model(self, **kwargs) -> None:
        self.tracing.record_model_call(input_tokens=100, output_tokens=20, **kwargs)


def script(shape: str, n: int) -> list[tuple]:
    """A session as a list of actions: ("model", kwargs), ("tool", name, arg) or ("parallel", name, [args])."""
    order = f"A{n % 7}"
    if shape == "loop":
        return [("model", {"tool_calls": 1}), *[a for _ in range(4) for a in (("tool", "lookup", order),
                                                                             ("model", {"tool_calls": 1}))],
                ("model", {"final_claims": ()})]
    if shape == "cycle":
        return [("tool", "step", name) for _ in range(3) for name in ("a", "b", "c")] + [("model", {"final_claims": ()})]
    if shape == "honest":
        return [("tool", "lookup", order), ("tool", "refund", order), ("model", {"final_claims": ("write",)})]
    if shape == "fake":
        return [("tool", "lookup", order), ("model", {"final_claims": ("write",)})]
    if shape == "errors":
        return [("tool", "flaky", k) for k in range(5)] + [("model", {"final_claims": ()})]
    if shape == "budget":
        return [a for k in range(14) for a in (("model", {"tool_calls": 1}), ("tool", "step", f"s{k}"))]
    if shape == "handoff":  # two agents hand the conversation back and forth
        return [*[("model", {"tool_calls": 1, "agent": agent}) for agent in ("triage", "billing") * 2],
                ("model", {"final_claims": (), "agent": "triage"})]
    if shape == "chant":  # the model repeats itself until max_tokens
        return [("tool", "lookup", order), ("model", {"answer": CHANT, "finish_reason": "length"})]
    # parallel: the model asks for three calls at once, they run concurrently, then it answers
    return [("model", {"tool_calls": 3}), ("parallel", "lookup", [order, order, order]), ("model", {"final_claims": ()})]


def run_sync(tools: Tools, session_id: str, actions: list[tuple], pool: ThreadPoolExecutor | None = None) -> None:
    with tools.tracing.session(session_id):
        for action in actions:
            if action[0] == "model":
                tools.model(**action[1])
            elif action[0] == "tool":
                try:
                    tools.sync[action[1]](action[2])
                except TimeoutError:
                    pass
            else:  # each call in the pool, under a copy of this thread's context
                futures = [pool.submit(contextvars.copy_context().run, tools.sync[action[1]], arg)  # type: ignore[union-attr]
                           for arg in action[2]]
                for future in futures:
                    future.result()


async def run_async(tools: Tools, session_id: str, actions: list[tuple]) -> None:
    async with tools.tracing.session(session_id):
        for action in actions:
            if action[0] == "model":
                tools.model(**action[1])
            elif action[0] == "tool":
                try:
                    await tools.aio[action[1]](action[2])
                except TimeoutError:
                    pass
            else:  # concurrent asyncio tasks: each copies the current context
                await asyncio.gather(*(asyncio.create_task(tools.aio[action[1]](arg)) for arg in action[2]))


def baseline(sessions: dict[str, list[tuple]]) -> dict[str, object]:
    """Each session run alone, one after the other, on a guard of its own."""
    verdicts = {}
    with ThreadPoolExecutor(3) as pool:
        for session_id, actions in sessions.items():
            with GuardedTracing() as tracing:
                run_sync(Tools(tracing), session_id, actions, pool)
            verdicts[session_id] = verdict_key(tracing.verdict(session_id))
    return verdicts


def check_spans(tracing: GuardedTracing, sessions: dict[str, list[tuple]]) -> None:
    """Per session: step sequences are exactly 1..n, unique, numbered in start order (ties only
    within a parallel batch); every span of a session's trace carries that session."""
    trace_of = {}
    steps: dict[str, list] = defaultdict(list)
    for span in tracing.spans():
        attrs = span.attributes or {}
        if attrs.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT:
            trace_of[span.context.trace_id] = attrs[A.SESSION_ID]
    assert sorted(trace_of.values()) == sorted(sessions)
    for span in tracing.spans():
        attrs = span.attributes or {}
        owner = trace_of[span.context.trace_id]
        assert attrs.get(A.SESSION_ID) == owner, (span.name, attrs.get(A.SESSION_ID), owner)  # no leak
        if A.SEQUENCE in attrs and not attrs.get(A.VERDICT):
            steps[owner].append((span.start_time, attrs[A.SEQUENCE], span.name))
    for session_id, actions in sessions.items():
        expected = sum(len(a[2]) if a[0] == "parallel" else 1 for a in actions)
        found = sorted(steps[session_id])
        numbers = [sequence for _, sequence, _ in found]
        assert sorted(numbers) == list(range(1, expected + 1)), (session_id, numbers)  # none lost, none reused
        if "parallel" not in session_id:
            assert numbers == list(range(1, expected + 1)), (session_id, numbers)  # in start order


def make_sessions(count: int, prefix: str) -> dict[str, list[tuple]]:
    return {f"{prefix}-{SHAPES[n % len(SHAPES)]}-{n}": script(SHAPES[n % len(SHAPES)], n) for n in range(count)}


def test_100_threads_each_with_a_session_on_one_guard():
    sessions = make_sessions(THREADS, "thread")
    start = threading.Barrier(THREADS)
    with GuardedTracing() as tracing, ThreadPoolExecutor(8) as pool:
        tools = Tools(tracing)

        def worker(session_id: str) -> None:
            start.wait()
            run_sync(tools, session_id, sessions[session_id], pool)

        run_concurrently(worker, sessions)
    check_spans(tracing, sessions)
    concurrent = {sid: verdict_key(tracing.verdict(sid)) for sid in sessions}
    assert concurrent == baseline(sessions)
    # the scripts cover every probe and a clean completion
    assert {v[0] for v in concurrent.values()} >= {"completed", "tool_loop", "fake_completion", "budget_exceeded"}
    assert {alert[0] for v in concurrent.values() for alert in v[-1]} == set(A.PROBE_NAMES)


def test_100_threads_sharing_one_session_never_share_or_lose_a_sequence_number():
    calls = 20
    with GuardedTracing() as tracing:
        tools = Tools(tracing)
        start = threading.Barrier(THREADS)
        with tracing.session("shared"):
            context = contextvars.copy_context()

            def worker(n: int) -> None:
                start.wait()
                for k in range(calls):
                    context.copy().run(tools.sync["step"], f"{n}-{k}")

            run_concurrently(worker, range(THREADS))
            tools.model(final_claims=())
    numbers = sorted(s.attributes[A.SEQUENCE] for s in tracing.spans() if A.SEQUENCE in s.attributes)
    assert numbers == list(range(1, THREADS * calls + 2))
    verdict = tracing.verdict("shared")
    assert verdict.steps == THREADS * calls + 1
    assert verdict.stop_reason == "budget_exceeded"  # 2,000 steps against max_steps = 12


def test_1000_concurrent_asyncio_sessions():
    sessions = make_sessions(ASYNC_SESSIONS, "task")
    with GuardedTracing() as tracing:
        tools = Tools(tracing)

        async def main() -> None:
            order = list(sessions)
            random.Random(7).shuffle(order)
            await asyncio.gather(*(run_async(tools, sid, sessions[sid]) for sid in order))

        asyncio.run(main())
    check_spans(tracing, sessions)
    concurrent = {sid: verdict_key(tracing.verdict(sid)) for sid in sessions}
    # One at a time: the first of each shape and index residue covers every distinct script.
    distinct = {}
    for sid, actions in sessions.items():
        distinct.setdefault(repr(actions), sid)
    alone = baseline({sid: sessions[sid] for sid in distinct.values()})
    for sid, actions in sessions.items():
        assert concurrent[sid] == alone[distinct[repr(actions)]], sid


def _session_of_current_tool_span(run: Callable[[Tools], None]) -> list[str | None]:
    """The session each lookup span was stamped with, when ``run`` calls it from inside a session."""
    with GuardedTracing() as tracing:
        tools = Tools(tracing)
        with tracing.session("propagated"):
            run(tools)
    return [s.attributes.get(A.SESSION_ID) for s in tracing.spans() if s.name == "execute_tool lookup"]


def test_context_follows_asyncio_tasks():
    def run(tools: Tools) -> None:
        async def main() -> None:
            await asyncio.gather(*(asyncio.create_task(tools.aio["lookup"](f"A{k}")) for k in range(5)))

        # asyncio.run copies the caller's context into the loop's first task, and each task copies it on
        asyncio.run(main())

    assert _session_of_current_tool_span(run) == ["propagated"] * 5


def test_context_follows_thread_pools_under_copy_context():
    def run(tools: Tools) -> None:
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(contextvars.copy_context().run, tools.sync["lookup"], f"A{k}") for k in range(5)]
            for future in futures:
                future.result()

    assert _session_of_current_tool_span(run) == ["propagated"] * 5


def test_without_copy_context_a_pool_thread_is_outside_the_session():
    """The control for the test above: the propagation there is the context's doing, not luck."""

    def run(tools: Tools) -> None:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(tools.sync["lookup"], "A1").result()

    assert _session_of_current_tool_span(run) != ["propagated"]
