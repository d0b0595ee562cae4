"""A real Prometheus, on loopback, scraping this package's metrics.

The test process runs scripted agent sessions through the real guard processor; its
metrics are served by opentelemetry-exporter-prometheus (prometheus_client's HTTP
server) and scraped every second by a Prometheus started here with the repository's
rule files. Then every PromQL expression of the dashboards and rule files runs against
Prometheus's HTTP API and must return the series the script implies.

The collector's spanmetrics connector cannot run here: SpanMetricsStandIn emits, from
the same spans, the metrics it would emit with collector-config/collector.yaml.

Sessions run in two phases. A counter series appears at its first value and rate() never
sees that first step, so phase 1 (one session of each kind) creates every series, and
phase 2 (20 sessions: 13 completed, 4 tool_loop, 1 fake_completion, 2 budget_exceeded)
is what the queries measure.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from obs_support import (
    RULE_FILES,
    SESSION_KINDS,
    ScriptedAgent,
    SpanMetricsStandIn,
    collector_configs,
    dashboard_queries,
    free_port,
    prometheus_metric_reader,
    require_binary,
    rule_queries,
    run_plan,
    spanmetrics_settings,
    variable_queries,
    wait_for,
)

from otel_agentguard.attributes import STOP_REASONS as A_STOP_REASONS

WARM_UP = {kind: 1 for kind in SESSION_KINDS}
PLAN = {"completed": 13, "tool_loop": 4, "fake_completion": 1, "budget_exceeded": 2}
SESSIONS = sum(PLAN.values())
LOOP_SHARE = PLAN["tool_loop"] / SESSIONS  # 0.2
BUDGET_SHARE = PLAN["budget_exceeded"] / SESSIONS  # 0.1 of sessions hit the steps budget
# increase() extrapolates a counter's history to the window's edges: by up to half a scrape
# interval at the start and one interval at the end. With about 10 seconds of history, counts
# come out up to ~20% high; shares much less, since both sides are extrapolated alike.
EXTRAPOLATION = 1.25
REL = 0.1
HISTORY_S = 8

# What each alert expression returns after the script: 20% loops over 20 sessions is
# above 5% (a pending page), the 7-day baseline is the same 20% (no jump), one fake
# completion, 10% of sessions over the steps budget.
ALERT_EXPECTED = {
    "AgentLoopRatioHigh": True,
    "AgentLoopRatioJump": False,
    "AgentFakeCompletion": True,
    "AgentBudgetExhaustion": True,
}
STARTUP_TIMEOUT_S = 30
SCRAPE_TIMEOUT_S = 30


@dataclass
class Live:
    url: str
    log: Path

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("/api/v1/query", query=expr)
        assert data["resultType"] in ("vector", "scalar"), data
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def values(self, expr: str, label: str | None = None) -> dict[Any, float]:
        return {(series["metric"].get(label) if label else None): float(series["value"][1])
                for series in self.query(expr)}

    def log_tail(self) -> str:
        lines = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        return "prometheus log (tail):\n" + "\n".join(lines[-30:])


@pytest.fixture(scope="module")
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Live:
    prometheus = require_binary("prometheus")
    PrometheusMetricReader = prometheus_metric_reader()
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry, start_http_server

    from otel_agentguard.live.processor import AgentGuardSpanProcessor

    workdir = tmp_path_factory.mktemp("prometheus")

    # The test process: guard + spanmetrics stand-in, metrics served on a loopback port.
    resource = Resource.create({"service.name": "agentguard-live-test"})
    registry = CollectorRegistry()
    meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)], resource=resource)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        AgentGuardSpanProcessor(None, "observe", tracer_provider=tracer_provider, meter_provider=meter_provider)
    )
    tracer_provider.add_span_processor(
        SpanMetricsStandIn(spanmetrics_settings(collector_configs()["collector.yaml"]), meter_provider)
    )
    metrics_port = free_port()
    served = start_http_server(metrics_port, addr="127.0.0.1", registry=registry)

    def stop_metrics() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()
        if isinstance(served, tuple):  # prometheus_client >= 0.20 returns (server, thread)
            served[0].shutdown()
            served[0].server_close()

    request.addfinalizer(stop_metrics)

    # A real Prometheus: 1s scrapes and rule evaluations, the repository's rule files.
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(path) for path in RULE_FILES],
        "scrape_configs": [{"job_name": "agentguard",
                            "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}],
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    log = workdir / "prometheus.log"
    with log.open("w") as log_handle:
        process = subprocess.Popen(
            [prometheus, f"--config.file={config_file}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
            stdout=log_handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )

    def stop_prometheus() -> None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    request.addfinalizer(stop_prometheus)
    stack = Live(f"http://127.0.0.1:{port}", log)

    def ready() -> bool:
        assert process.poll() is None, f"prometheus exited with {process.returncode}\n{stack.log_tail()}"
        with urllib.request.urlopen(f"{stack.url}/-/ready", timeout=2) as response:
            return response.status == 200

    wait_for(ready, STARTUP_TIMEOUT_S, "Prometheus to be ready", on_timeout=stack.log_tail)
    wait_for(lambda: stack.values('up{job="agentguard"}') == {None: 1.0}, SCRAPE_TIMEOUT_S,
             "the first scrape of the test process", on_timeout=stack.log_tail)

    agent = ScriptedAgent(tracer_provider)
    run_plan(agent, WARM_UP)
    warm = float(len(SESSION_KINDS))
    wait_for(lambda: stack.values("sum(agentguard_sessions_total)") == {None: warm}, SCRAPE_TIMEOUT_S,
             "the phase-1 series in Prometheus", on_timeout=stack.log_tail)
    time.sleep(HISTORY_S)  # flat samples before phase 2: keeps increase()'s extrapolation small

    run_plan(agent, PLAN)
    wait_for(lambda: stack.values("sum(agentguard_sessions_total)") == {None: warm + SESSIONS},
             SCRAPE_TIMEOUT_S, "the phase-2 counts in Prometheus", on_timeout=stack.log_tail)
    # The rules have caught up once the recording rules count the 20 sessions and an
    # alert evaluation after that has seen them (the two groups run independently).
    wait_for(lambda: stack.values("agentguard_profile:agentguard_sessions:increase1h").get(None, 0) >= SESSIONS,
             SCRAPE_TIMEOUT_S, "the recording rules", on_timeout=stack.log_tail)
    wait_for(lambda: stack.query('ALERTS{alertname="AgentLoopRatioHigh"}'),
             SCRAPE_TIMEOUT_S, "the alert rules", on_timeout=stack.log_tail)
    # The 7-day baseline averages every hourly sample recorded so far, those taken while phase 2
    # was half scraped too (completed sessions counted, loops not yet): it settles as later samples
    # outweigh them, a few evaluations after the hourly series themselves.
    wait_for(lambda: _settled(stack.values("agentguard_profile:agentguard_loop_sessions:ratio7d", "agentguard_profile")),
             SCRAPE_TIMEOUT_S, "the 7-day baseline", on_timeout=stack.log_tail)
    return stack


def _settled(baseline: dict[Any, float]) -> bool:
    return baseline.get("default", 0.0) == pytest.approx(LOOP_SHARE, rel=REL)


# --- every expression --------------------------------------------------------------------------------
@pytest.mark.parametrize("query", dashboard_queries(), ids=lambda q: q.ident)
def test_every_dashboard_expression_returns_series(live, query):
    result = live.query(query.expr)
    assert result, f"{query.ident}: no series for {query.expr}"
    for series in result:
        assert not math.isnan(float(series["value"][1])), f"{query.ident}: NaN in {series}"


@pytest.mark.parametrize("query", rule_queries(), ids=lambda q: q.ident)
def test_every_rule_expression_returns_what_the_script_implies(live, query):
    result = live.query(query.expr)
    if query.record:
        assert result, f"recording rule {query.record}: no series"
        recorded = live.query(query.record)
        assert recorded, f"{query.record} was never written by the rule evaluation"
        assert {frozenset(s["metric"].items()) for s in recorded} >= {
            frozenset({**s["metric"], "__name__": query.record}.items()) for s in result}
    else:
        assert query.alert in ALERT_EXPECTED, f"{query.alert}: add what the script implies to ALERT_EXPECTED"
        assert bool(result) is ALERT_EXPECTED[query.alert], f"{query.alert}: {result}"


def test_template_variables_list_the_profile(live):
    for metric, label in variable_queries():
        values = live.api(f"/api/v1/label/{label}/values", **{"match[]": metric})
        assert values == ["default"]


# --- the values that matter ---------------------------------------------------------------------------
def _dashboard_expr(title: str, ref: str = "A") -> str:
    for query in dashboard_queries():
        if f" {title} [{ref}]" in query.ident:
            return query.expr
    raise KeyError(title)


def test_metric_names_as_prometheus_stores_them(live):
    names = set(live.values('count by (__name__) ({__name__=~"agentguard_.+"})', "__name__"))
    assert names >= {
        "agentguard_sessions_total", "agentguard_stalls_total",
        "agentguard_session_steps_bucket", "agentguard_session_steps_sum", "agentguard_session_steps_count",
        "agentguard_session_tokens_bucket", "agentguard_session_tokens_sum", "agentguard_session_tokens_count",
        "agentguard_session_duration_seconds_bucket", "agentguard_session_duration_seconds_sum",
        "agentguard_session_duration_seconds_count",
    }
    labels = set(live.query("agentguard_sessions_total")[0]["metric"])
    assert {"agentguard_stop_reason", "agentguard_profile"} <= labels


def test_loop_share(live):
    (share,) = live.values(_dashboard_expr("Loop share")).values()
    assert share == pytest.approx(LOOP_SHARE, rel=REL)
    recorded = live.values("agentguard_profile:agentguard_loop_sessions:ratio1h", "agentguard_profile")
    assert recorded == {"default": pytest.approx(LOOP_SHARE, rel=REL)}
    baseline = live.values("agentguard_profile:agentguard_loop_sessions:ratio7d", "agentguard_profile")
    assert baseline == {"default": pytest.approx(LOOP_SHARE, rel=REL)}


def test_session_counts(live):
    (sessions,) = live.values(_dashboard_expr("Sessions")).values()
    assert SESSIONS <= sessions <= SESSIONS * EXTRAPOLATION
    (fakes,) = live.values(_dashboard_expr("Fake completions")).values()
    assert fakes == PLAN["fake_completion"]
    (over_budget,) = live.values(_dashboard_expr("Over budget")).values()
    assert over_budget == PLAN["budget_exceeded"]


def test_share_of_answers_checked_for_claims(live):
    # Every answer of the script is one the rules read (no text in another language): all checked,
    # under the label value Prometheus stores for the boolean attribute.
    (share,) = live.values(_dashboard_expr("Answers checked for claims")).values()
    assert share == pytest.approx(1.0)
    labels = live.values("sum by (agentguard_claims_checked) (agentguard_final_answers_total)", "agentguard_claims_checked")
    assert set(labels) == {"true", "false"} and labels["false"] == 0


def _nonzero(values):
    # The guard starts every series of a profile at zero (so rate() sees the first increase);
    # the panels show those as 0.
    return {key: value for key, value in values.items() if value}


def test_stop_reason_shares(live):
    shares = live.values(_dashboard_expr("Stop reason share over time"), "agentguard_stop_reason")
    assert set(shares) == set(A_STOP_REASONS)
    shares = _nonzero(shares)
    assert set(shares) == set(PLAN)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["tool_loop"] == pytest.approx(LOOP_SHARE, rel=2 * REL)
    assert shares["completed"] > shares["tool_loop"] > shares["fake_completion"]


def test_stalls_and_budget_kinds(live):
    assert set(_nonzero(live.values(_dashboard_expr("Stalls by probe"), "agentguard_probe"))) == {
        "tool_loop", "fake_completion", "budget_exceeded"}
    kinds = _nonzero(live.values(_dashboard_expr("Budget kinds hit"), "agentguard_budget_kind"))
    assert set(kinds) == {"steps"}
    assert PLAN["budget_exceeded"] <= kinds["steps"] <= PLAN["budget_exceeded"] * EXTRAPOLATION


def test_per_session_distributions(live):
    for title in ("Steps per session", "Tokens per session", "Session duration"):
        p50, p90, p99 = (live.values(_dashboard_expr(title, ref))[None] for ref in "ABC")
        assert 0 < p50 <= p90 <= p99, title
    steps = live.values(_dashboard_expr("p90 steps by stop reason"), "agentguard_stop_reason")
    assert steps["budget_exceeded"] > steps["tool_loop"] > steps["completed"]


def test_trace_derived_panels(live):
    events = live.values(_dashboard_expr("Stall events by probe (from spans)"), "agentguard_probe")
    assert set(events) == {"tool_loop", "fake_completion", "budget_exceeded"}
    spans = live.values(_dashboard_expr("Session spans by stop reason (from spans)"), "agentguard_stop_reason")
    assert set(spans) == set(PLAN)
    tools = live.values(_dashboard_expr("Top tools by calls (from spans)"), "gen_ai_tool_name")
    assert set(tools) == {"get_order", "query_logistics"}


def test_alert_states(live):
    expected = {
        ("AgentFakeCompletion", "firing"),  # no `for`
        ("AgentLoopRatioHigh", "pending"),  # `for: 10m`
        ("AgentBudgetExhaustion", "pending"),  # `for: 15m`
    }

    def states() -> set[tuple[str, str]]:
        return {(a["labels"]["alertname"], a["state"]) for a in live.api("/api/v1/alerts")["alerts"]}

    # Alert rules run once a second, apart from the recording rules they read: allow a few rounds.
    wait_for(lambda: states() == expected, SCRAPE_TIMEOUT_S, f"alert states {sorted(expected)}",
             on_timeout=lambda: f"last seen: {sorted(states())}")
