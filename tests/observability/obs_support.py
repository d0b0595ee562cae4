"""Shared pieces of the observability tests: file locations, query extraction, the
scripted sessions, a spanmetrics stand-in and the Prometheus binaries.

Kept in one module (not a conftest) so each test file states plainly what it uses.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import SpanProcessor

REPO = Path(__file__).resolve().parents[2]
COLLECTOR_DIR = REPO / "collector-config"
DASHBOARD_DIR = REPO / "dashboards"
PROVISIONING_DIR = DASHBOARD_DIR / "provisioning"
PROMETHEUS_DIR = REPO / "prometheus"
RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.yaml"))
RULE_TEST_FILES = sorted((PROMETHEUS_DIR / "tests").glob("*.test.yaml"))

# What the Grafana variables stand for when a query is checked or run outside Grafana.
GRAFANA_VALUES = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "profile": ".*",
}
_GRAFANA_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


# --- files ------------------------------------------------------------------------------------
def load_yaml(path: Path) -> Any:
    with path.open(encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def collector_configs() -> dict[str, dict[str, Any]]:
    return {path.name: load_yaml(path) for path in sorted(COLLECTOR_DIR.glob("*.yaml"))}


def dashboards() -> dict[str, dict[str, Any]]:
    return {
        path.name: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(DASHBOARD_DIR.glob("*.json"))
    }


def iter_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, including the ones nested in (collapsed) rows."""
    for panel in panels:
        yield panel
        yield from iter_panels(panel.get("panels") or [])


def datasource_type(obj: dict[str, Any]) -> str | None:
    datasource = obj.get("datasource")
    return datasource.get("type") if isinstance(datasource, dict) else None


# --- queries ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    """One PromQL expression: where it comes from and its text (Grafana variables filled in)."""

    source: str  # "dashboard" or "rule"
    ident: str  # readable id for test reports
    expr: str
    raw: str
    rule: dict[str, Any] | None = None

    @property
    def alert(self) -> str | None:
        return (self.rule or {}).get("alert")

    @property
    def record(self) -> str | None:
        return (self.rule or {}).get("record")


def substitute(expr: str, values: dict[str, str] = GRAFANA_VALUES) -> str:
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no test value for Grafana variable ${name} in {expr!r}")
        return values[name]

    return _GRAFANA_VARIABLE.sub(replace, expr)


def dashboard_queries() -> list[Query]:
    queries = []
    for name, dashboard in dashboards().items():
        for panel in iter_panels(dashboard.get("panels", [])):
            for target in panel.get("targets", []):
                if datasource_type(target) == "prometheus" and target.get("expr"):
                    ident = f"{name}#{panel['id']} {panel.get('title', '')} [{target.get('refId')}]"
                    queries.append(Query("dashboard", ident, substitute(target["expr"]), target["expr"]))
    return queries


def variable_queries() -> list[tuple[str, str]]:
    """(metric, label) of every ``label_values(metric, label)`` template variable."""
    found = []
    for dashboard in dashboards().values():
        for variable in dashboard.get("templating", {}).get("list", []):
            if variable.get("type") != "query":
                continue
            query = variable.get("query")
            text = query.get("query") if isinstance(query, dict) else query
            match = re.fullmatch(r"\s*label_values\(\s*([\w:]+)\s*,\s*(\w+)\s*\)\s*", text or "")
            assert match, f"variable {variable.get('name')}: only label_values(metric, label) is supported, got {text!r}"
            found.append((match.group(1), match.group(2)))
    return found


def rules() -> list[dict[str, Any]]:
    found = []
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            for rule in group["rules"]:
                found.append({**rule, "_file": path.name, "_group": group["name"]})
    return found


def rule_queries() -> list[Query]:
    return [
        Query("rule", f"{rule['_file']}: {rule.get('record') or rule.get('alert')}", rule["expr"].strip(),
              rule["expr"], rule)
        for rule in rules()
    ]


_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_NAME = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool",
             "and", "or", "unless", "offset", "inf", "nan"}


def promql_refs(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) an expression refers to.

    A tokenizer, not a parser: enough for the expressions in this repository, and
    promtool checks their syntax separately.
    """
    text = _STRING.sub('""', expr)
    labels: set[str] = set()
    for match in _CLAUSE.finditer(text):
        labels |= {label.strip() for label in match.group(2).split(",") if label.strip()}
    text = _CLAUSE.sub(" ", text)
    names: set[str] = set()
    for match in _SELECTOR.finditer(text):
        if match.group(1) and match.group(1) not in _KEYWORDS:
            names.add(match.group(1))
        labels |= {m.group(1) for m in _MATCHER.finditer(match.group(2))}
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    names |= {m.group(1) for m in _NAME.finditer(text) if m.group(1).lower() not in _KEYWORDS}
    return names, labels


def sanitize_label(name: str) -> str:
    """OpenTelemetry attribute key -> Prometheus label name (both exporters do this)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


