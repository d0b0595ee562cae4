"""A process that forks (gunicorn workers, multiprocessing's fork start method) keeps working in
the child: a session judged there gets its verdict and its spans are exported, the parent's
in-flight sessions do not leak into the child, and a lock some other thread held at the moment
of the fork does not deadlock the child.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel_agentguard as ag
from otel_agentguard import _fork, _internal_errors, guard
from otel_agentguard import attributes as A
from otel_agentguard.instrumentation.openai_agents import _registration
from otel_agentguard.judge import session_judge as judge
from otel_agentguard.judge.fingerprints import canonical as fingerprint
from otel_agentguard.live import providers as _providers
from otel_agentguard.live import registry as _registry
from otel_agentguard.live import session as live_session
from otel_agentguard.testing import GuardedTracing

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
CHILD_DEADLINE_S = 2.0


def in_child(body: Callable[[], dict]) -> dict:
    """Fork; run ``body`` in the child (killed after CHILD_DEADLINE_S: a deadlock); its JSON result."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 0
        try:
            os.close(read_end)
            signal.setitimer(signal.ITIMER_REAL, CHILD_DEADLINE_S)  # default action: terminate
            result = body()
            signal.setitimer(signal.ITIMER_REAL, 0)
            os.write(write_end, json.dumps(result).encode())
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write_end, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_end)
    chunks = []
    while chunk := os.read(read_end, 65536):
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"deadlock": True, "signal": os.WTERMSIG(status)}
    return json.loads(b"".join(chunks) or b"{}")


@contextmanager
def held_by_another_thread(lock) -> Iterator[None]:
    """``lock`` acquired by a helper thread for the duration of the block."""
    taken, done = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            done.wait(10)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(5), "the helper thread never took the lock"
    try:
        yield
    finally:
        done.set()
        thread.join()


def run_session(tracing: GuardedTracing, session_id: str, repeats: int = 3) -> ag.Verdict:
    @ag.tool(tracer_provider=tracing.tracer_provider)
    def lookup(order: str) -> dict:
        return {"order": order, "state": "stalled"}

    with tracing.session(session_id) as handle:
        for _ in range(repeats):
            lookup("A1")
        tracing.record_model_call()
    return handle.verdict


@pytest.fixture
def tracing() -> Iterator[GuardedTracing]:
    """The guard and, as in production, a batch processor in front of an exporter."""
    with GuardedTracing() as guarded:
        guarded.batch_exporter = InMemorySpanExporter()
        guarded.tracer_provider.add_span_processor(BatchSpanProcessor(guarded.batch_exporter, schedule_delay_millis=10))
        yield guarded


def test_a_forked_child_judges_its_own_sessions_and_not_the_parents(tracing):
    # The parent is mid-session when it forks (a worker forked while a request is in flight).
    parent_session = tracing.session("parent-run")
    parent_session.__enter__()
    tracing.record_model_call(tool_calls=1)
    in_flight = tracing.tracer.start_span("execute_tool lookup", attributes={
        A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "lookup"})
    assert "parent-run" in tracing.processor.live_session_ids()

    def child() -> dict:
        inherited = tracing.processor.live_session_ids()
        # The parent's in-flight call, ended in the child (the copied span object), is not judged there.
        in_flight.end()
        straggler_judged = "parent-run" in tracing.processor.live_session_ids()
        verdict = run_session(tracing, "child-run")
        tracing.tracer_provider.force_flush()
        exported = [s.name for s in tracing.batch_exporter.get_finished_spans()
                    if s.attributes.get(A.SESSION_ID) == "child-run"]
        return {"inherited": inherited, "straggler_judged": straggler_judged, "stop_reason": verdict.stop_reason,
                "steps": verdict.steps, "exported": sorted(exported)}

    result = in_child(child)
    assert result == {"inherited": [], "straggler_judged": False, "stop_reason": "tool_loop", "steps": 4,
                      "exported": sorted(["invoke_agent"] + ["execute_tool lookup"] * 3 + ["chat gpt-4o"])}

    # The parent's run goes on, unaware of the child's.
    in_flight.end()
    parent_session.__exit__(None, None, None)
    assert parent_session.verdict.stop_reason == "abandoned"  # no final answer
    assert (parent_session.verdict.model_calls, parent_session.verdict.steps) == (1, 1)
    assert "child-run" not in tracing.verdicts
    assert run_session(tracing, "parent-after").stop_reason == "tool_loop"


