"""SIGTERM at any moment: every busy enforce-mode process drains and exits cleanly.

The handler may run between any two bytecodes of the main thread, including
inside the guard's own locks; it must take none, or the process hangs forever.
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

    provider = TracerProvider()
    ag.install(tracer_provider=provider, mode="enforce")
    ag.drain_on_sigterm()
    tracer = provider.get_tracer("worker")

    @ag.tool(tracer_provider=provider)
    def lookup(n: int) -> dict:
        return {"n": n}

    print("ready", flush=True)
    n = 0
    try:
        while True:  # busy: every line below runs guard code under its locks
            with ag.session(f"s{n}"):
                for turn in range(8):
                    before_model_call()
                    record_model_call(tracer, tool_calls=1)
                    after_model_call()
                    lookup(n * 100 + turn)
            n += 1
    except ag.AgentStopped as stopped:
        print(stopped.stop_reason, flush=True)
        sys.exit(0)
    """
)

PROCESSES = 30


def test_sigterm_at_a_random_moment_drains_every_busy_process(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OTEL_AGENTGUARD_FINGERPRINT_KEY": "sigterm-test"}
    workers = [
        subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for _ in range(PROCESSES)
    ]
    try:
        for worker in workers:
            assert worker.stdout.readline().strip() == "ready"
        rnd = random.Random()
        for worker in workers:
            time.sleep(rnd.uniform(0, 0.05))  # a random moment of each one's busy loop
            worker.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20  # generous: 30 processes share two cores
        outcomes = []
        for worker in workers:
            try:
                out, err = worker.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                outcomes.append(("hung", ""))
                continue
            outcomes.append((worker.returncode, out.strip() or err[-500:]))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    assert [outcome for outcome in outcomes if outcome != (0, "drained")] == []