# --- the spanmetrics connector, as configured ----------------------------------------------------
_UNIT_SUFFIX = {"s": "seconds", "ms": "milliseconds"}
_CALLS, _DURATION, _EVENTS = "calls", "duration", "events"
SPANMETRICS_TYPES = ("spanmetrics", "span_metrics")


@dataclass(frozen=True)
class SpanMetricsSettings:
    namespace: str
    unit: str
    buckets_s: tuple[float, ...]
    dimensions: tuple[str, ...]
    event_dimensions: tuple[str, ...]

    def otel_name(self, metric: str) -> str:
        return f"{self.namespace}.{metric}" if self.namespace else metric

    def prometheus_series(self) -> dict[str, set[str]]:
        """Sample names the collector's Prometheus exporter writes, with their labels."""
        base = {"service_name", "span_name", "span_kind", "status_code", *map(sanitize_label, self.dimensions)}
        prefix = self.namespace.replace(".", "_") + "_" if self.namespace else ""
        series = {f"{prefix}{_CALLS}_total": set(base)}
        duration = f"{prefix}{_DURATION}_{_UNIT_SUFFIX[self.unit]}"
        series[f"{duration}_bucket"] = base | {"le"}
        series[f"{duration}_sum"] = set(base)
        series[f"{duration}_count"] = set(base)
        if self.event_dimensions:
            series[f"{prefix}{_EVENTS}_total"] = base | set(map(sanitize_label, self.event_dimensions))
        return series


