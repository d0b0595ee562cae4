"""docs/policy.md is generated from the table the parser reads (otel_agentguard.judge.policy.KEYS), and
the parser, the Profile defaults and that table agree: a key cannot be added, dropped or given a
new default in one place only."""

from __future__ import annotations

import dataclasses
import runpy
from pathlib import Path

import pytest

from otel_agentguard.judge.policy import (
    KEYS,
    KINDS,
    PROFILE_SECTION,
    Policy,
    PolicyError,
    Profile,
    keys_in,
    parse_policy,
)

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "policy_reference.py"

# A valid value of each kind, to prove the parser takes every key the table lists.
SAMPLES = {
    "string": '"x"', "strings": '["a"]', "bool": "true", "positive_int": "7", "threshold": "3",
    "positive_number": "1.5", "probe_list": '["cycle"]', "profile_name": '"default"',
    "effect": '"write"', "usd_per_mtok": "1.0", "patterns": '["done"]', "ladder": '["stop"]',
    "table": "{}",
}


def test_policy_page_is_up_to_date():
    script = runpy.run_path(str(SCRIPT))
    page = ROOT / "docs" / "policy.md"
    assert page.read_text(encoding="utf-8") == script["render"](), \
        "docs/policy.md is out of date: run python scripts/policy_reference.py"


def test_policy_page_lists_every_key_of_the_table():
    page = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
    for key in KEYS:
        assert f"| `{key.name}` | {KINDS[key.kind]} |" in page, key.path


def test_profile_fields_are_exactly_the_table_profile_keys_with_its_defaults():
    fields = {f.name: f.default for f in dataclasses.fields(Profile) if f.name != "name"}
    table = keys_in(PROFILE_SECTION)
    assert set(fields) == set(table)
    for name, key in table.items():
        expected = tuple(key.default) if isinstance(key.default, list) else key.default
        assert fields[name] == expected, name


def test_builtin_top_level_defaults_are_the_table_defaults():
    policy = parse_policy("")
    top = keys_in("")
    assert policy.version == top["version"].default
    assert policy.default_profile == top["default_profile"].default
    assert policy.finish_tool == top["finish_tool"].default
    assert policy.budget_note is top["budget_note"].default
    assert Policy.builtin().finish_tool == top["finish_tool"].default


CLAIMS_SAMPLES = {"classifier": '"json:loads"', "classifier_mode": '"confirm"', "classifier_timeout_ms": "100",
                  "judge_url": '"http://127.0.0.1:11434/v1"', "judge_model": '"small"', "judge_timeout_ms": "100",
                  "judge_calls_per_minute": "10", "judge_cache": "16"}


def _snippet(key) -> str:
    if key.section == "claims":  # the classifier's and the judge's options need a classifier or a judge
        needed = ("judge_url", "judge_model") if key.name.startswith("judge") else ("classifier",)
        names = dict.fromkeys((*needed, key.name))
        return "[claims]\n" + "".join(f"{name} = {CLAIMS_SAMPLES[name]}\n" for name in names)
    value = SAMPLES[key.kind]
    concrete = {"profiles.<profile>": "profiles.default", "tools.<tool>": "tools.t", "pricing.<model>": "pricing.m",
                "claims.<language>": "claims.en", "task_types": "task_types", "escalation": "escalation"}
    name = {"<task type>": "refund", "<category>": "write", "<probe>": "tool_loop"}.get(key.name, key.name)
    if key.section == "":
        return f"{name} = {value}\n"
    extra = "output_usd_per_mtok = 1.0\n" if name == "input_usd_per_mtok" else \
        "input_usd_per_mtok = 1.0\n" if name == "output_usd_per_mtok" else ""
    return f"[{concrete[key.section]}]\n{name} = {value}\n{extra}"


@pytest.mark.parametrize("key", KEYS, ids=[key.path for key in KEYS])
def test_the_parser_accepts_every_key_of_the_table(key):
    parse_policy(_snippet(key), source="p.toml")


@pytest.mark.parametrize("section", sorted({k.section for k in KEYS if not k.name.startswith("<")}))
def test_the_parser_rejects_a_key_the_table_does_not_list(section):
    concrete = {"": "", "profiles.<profile>": "[profiles.default]\n", "tools.<tool>": "[tools.t]\n",
                "pricing.<model>": "[pricing.m]\n", "claims": "[claims]\n"}[section]
    with pytest.raises(PolicyError, match="not_a_key: unknown key"):
        parse_policy(concrete + "not_a_key = 1\n", source="p.toml")


def test_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch):
    script = runpy.run_path(str(SCRIPT))
    stale = tmp_path / "policy.md"
    stale.write_text(script["render"]().replace("| `window` |", "| `windw` |"), encoding="utf-8")
    main = script["main"]
    main.__globals__["PAGE"] = stale
    assert main(["x", "--check"]) == 1
    stale.write_text(script["render"](), encoding="utf-8")
    assert main(["x", "--check"]) == 0
