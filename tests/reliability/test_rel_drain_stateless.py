"""SIGTERM drain reaches its cut point when the agent re-prompts without its history, and has a
deadline when it cannot find one.

A stateless agent sends each turn a fresh request: the tool results go into a new user
message, never as tool messages answering the model's calls. Such a request answers none of
the calls the last turn asked for, which is also what a sub-agent's first request inside a tool
the guard cannot see looks like. While draining, a request that carries no tool result at all,
made outside every tool once each asked-for call has run, is the agent's own turn: a cut point.
A session that never shows one (its tools are invisible to the guard) stops at its next model
call once the drain deadline has passed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

WORKER = textwrap.dedent(
    """
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    import otel_agentguard as ag
    from otel_agentguard.live.hooks import after_model_call, before_model_call
    from otel_agentguard.testing import record_model_call

    WORKLOAD, VISIBLE = sys.argv[1], sys.argv[2] == "visible"
    provider = TracerProvider()
    ag.install(tracer_provider=provider, mode="enforce")
    ag.drain_on_sigterm()
    tracer = provider.get_tracer("worker")

    def lookup(n):
        return {"n": n}

    if VISIBLE:
        lookup = ag.tool(tracer_provider=provider)(lookup)
    # (a new session's first call is a cut point: with invisible tools, one endless session)
    STEPS = 200 if VISIBLE else 10**9
    sub_agent = provider.get_tracer("another.instrumentation")

    print("ready", flush=True)
    n = 0
    try:
        while True:
            with ag.session(f"s{n}"):
                for step in range(STEPS):
                    if WORKLOAD == "with-sub-agents" and step % 20:
                        # a sub-agent's call, recorded by another instrumentation: no hook of ours
                        record_model_call(sub_agent, tool_calls=0)
                        continue
                    before_model_call(answered_ids=frozenset())  # stateless: no tool message
                    record_model_call(tracer, tool_calls=1)
                    after_model_call(tool_calls=1, call_ids=(f"call-{step}",))
                    lookup(step)
            n += 1
    except ag.AgentStopped as stopped:
        print(stopped.stop_reason, "deadline" if "deadline" in stopped.breakpoint["detail"] else "cut point",
              flush=True)
        sys.exit(0)
    """
)


def drain(tmp_path, workload: str, tools: str, processes: int, deadline_s: str = "20") -> tuple[list, float]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OTEL_AGENTGUARD_FINGERPRINT_KEY": "drain-test",
           "OTEL_AGENTGUARD_DRAIN_DEADLINE_S": deadline_s}
    workers = [subprocess.Popen([sys.executable, str(script), workload, tools], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env) for _ in range(processes)]
    outcomes = []
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready", worker.stderr.read()[-2000:]
        rnd = random.Random()
        started = time.monotonic()
        for worker in workers:
            time.sleep(rnd.uniform(0, 0.02))  # a random moment of each one's busy loop
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                out, err = worker.communicate(timeout=max(started + 10 - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                outcomes.append(("still running 10 s after SIGTERM", ""))
                continue
            outcomes.append((worker.returncode, out.strip() or err[-500:]))
        return outcomes, time.monotonic() - started
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def test_stateless_agents_drain_at_their_next_own_call(tmp_path):
    outcomes, _ = drain(tmp_path, "own-calls-only", "visible", 60)
    assert [o for o in outcomes if o != (0, "drained cut point")] == []


def test_stateless_agents_with_sub_agent_calls_between_drain_at_their_next_own_call(tmp_path):
    outcomes, _ = drain(tmp_path, "with-sub-agents", "visible", 60)
    assert [o for o in outcomes if o != (0, "drained cut point")] == []


def test_a_drain_that_finds_no_cut_point_stops_at_its_deadline(tmp_path):
    """Tools the guard cannot see: a fresh request may be a sub-agent's inside one, so no cut
    point is taken; the deadline stops each session at its next model call anyway."""
    outcomes, _ = drain(tmp_path, "own-calls-only", "invisible", 20, deadline_s="2")
    assert [o for o in outcomes if o != (0, "drained deadline")] == []
