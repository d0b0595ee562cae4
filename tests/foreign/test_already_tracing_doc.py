"""docs/already-tracing.md: every example runs, and says what the guard finds."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from foreign_agents import FOREIGN_PYTHON, MISSING

DOC = Path(__file__).resolve().parents[2] / "docs" / "already-tracing.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
AGENT, EXAMPLES = BLOCKS[0], BLOCKS[1:]



def test_the_doc_has_an_example_per_instrumentation():
    assert AGENT.startswith("# agent.py")
    imported = [re.search(r"^from (opentelemetry\.instrumentation\.\w+|openinference\S*|pydantic_ai) import", block, re.M)
                for block in EXAMPLES]
    assert [m[1] if m else None for m in imported] == [
        "opentelemetry.instrumentation.openai_v2", "opentelemetry.instrumentation.openai", "openinference.instrumentation",
        "pydantic_ai",
    ]


@pytest.mark.skipif(FOREIGN_PYTHON is None, reason=MISSING)
@pytest.mark.parametrize("example", EXAMPLES, ids=["openai-v2", "openllmetry", "openinference", "pydantic-ai"])
def test_example_runs_and_finds_the_loop(example, tmp_path):
    (tmp_path / "agent.py").write_text(AGENT, encoding="utf-8")
    (tmp_path / "main.py").write_text(example, encoding="utf-8")
    done = subprocess.run([FOREIGN_PYTHON, "main.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "tool_loop"
