"""What scripts/check-oldest-python.sh runs on Python 3.10: the package as a user installs it."""

from __future__ import annotations

import importlib
import importlib.util
import io
import pkgutil
import sys
from contextlib import redirect_stdout
from pathlib import Path

import otel_agentguard
from otel_agentguard.fingerprint import Fingerprinter
from otel_agentguard.replay.cli import run

OPTIONAL = {"aiohttp", "anthropic", "agents", "google", "grpc", "langchain_core", "mcp", "msgspec", "openai",
            "opentelemetry.proto", "orjson"}  # extras, and the frameworks the instrumentors patch
ROOT = Path(__file__).resolve().parent.parent

for module in pkgutil.walk_packages(otel_agentguard.__path__, "otel_agentguard."):
    if module.name.endswith(".__main__"):
        continue  # importing it runs the command
    try:
        importlib.import_module(module.name)
    except ModuleNotFoundError as exc:
        if not any(exc.name == name or (exc.name or "").startswith(name + ".") for name in OPTIONAL):
            raise
# Plain JSON (the C-encoder path) and a numeric string (the walker): key order never matters.
arguments = {"order": "A1", "amount": "12", "items": [{"sku": f"s-{i}", "price": 1.5} for i in range(20)]}
lookup = Fingerprinter("lookup")
assert lookup.arguments(arguments) == lookup.arguments(dict(reversed(arguments.items())))
with redirect_stdout(io.StringIO()) as out:
    code = run(["replay", "--format", "json", str(ROOT / "tests/data/foreign/traceloop-loop.jsonl")])
assert code == 0 and '"tool_loop"' in out.getvalue(), out.getvalue()[:500]
# Where the step reader, the judge's pass and the span paths were compiled, they take this Python's classes.
from otel_agentguard import judge, processor, steps  # noqa: E402  (after every module above imported)

assert importlib.util.find_spec("otel_agentguard._step_reader") is None or steps._compiled is not None
assert importlib.util.find_spec("otel_agentguard._judge_pass") is None or judge._compiled is not None
assert importlib.util.find_spec("otel_agentguard._span_paths") is None or (
    processor._compiled_start is not None and processor._compiled_end is not None)
print(f"Python {sys.version.split()[0]}: every module imports, fingerprints and replay work")
