"""Run by tests/test_packaging.py inside a fresh venv that has only the built wheel: every module of
the package imports (save those that need an extra or a framework), a live agent is judged, and a
recorded trace replays. Prints the two stop reasons on its last line."""

from __future__ import annotations

import importlib
import io
import json
import pkgutil
import sys
from contextlib import redirect_stdout

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import otel_agentguard as ag
from otel_agentguard.replay.cli import run

# Extras, and the frameworks the instrumentors patch: a fresh install has none of them.
OPTIONAL = {"aiohttp", "anthropic", "agents", "google", "grpc", "langchain_core", "mcp", "msgspec", "openai",
            "opentelemetry.proto", "opentelemetry.exporter", "orjson", "yaml"}

for module in pkgutil.walk_packages(ag.__path__, "otel_agentguard."):
    if module.name.endswith(".__main__"):
        continue  # importing it runs the command
    try:
        importlib.import_module(module.name)
    except ModuleNotFoundError as exc:
        if not any(exc.name == name or (exc.name or "").startswith(name + ".") for name in OPTIONAL):
            raise

trace.set_tracer_provider(TracerProvider())
ag.install()


@ag.tool
def query_logistics(order: str) -> dict[str, str]:
    return {"order": order, "state": "stalled at hub"}


with ag.session("parcel-42", agent_name="support") as session:
    for _ in range(3):
        query_logistics("A1001")
live = session.verdict.stop_reason

with redirect_stdout(io.StringIO()) as out:
    code = run(["replay", "--format", "json", sys.argv[1]])
assert code == 0, out.getvalue()[:500]
replayed = json.loads(out.getvalue())["sessions"][0]["stop_reason"]
print(f"Python {sys.version.split()[0]}")
print(live, replayed)
