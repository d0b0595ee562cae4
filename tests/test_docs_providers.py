"""The Python examples of docs/providers-and-coexistence.md run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "providers-and-coexistence.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
EXPECTED_LAST_WORD = ["'invoke_agent']", "enforce", "tool_loop"]


def test_every_example_is_checked():
    assert len(BLOCKS) == len(EXPECTED_LAST_WORD)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index):
    if "logfire" in BLOCKS[index]:
        pytest.importorskip("logfire")
    done = subprocess.run([sys.executable, "-c", BLOCKS[index]], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == EXPECTED_LAST_WORD[index]