def test_a_session_store_lock_held_at_fork_does_not_deadlock_the_child(tracing):
    with held_by_another_thread(tracing.processor._store._lock):  # noqa: SLF001
        result = in_child(lambda: {"stop_reason": run_session(tracing, "child-run").stop_reason})
    assert result == {"stop_reason": "tool_loop"}


def test_the_sequence_numbering_lock_held_at_fork_does_not_deadlock_the_child(tracing):
    with held_by_another_thread(live_session._numbering):  # noqa: SLF001
        result = in_child(lambda: {"stop_reason": run_session(tracing, "child-run").stop_reason})
    assert result == {"stop_reason": "tool_loop"}


MODULE_LOCKS = [
    (_internal_errors, "_lock"), (_registry, "_lock"), (live_session, "_numbering"), (_providers, "_lock"),
    (guard, "_lock"), (fingerprint, "_key_lock"), (judge, "_shared_probes_lock"), (_registration, "_lock"),
]


@pytest.mark.parametrize(("module", "name"), MODULE_LOCKS, ids=[f"{m.__name__}.{n}" for m, n in MODULE_LOCKS])
def test_every_module_lock_is_free_in_a_forked_child(module, name):
    def child() -> dict:
        lock = getattr(module, name)
        acquired = lock.acquire(timeout=0.5)
        if acquired:
            lock.release()
        return {"acquired": acquired, "kind": type(lock).__name__}

    held = getattr(module, name)
    with held_by_another_thread(held):
        result = in_child(child)
    assert result == {"acquired": True, "kind": type(held).__name__}  # an RLock stays re-entrant


def test_no_module_lock_is_left_out_of_the_renewal():
    lock_types = (type(threading.Lock()), type(threading.RLock()))
    found = set()
    for info in pkgutil.walk_packages(ag.__path__, "otel_agentguard."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # runs the command line
        module = importlib.import_module(info.name)
        found |= {(info.name, name) for name, value in vars(module).items() if isinstance(value, lock_types)}
    assert len(found) >= len(MODULE_LOCKS)
    assert found <= _fork.RENEWED
    assert {(module.__name__, name) for module, name in MODULE_LOCKS} == found


def test_the_internal_errors_lock_held_at_fork_does_not_deadlock_the_child():
    def child() -> dict:
        _internal_errors.report("fork.check")
        return {"counted": _internal_errors.counts().get("fork.check", 0)}

    before = _internal_errors.counts().get("fork.check", 0)
    with held_by_another_thread(_internal_errors._lock):  # noqa: SLF001
        result = in_child(child)
    assert result == {"counted": before + 1}


def test_the_registry_lock_held_at_fork_does_not_deadlock_the_child(tracing):
    with held_by_another_thread(_registry._lock):  # noqa: SLF001
        result = in_child(lambda: {"stop_reason": run_session(tracing, "child-run").stop_reason})
    assert result == {"stop_reason": "tool_loop"}


def test_the_policy_cache_lock_held_at_fork_does_not_deadlock_the_child(tracing):
    def child() -> dict:
        tool = ag.tool(lambda order: order, name=f"new-tool-{time.time_ns()}", tracer_provider=tracing.tracer_provider)
        with tracing.session("child-run"):
            tool("A1")
        return {"ok": True}

    # The fingerprinter cache takes no lock (dict.setdefault), so a thread filling it at fork
    # time cannot leave the child stuck; hammer it from another thread while forking.
    stop = threading.Event()

    def fill() -> None:
        count = 0
        while not stop.is_set():
            tracing.processor.policy.fingerprinter(f"parent-tool-{count % 5000}")
            count += 1

    filler = threading.Thread(target=fill, daemon=True)
    filler.start()
    try:
        results = [in_child(child) for _ in range(5)]
    finally:
        stop.set()
        filler.join(5)
    assert results == [{"ok": True}] * 5
    assert not hasattr(tracing.processor.policy, "_lock")
