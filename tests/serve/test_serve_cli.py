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
