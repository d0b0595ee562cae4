"""dashboards/: Grafana dashboard JSON and provisioning files.

Structure (ids, data source variables, schema version, layout), every PromQL query
parsed by promtool, and the TraceQL panels reading attributes the guard really writes.
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import yaml
from obs_support import (
    PROVISIONING_DIR,
    SESSION_KINDS,
    ScriptedAgent,
    dashboard_queries,
    dashboards,
    datasource_type,
    iter_panels,
    load_yaml,
    require_binary,
    run_plan,
)

from otel_agentguard import attributes as A

DASHBOARDS = dashboards()
VARIABLE = re.compile(r"^\$\{?\w+\}?$")


@pytest.fixture(params=sorted(DASHBOARDS), ids=str)
def dashboard(request: pytest.FixtureRequest) -> dict[str, Any]:
    return DASHBOARDS[request.param]


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(iter_panels(dashboard["panels"]))


def _walk(node: Any, path: str = "$"):
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}.{key}", key, value
            yield from _walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _walk(value, f"{path}[{index}]")


def test_there_is_a_dashboard():
    assert DASHBOARDS, "no dashboards/*.json"


def test_current_schema_and_identity(dashboard):
    assert dashboard["schemaVersion"] >= 39
    assert dashboard.get("uid") and dashboard.get("title")
    assert dashboard.get("id") is None, "an exported id breaks provisioning into another Grafana"


def test_panel_ids_are_unique(dashboard):
    ids = [panel["id"] for panel in _panels(dashboard)]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {sorted(i for i in ids if ids.count(i) > 1)}"


def test_panels_fit_the_grid_without_overlapping(dashboard):
    cells: dict[tuple[int, int], int] = {}
    for panel in _panels(dashboard):
        pos = panel["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, f"panel {panel['id']} leaves the 24-column grid"
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"panels {cells[(x, y)]} and {panel['id']} overlap"
                cells[(x, y)] = panel["id"]


def test_every_data_source_is_a_template_variable(dashboard):
    for path, key, value in _walk(dashboard):
        if key != "datasource":
            continue
        uid = value.get("uid") if isinstance(value, dict) else value
        assert uid is None or VARIABLE.match(str(uid)), f"{path}: hard-coded data source {uid!r}"
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            assert isinstance(target.get("datasource"), dict), f"panel {panel['id']}: target without data source"
            assert VARIABLE.match(target["datasource"]["uid"]), f"panel {panel['id']}: {target['datasource']}"
            assert datasource_type(target) == datasource_type(panel), f"panel {panel['id']}: mixed data sources"


def test_data_source_variables(dashboard):
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["tempo"]["type"] == "datasource" and variables["tempo"]["query"] == "tempo"
    used = {target["datasource"]["uid"] for panel in _panels(dashboard) for target in panel.get("targets", [])}
    assert used == {"${datasource}", "${tempo}"}


def test_the_panels_the_issue_asks_for(dashboard):
    panels = {panel.get("title"): panel for panel in _panels(dashboard)}
    for title in ("Stop reason share over time", "Stalls by probe", "Sessions", "Loop share",
                  "Steps per session", "Tokens per session", "Session duration", "Session duration distribution",
                  "Budget kinds hit", "Recent stalled sessions", "Tools called in loop sessions",
                  "Top tools by calls (from spans)", "Answers checked for claims"):
        assert title in panels, f"no panel {title!r}"
    stalls = panels["Stalls by probe"]
    assert stalls["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
    assert "agentguard_stalls_total" in stalls["targets"][0]["expr"]
    assert any("histogram_quantile" in t["expr"] for t in panels["Steps per session"]["targets"])
    assert panels["Session duration distribution"]["type"] == "heatmap"
    assert panels["Loop share"]["fieldConfig"]["defaults"]["unit"] == "percentunit"


def test_every_promql_query_parses(tmp_path):
    promtool = require_binary("promtool")
    queries = dashboard_queries()
    assert queries
    groups = [{"name": f"q{index}", "rules": [{"record": f"dashboard:check_{index}", "expr": query.expr}]}
              for index, query in enumerate(queries)]
    rule_file = tmp_path / "dashboard-queries.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False), encoding="utf-8")
    result = subprocess.run([promtool, "check", "rules", str(rule_file)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        failing = [queries[int(i)].ident for i in re.findall(r'group "q(\d+)"', result.stdout + result.stderr)]
        pytest.fail(f"promtool rejects {failing}:\n{result.stdout}\n{result.stderr}")


# --- TraceQL ----------------------------------------------------------------------------------------
def _tempo_targets(dashboard: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(panel, target) for panel in _panels(dashboard) for target in panel.get("targets", [])
            if datasource_type(target) == "tempo"]


def test_traceql_table_of_stalled_sessions_links_to_the_trace(dashboard):
    tempo = _tempo_targets(dashboard)
    assert tempo, "no Tempo panel"
    for panel, target in tempo:
        assert target["queryType"] == "traceql" and target["query"].strip(), f"panel {panel['id']}"
        query = target["query"]
        assert query.count("{") == query.count("}") and query.count("(") == query.count(")")
        links = [link for override in panel["fieldConfig"]["overrides"]
                 if override["matcher"] == {"id": "byName", "options": "traceID"}
                 for prop in override["properties"] if prop["id"] == "links" for link in prop["value"]]
        assert links and "${__value.raw}" in links[0]["url"] and "${tempo}" in links[0]["url"]
    stalled = [t for p, t in tempo if p["title"] == "Recent stalled sessions"]
    assert stalled and f"span.{A.STOP_REASON}" in stalled[0]["query"]
    for normal in (A.COMPLETED, A.EXPLICIT_FINISH):
        assert normal in stalled[0]["query"]


def test_traceql_reads_attributes_the_guard_writes(dashboard):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel_agentguard.live.processor import AgentGuardSpanProcessor

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider.add_span_processor(AgentGuardSpanProcessor(None, "observe", tracer_provider=provider))
    try:
        run_plan(ScriptedAgent(provider), {kind: 1 for kind in SESSION_KINDS})
    finally:
        provider.shutdown()
    written = {key for span in exporter.get_finished_spans() for key in (span.attributes or {})}
    for panel, target in _tempo_targets(dashboard):
        for attribute in re.findall(r"\bspan\.([\w.]+)", target["query"]):
            assert attribute in written, f"panel {panel['id']}: no span carries {attribute}"


# --- provisioning -----------------------------------------------------------------------------------
def test_provisioned_data_sources():
    files = sorted((PROVISIONING_DIR / "datasources").glob("*.yaml"))
    assert files
    sources = [source for path in files for source in load_yaml(path)["datasources"]]
    types = {source["type"] for source in sources}
    assert {"prometheus", "tempo"} <= types
    for source in sources:
        assert source["url"].startswith("${") or source["url"].startswith("http"), source


def test_provisioned_dashboards_provider():
    files = sorted((PROVISIONING_DIR / "dashboards").glob("*.yaml"))
    assert files
    for path in files:
        for provider in load_yaml(path)["providers"]:
            assert provider["type"] == "file" and provider["options"]["path"]


def test_the_stalled_share_counts_every_probe(dashboard):
    """A probe added to the guard must show up in the share of stalled sessions."""
    panels = {panel.get("title"): panel for panel in _panels(dashboard)}
    expr = panels["Stalled share"]["targets"][0]["expr"]
    matcher = re.search(r'agentguard_stop_reason=~\\?"([^"\\]+)\\?"', expr)
    assert matcher, expr
    assert set(matcher.group(1).split("|")) == set(A.PROBE_NAMES)
    for probe in A.PROBE_NAMES:
        assert probe in panels["Stalled share"]["description"]