def _duration_s(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(ms|s|m|h)", str(text))
    assert match, f"not a duration: {text!r}"
    return float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def spanmetrics_settings(config: dict[str, Any]) -> SpanMetricsSettings:
    connectors = config.get("connectors") or {}
    ids = [key for key in connectors if key.split("/")[0] in SPANMETRICS_TYPES]
    assert len(ids) == 1, f"expected one spanmetrics connector, found {ids}"
    settings = connectors[ids[0]] or {}
    histogram = settings.get("histogram") or {}
    events = settings.get("events") or {}
    return SpanMetricsSettings(
        namespace=settings.get("namespace", "traces.span.metrics"),
        unit=histogram.get("unit", "ms"),
        buckets_s=tuple(_duration_s(b) for b in (histogram.get("explicit") or {}).get("buckets", [])),
        dimensions=tuple(d["name"] for d in settings.get("dimensions") or []),
        event_dimensions=tuple(d["name"] for d in events.get("dimensions") or []) if events.get("enabled") else (),
    )


class SpanMetricsStandIn(SpanProcessor):
    """Emits, from finished spans, the metrics the collector's spanmetrics connector would
    emit with this repository's configuration: same names, same dimensions, same rule for
    a missing dimension (left out). Used where no collector binary can run, so the
    dashboards' spanmetrics queries meet the series they are written for. The connector
    reads a dimension from the span's attributes, then the event's (event dimensions),
    then the resource's; so does this.
    """

    def __init__(self, settings: SpanMetricsSettings, meter_provider: Any):
        self._settings = settings
        meter = meter_provider.get_meter("spanmetricsconnector")
        self._calls = meter.create_counter(settings.otel_name(_CALLS))
        self._duration = meter.create_histogram(
            settings.otel_name(_DURATION), unit=settings.unit,
            explicit_bucket_boundaries_advisory=[b if settings.unit == "s" else b * 1000 for b in settings.buckets_s],
        )
        self._events = meter.create_counter(settings.otel_name(_EVENTS)) if settings.event_dimensions else None

    def on_end(self, span: Any) -> None:
        attributes = dict(span.attributes or {})
        resource = dict(span.resource.attributes) if span.resource else {}
        labels = {
            "service.name": resource.get("service.name", ""),
            "span.name": span.name,
            "span.kind": f"SPAN_KIND_{span.kind.name}",
            "status.code": f"STATUS_CODE_{span.status.status_code.name}",
        }
        for name in self._settings.dimensions:
            value = attributes.get(name, resource.get(name))
            if value is not None:
                labels[name] = str(value)
        self._calls.add(1, labels)
        duration_s = max(0, (span.end_time or 0) - (span.start_time or 0)) / 1e9
        self._duration.record(duration_s if self._settings.unit == "s" else duration_s * 1000, labels)
        if self._events is None:
            return
        for event in span.events:
            event_labels = dict(labels)
            for name in self._settings.event_dimensions:
                value = attributes.get(name, (event.attributes or {}).get(name, resource.get(name)))
                if value is not None:
                    event_labels[name] = str(value)
            self._events.add(1, event_labels)


# --- scripted agent sessions -----------------------------------------------------------------------
class ScriptedAgent:
    """A support agent whose sessions end the way the test asks, through the real guard."""

    def __init__(self, tracer_provider: Any):
        import otel_agentguard as ag
        from otel_agentguard.testing import record_model_call

        self._ag = ag
        self._provider = tracer_provider
        self._tracer = tracer_provider.get_tracer("agentguard.observability-tests")
        self._model = lambda **kw: record_model_call(self._tracer, **kw)

        @ag.tool(tracer_provider=tracer_provider)
        def get_order(order: str) -> dict:
            return {"order": order, "state": "paid"}

        @ag.tool(tracer_provider=tracer_provider)
        def query_logistics(order: str) -> str:
            return "stalled"

        self._get_order = get_order
        self._query_logistics = query_logistics
        self.count = 0

    def run(self, kind: str) -> str:
        self.count += 1
        session_id = f"{kind}-{self.count}"
        with self._ag.session(session_id, agent_name="support", tracer_provider=self._provider) as session:
            getattr(self, f"_{kind}")(session_id)
        return session.verdict.stop_reason if session.verdict else "<no verdict>"

    def _completed(self, session_id: str) -> None:
        self._model(input_tokens=100, output_tokens=20, tool_calls=1)
        self._get_order(session_id)
        self._model(input_tokens=120, output_tokens=30)

    def _tool_loop(self, session_id: str) -> None:
        for _ in range(3):  # the same call, the same result: repeat_threshold 3 of the defaults
            self._model(input_tokens=100, output_tokens=10, tool_calls=1)
            self._query_logistics("A1")
        self._model(input_tokens=100, output_tokens=20)

    def _fake_completion(self, session_id: str) -> None:
        self._model(input_tokens=100, output_tokens=20, tool_calls=1)
        self._get_order(session_id)
        self._model(input_tokens=100, output_tokens=20, final_claims=("write",))  # no write tool ran

    def _budget_exceeded(self, session_id: str) -> None:
        for step in range(13):  # distinct calls, new results: only max_steps = 12 is crossed
            self._model(input_tokens=50, output_tokens=10, tool_calls=1)
            self._get_order(f"{session_id}-{step}")
        self._model(input_tokens=50, output_tokens=10)


SESSION_KINDS = ("completed", "tool_loop", "fake_completion", "budget_exceeded")


def run_plan(agent: ScriptedAgent, plan: dict[str, int]) -> None:
    for kind, count in plan.items():
        for _ in range(count):
            stop_reason = agent.run(kind)
            assert stop_reason == kind, f"scripted {kind} session ended as {stop_reason}"


def exporter_exposition(plan: dict[str, int] | None = None) -> dict[str, set[str]]:
    """Sample names and their labels, as opentelemetry-exporter-prometheus serves the
    guard's metrics after a few scripted sessions."""
    PrometheusMetricReader = prometheus_metric_reader()
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from otel_agentguard.live.processor import AgentGuardSpanProcessor

    registry = CollectorRegistry()
    meter_provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        AgentGuardSpanProcessor(None, "observe", tracer_provider=tracer_provider, meter_provider=meter_provider)
    )
    try:
        run_plan(ScriptedAgent(tracer_provider), plan or {kind: 1 for kind in SESSION_KINDS})
        text = generate_latest(registry).decode()
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


# --- binaries, packages and processes -------------------------------------------------------
def prometheus_metric_reader() -> type:
    """The PrometheusMetricReader class; a missing package is a failure, not a skip."""
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
    except ImportError as exc:
        pytest.fail(f"{exc}: install the test extras (opentelemetry-exporter-prometheus)", pytrace=False)
    return PrometheusMetricReader


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"`{name}` is not on PATH: run scripts/apt-install.sh prometheus promtool prometheus (Debian's prometheus package)")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2,
              on_timeout: Callable[[], str] | None = None) -> Any:
    """Poll until ``predicate()`` is truthy, for at most ``timeout`` seconds.

    An AssertionError from the predicate fails at once; other errors (connection refused
    while a server starts) count as "not yet".
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except AssertionError:
            raise
        except Exception as exc:  # deliberate: not up yet; keep polling, report the last error
            last_error = exc
        time.sleep(interval)
    detail = f" (last error: {last_error!r})" if last_error else ""
    extra = f"\n{on_timeout()}" if on_timeout else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{detail}{extra}")
