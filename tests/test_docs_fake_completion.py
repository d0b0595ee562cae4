"""docs/fake-completion.md runs: its policies parse, its classifiers work, its console output is real."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from otel_agentguard.judge.policy import parse_policy
from otel_agentguard.scripted_model import ScriptedModelServer, Turn

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "fake-completion.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", DOC, re.DOTALL)


def blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCKS if lang == language]


def python_module(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (body,) = [b for b in blocks("python") if b.startswith(f"# {name}.py")]
    (tmp_path / f"{name}.py").write_text(body, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def test_every_toml_block_is_a_valid_policy_once_its_classifier_exists(tmp_path, monkeypatch) -> None:
    (tmp_path / "my_claims.py").write_text("def classify(text, found):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert len(blocks("toml")) == 4
    for body in blocks("toml"):
        parse_policy(body, source="docs/fake-completion.md")


def test_the_policy_vocabulary_example_works() -> None:
    policy = parse_policy(blocks("toml")[0])
    assert policy.claims.detect("Your booking is moved to December 9.") == ("write",)
    assert policy.claims.detect("I've sublet the flat for you.") == ("write",)
    assert policy.claims.detect("您的预订改期了。") == ("write",)
    french = parse_policy(blocks("toml")[1])
    assert french.claims.detect("J'ai remboursé votre commande.") == ("write",)


def test_the_model_judge_example_against_a_local_openai_compatible_server() -> None:
    (judge,) = [b for b in blocks("toml") if "judge_url" in b]
    replies = iter(["CLAIM", "NONE"])
    with ScriptedModelServer(lambda request: Turn.answer(next(replies))) as server:
        policy = parse_policy(judge.replace("http://127.0.0.1:11434/v1", server.openai_url))
        claimed = policy.claims.explain("He cancelado su pedido.", use_judge=True)
        honest = policy.claims.explain("Su pedido sigue en camino.", use_judge=True)
        english = policy.claims.explain("I've cancelled your order.", use_judge=True)
    assert (claimed.is_claim, claimed.decided_by) == (True, "model_judge")
    assert (honest.is_claim, honest.checked, honest.decided_by) == (False, True, "model_judge")
    assert english.decided_by == "rules"
    assert len(server.requests) == 2  # English is the rules' to read


def test_the_small_local_model_example_learns_from_labelled_answers(tmp_path, monkeypatch) -> None:
    module = python_module("small_claims_model", tmp_path, monkeypatch)
    assert module.classify("I've cancelled it.", ("write",)) is None  # untrained: the rules decide
    module.MODEL = module.train(ROOT / "tests" / "data" / "claims" / "en.tsv")
    assert module.classify("I have refunded the full amount to your card.", ()) == ["write"]
    assert module.classify("Would you like me to refund it?", ()) == []


def test_the_console_example_is_what_agentguard_claims_prints() -> None:
    (console,) = [b for b in blocks("console") if "agentguard claims" in b]
    command, _, expected = console.partition("\n")
    texts = re.findall(r'"([^"]*)"', command)
    run = subprocess.run([sys.executable, "-m", "otel_agentguard", "claims", *texts],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert run.stdout == expected
