"""prometheus/: `promtool check rules` and `promtool test rules` on the rule files, plus
what every alert must carry.

The unit tests (prometheus/tests/*.test.yaml) show each alert firing and not firing:
2% loops does not page, 10% does, 10% of a few sessions does not, a jump against the
7-day baseline opens a ticket, any fake completion pages, budget exhaustion by kind.
"""

from __future__ import annotations

import subprocess

import pytest
from obs_support import PROMETHEUS_DIR, RULE_FILES, RULE_TEST_FILES, load_yaml, require_binary, rules


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=PROMETHEUS_DIR)


def test_rule_files_exist():
    assert RULE_FILES and RULE_TEST_FILES


def test_promtool_check_rules():
    promtool = require_binary("promtool")
    result = _run([promtool, "check", "rules", *map(str, RULE_FILES)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", RULE_TEST_FILES, ids=lambda path: path.name)
def test_promtool_test_rules(test_file):
    promtool = require_binary("promtool")
    result = _run([promtool, "test", "rules", str(test_file)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_example_prometheus_config_is_valid():
    promtool = require_binary("promtool")
    result = _run([promtool, "check", "config", str(PROMETHEUS_DIR / "prometheus.yml")])
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_severity_summary_description_and_runbook():
    alerts = [rule for rule in rules() if "alert" in rule]
    assert {a["alert"] for a in alerts} == {
        "AgentLoopRatioHigh", "AgentLoopRatioJump", "AgentFakeCompletion", "AgentBudgetExhaustion"}
    for alert in alerts:
        assert alert["labels"]["severity"] in ("page", "ticket"), alert["alert"]
        annotations = alert["annotations"]
        for key in ("summary", "description", "runbook", "runbook_url"):
            assert annotations.get(key, "").strip(), f"{alert['alert']}: no {key}"
        anchor = annotations["runbook_url"].rsplit("#", 1)[-1]
        readme = (PROMETHEUS_DIR / "README.md").read_text(encoding="utf-8").lower()
        assert f"### {anchor}" in readme.replace("`", ""), f"README.md has no section for {alert['alert']}"


def test_every_alert_is_unit_tested_firing_and_not_firing():
    fired: dict[str, set[bool]] = {}
    for path in RULE_TEST_FILES:
        for case in load_yaml(path)["tests"]:
            for check in case.get("alert_rule_test", []):
                fired.setdefault(check["alertname"], set()).add(bool(check.get("exp_alerts")))
    for alert in (rule["alert"] for rule in rules() if "alert" in rule):
        assert fired.get(alert) == {True, False}, f"{alert}: tests show it {sorted(fired.get(alert, set()))}"
