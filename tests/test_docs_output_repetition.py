"""docs/output-repetition.md: every Python block runs and prints what the page says it prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import parse_policy

PAGE = Path(__file__).resolve().parent.parent / "docs" / "output-repetition.md"
TEXT = PAGE.read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", TEXT, re.S)
SAYS = re.findall(r"(?:It|This) prints `([^`]+)`", TEXT)


def test_the_page_has_examples_and_says_what_they_print():
    assert len(BLOCKS) == len(SAYS) == 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_python_block_runs_and_prints_what_the_page_says(index):
    out = io.StringIO()
    namespace: dict = {}
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(BLOCKS[index], f"{PAGE.name}[{index}]", "exec"), namespace)
    finally:
        OpenAIInstrumentor().uninstrument()
        if "provider" in namespace:
            namespace["provider"].shutdown()  # unregisters the example's guard from this process
    assert out.getvalue().strip() == SAYS[index]


def test_the_toml_block_is_a_valid_policy():
    [toml] = re.findall(r"```toml\n(.*?)```", TEXT, re.S)
    policy = parse_policy(toml)
    assert policy.profiles["poetry"].output_max_repeats == 8
    assert policy.escalation["output_repetition"] == ("stop",)
