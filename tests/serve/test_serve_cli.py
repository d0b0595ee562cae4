"""`agentguard serve` on the command line: bad options and busy ports are one-line errors, exit 2."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

pytest.importorskip("aiohttp")


def _serve(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-m", "otel_agentguard", "serve", "--grpc-listen", "off", *args],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", **env})


@pytest.mark.parametrize(("args", "env", "message"), [
    (("--listen", "nonsense"), {}, "agentguard: --listen: 'nonsense' is not HOST:PORT"),
    (("--profile", "nope"), {}, "agentguard: --profile: no profile named 'nope'"),
    ((), {"OTEL_TRACES_EXPORTER": "no_such_exporter"}, "agentguard: no traces exporter named 'no_such_exporter'"),
])
def test_bad_options_are_one_line_errors(args, env, message):
    done = _serve(*args, **env)
    assert done.returncode == 2
    assert done.stderr.startswith(message) and "Traceback" not in done.stderr


def test_a_busy_port_is_a_one_line_error():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _serve("--listen", f"127.0.0.1:{port}")
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "Traceback" not in done.stderr


def test_the_policy_file_from_the_environment_is_the_judges_policy(tmp_path):
    """The same policy file as everywhere: here a tool contract that makes get_order a write, so
    the answer claiming a refund after it is no fake completion; and a profile named by the variable."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from serve_support import emit_session, keeping_tracer, start_serve_process

    policy = tmp_path / "policy.toml"
    policy.write_text('version = "serve-test"\n[profiles.strict]\nmax_steps = 2\n'
                      '[tools.get_order]\neffect = "write"\n', encoding="utf-8")
    tracer, kept = keeping_tracer()
    emit_session(tracer, "wrote", "fake")
    emit_session(tracer, "long", "clean")
    serve = start_serve_process(tmp_path, env={"OTEL_AGENTGUARD_POLICY": str(policy),
                                               "OTEL_AGENTGUARD_PROFILE": "strict"})
    try:
        assert OTLPSpanExporter(endpoint=serve.url).export(kept).name == "SUCCESS"
    finally:
        code, err = serve.stop()
    assert code == 0, err
    verdicts = {v["agentguard.session.id"]: v for v in serve.verdicts()}
    assert verdicts["wrote"]["agentguard.stop_reason"] == "completed"
    assert verdicts["long"]["agentguard.stop_reason"] == "budget_exceeded"
    assert {v["agentguard.policy.version"] for v in verdicts.values()} == {"serve-test"}
    assert {v["agentguard.profile"] for v in verdicts.values()} == {"strict"}
