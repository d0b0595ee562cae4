"""collector-config/: every YAML file is a well-formed Collector configuration, and the
metric names the dashboards and rules query are the ones these components (and the
package's own Prometheus exporter) produce.

No Collector binary can be installed here, so structure is checked the way the
Collector's own config validation would: components defined and used, connectors wired
between pipelines of the right signal types.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import pytest
from obs_support import (
    COLLECTOR_DIR,
    SPANMETRICS_TYPES,
    collector_configs,
    dashboard_queries,
    exporter_exposition,
    promql_refs,
    rule_queries,
    rules,
    spanmetrics_settings,
    variable_queries,
)

from otel_agentguard import attributes as A

CONFIGS = collector_configs()
KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")
SIGNALS = ("traces", "metrics", "logs")

# Component types these files may use (a typo in a type is a startup error in the Collector).
# New names of the snake_case renames next to the older ones they replace.
KNOWN_TYPES = {
    "receivers": {"otlp"},
    "processors": {"memory_limiter", "batch", "tail_sampling"},
    "exporters": {"otlp", "otlp_grpc", "otlphttp", "otlp_http", "prometheus", "prometheusremotewrite",
                  "loadbalancing", "debug"},
    "connectors": {*SPANMETRICS_TYPES, "forward"},
    "extensions": {"health_check"},
}
# connector type -> (signals it takes as an exporter, signals it emits as a receiver);
# None means "the same signal it takes".
CONNECTOR_SIGNALS: dict[str, tuple[set[str], set[str] | None]] = {
    "spanmetrics": ({"traces"}, {"metrics"}),
    "span_metrics": ({"traces"}, {"metrics"}),
    "forward": (set(SIGNALS), None),
}


def _type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def _pipelines(config: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    return config["service"]["pipelines"]


def _signal(pipeline_id: str) -> str:
    return _type(pipeline_id)


@pytest.fixture(params=sorted(CONFIGS), ids=str)
def config(request: pytest.FixtureRequest) -> dict[str, Any]:
    return CONFIGS[request.param]


def test_the_expected_files_exist():
    assert {"collector.yaml", "collector-scaleout.yaml"} <= set(CONFIGS)
    assert (COLLECTOR_DIR / "README.md").is_file()


def test_every_pipeline_component_is_defined(config):
    for pipeline_id, pipeline in _pipelines(config).items():
        assert _signal(pipeline_id) in SIGNALS, f"{pipeline_id}: unknown signal type"
        assert pipeline.get("receivers"), f"{pipeline_id}: no receivers"
        assert pipeline.get("exporters"), f"{pipeline_id}: no exporters"
        for receiver in pipeline["receivers"]:
            assert receiver in (config.get("receivers") or {}) or receiver in (config.get("connectors") or {}), \
                f"{pipeline_id}: receiver {receiver} is not defined"
        for processor in pipeline.get("processors", []):
            assert processor in (config.get("processors") or {}), f"{pipeline_id}: processor {processor} is not defined"
        for exporter in pipeline["exporters"]:
            assert exporter in (config.get("exporters") or {}) or exporter in (config.get("connectors") or {}), \
                f"{pipeline_id}: exporter {exporter} is not defined"
    for extension in config["service"].get("extensions", []):
        assert extension in (config.get("extensions") or {}), f"extension {extension} is not defined"


def test_every_defined_component_is_used(config):
    pipelines = _pipelines(config).values()
    used_receivers = {r for p in pipelines for r in p.get("receivers", [])}
    used_processors = {r for p in pipelines for r in p.get("processors", [])}
    used_exporters = {r for p in pipelines for r in p.get("exporters", [])}
    for receiver in config.get("receivers") or {}:
        assert receiver in used_receivers, f"receiver {receiver} is defined but in no pipeline"
    for processor in config.get("processors") or {}:
        assert processor in used_processors, f"processor {processor} is defined but in no pipeline"
    for exporter in config.get("exporters") or {}:
        assert exporter in used_exporters, f"exporter {exporter} is defined but in no pipeline"
    for connector in config.get("connectors") or {}:
        assert connector in used_exporters, f"connector {connector} is never an exporter: nothing feeds it"
        assert connector in used_receivers, f"connector {connector} is never a receiver: its output goes nowhere"
    for extension in config.get("extensions") or {}:
        assert extension in config["service"].get("extensions", []), f"extension {extension} is not enabled"


def test_component_types_are_known(config):
    for kind in KINDS:
        for component_id in config.get(kind) or {}:
            assert _type(component_id) in KNOWN_TYPES[kind], f"{kind}: unknown component type in {component_id}"


def test_connectors_join_pipelines_of_the_right_signal_types(config):
    pipelines = _pipelines(config)
    for connector in config.get("connectors") or {}:
        takes, emits = CONNECTOR_SIGNALS[_type(connector)]
        fed_by = {_signal(pid) for pid, p in pipelines.items() if connector in p.get("exporters", [])}
        feeds = {_signal(pid) for pid, p in pipelines.items() if connector in p.get("receivers", [])}
        assert fed_by <= takes, f"{connector} takes {sorted(takes)}, but is the exporter of {sorted(fed_by)} pipelines"
        if emits is None:  # forward-like: each signal goes out as itself
            assert fed_by == feeds, f"{connector}: fed by {sorted(fed_by)} pipelines but feeds {sorted(feeds)}"
        else:
            assert feeds <= emits, f"{connector} emits {sorted(emits)}, but is the receiver of {sorted(feeds)} pipelines"


def test_memory_limiter_runs_first_and_batch_after_sampling(config):
    for pipeline_id, pipeline in _pipelines(config).items():
        processors = pipeline.get("processors", [])
        if "memory_limiter" in processors:
            assert processors[0] == "memory_limiter", f"{pipeline_id}: memory_limiter must come first"
        if "tail_sampling" in processors and "batch" in processors:
            assert processors.index("batch") > processors.index("tail_sampling"), \
                f"{pipeline_id}: batch before tail_sampling loses nothing but regroups spans twice"
        takes_outside_data = any(r in (config.get("receivers") or {}) for r in pipeline["receivers"])
        if takes_outside_data:
            assert "memory_limiter" in processors, f"{pipeline_id}: takes data in without memory_limiter"


def test_environment_variables_are_documented():
    readme = (COLLECTOR_DIR / "README.md").read_text(encoding="utf-8")
    for name, path_text in ((n, (COLLECTOR_DIR / n).read_text(encoding="utf-8")) for n in CONFIGS):
        for variable in re.findall(r"\$\{env:(\w+)", path_text):
            assert variable in readme, f"{name} reads ${{env:{variable}}}, README.md does not explain it"


# --- collector.yaml: what it must do --------------------------------------------------------------
MAIN = CONFIGS["collector.yaml"]


def test_spanmetrics_dimensions_and_event_dimensions():
    settings = spanmetrics_settings(MAIN)
    assert set(settings.dimensions) >= {A.STOP_REASON, A.PROFILE, A.GEN_AI_OPERATION_NAME, A.GEN_AI_TOOL_NAME}
    assert A.PROBE in settings.event_dimensions
    assert settings.unit in ("s", "ms"), "set histogram.unit: the default changes across Collector versions"
    assert A.SESSION_ID not in settings.dimensions, "a session id is never a metric label"
    assert settings.buckets_s == tuple(sorted(settings.buckets_s))


def test_spanmetrics_sees_every_span_before_sampling():
    pipelines = _pipelines(MAIN)
    feeding = [pid for pid, p in pipelines.items() if any(_type(e) in SPANMETRICS_TYPES for e in p["exporters"])]
    assert feeding, "no pipeline feeds spanmetrics"
    for pid in feeding:
        assert "tail_sampling" not in pipelines[pid].get("processors", []), \
            f"{pid} samples before spanmetrics: metrics would count only kept traces"
        assert any(r in MAIN["receivers"] for r in pipelines[pid]["receivers"]), f"{pid} does not take OTLP in"


def test_tail_sampling_keeps_every_session_that_did_not_finish_normally():
    sampling = MAIN["processors"]["tail_sampling"]
    policies = {policy["type"]: policy for policy in sampling["policies"]}
    condition = policies["ottl_condition"]["ottl_condition"]
    span_conditions = " ".join(condition["span"])
    assert f'attributes["{A.STOP_REASON}"] != nil' in span_conditions
    normal = set(re.findall(rf'attributes\["{re.escape(A.STOP_REASON)}"\] != "(\w+)"', span_conditions))
    assert normal == {A.COMPLETED, A.EXPLICIT_FINISH}
    assert f'name == "{A.STALL_EVENT}"' in " ".join(condition["spanevent"])
    # ... and a configurable share of the normal ones.
    percent = str(policies["probabilistic"]["probabilistic"]["sampling_percentage"])
    match = re.fullmatch(r"\$\{env:(\w+):-([\d.]+)\}", percent)
    assert match and 0 < float(match.group(2)) <= 100, f"sampling_percentage should be ${{env:NAME:-default}}: {percent}"


def test_tail_sampling_waits_for_sessions_that_last_minutes():
    sampling = MAIN["processors"]["tail_sampling"]
    wait = re.fullmatch(r"(?:\$\{env:\w+:-)?(\d+)([smh])\}?", str(sampling["decision_wait"]))
    assert wait, sampling["decision_wait"]
    decision_wait_s = int(wait.group(1)) * {"s": 1, "m": 60, "h": 3600}[wait.group(2)]
    assert decision_wait_s >= 300, "sessions last minutes: a 30s decision_wait decides before the session span ends"
    assert sampling["expected_new_traces_per_sec"] * decision_wait_s <= sampling["num_traces"], \
        "num_traces must hold every trace that arrives during decision_wait"
    cache = sampling["decision_cache"]
    assert cache["sampled_cache_size"] > sampling["num_traces"]
    assert cache["non_sampled_cache_size"] > sampling["num_traces"]


def test_exports_traces_over_otlp_and_metrics_to_prometheus():
    exporters = MAIN["exporters"]
    trace_exporters = [e for e in exporters if _type(e) in ("otlp", "otlp_grpc", "otlphttp", "otlp_http")]
    assert trace_exporters and all("${env:" in exporters[e]["endpoint"] for e in trace_exporters)
    assert any(_type(e) in ("prometheus", "prometheusremotewrite") for e in exporters)


# --- collector-scaleout.yaml: the front tier ------------------------------------------------------
FRONT = CONFIGS["collector-scaleout.yaml"]


def test_front_tier_routes_every_span_of_a_session_to_one_back_tier_collector():
    pipelines = _pipelines(FRONT)
    traces_exporters = {e for pid, p in pipelines.items() if _signal(pid) == "traces" for e in p["exporters"]}
    assert traces_exporters and all(_type(e) == "loadbalancing" for e in traces_exporters)
    for exporter_id in traces_exporters:
        exporter = FRONT["exporters"][exporter_id]
        key = exporter.get("routing_key", "traceID")
        assert key == "traceID" or (key == "attributes" and exporter.get("routing_attributes") == [A.SESSION_ID])
        assert "endpoint" not in exporter["protocol"]["otlp"], "the resolver sets each backend's endpoint"
        assert exporter["resolver"]
    for pid, pipeline in pipelines.items():
        assert "tail_sampling" not in pipeline.get("processors", []), "the front tier stays stateless"
        if _signal(pid) == "metrics":
            for exporter_id in pipeline["exporters"]:
                if _type(exporter_id) == "loadbalancing":
                    assert FRONT["exporters"][exporter_id].get("routing_key") not in (None, "traceID"), \
                        "traceID routing is invalid for metrics"


def test_back_tier_is_the_single_collector_config():
    # The scale-out's back tier runs collector.yaml as it is: OTLP in, sampling, exports.
    assert "otlp" in MAIN["receivers"]
    assert any("tail_sampling" in p.get("processors", []) for p in _pipelines(MAIN).values())


# --- metric names: what the dashboards and rules query exists -------------------------------------
@functools.cache
def _known_series() -> dict[str, set[str]]:
    series = dict(exporter_exposition())
    series.update(spanmetrics_settings(MAIN).prometheus_series())
    for rule in rules():  # recording rules, in file order: a rule can read earlier ones
        if "record" not in rule:
            continue
        names, _ = promql_refs(rule["expr"])
        grouping = re.search(r"\bby\s*\(([^)]*)\)", rule["expr"])
        if grouping:
            labels = {label.strip() for label in grouping.group(1).split(",") if label.strip()}
        else:
            labels = set().union(*(series.get(name, set()) for name in names))
        series[rule["record"]] = labels
    return series


def test_the_package_exporter_writes_the_names_the_readme_lists():
    names = set(exporter_exposition())
    expected = {
        "agentguard_sessions_total", "agentguard_stalls_total",
        *(f"agentguard_session_{metric}_{part}" for metric in ("steps", "tokens", "duration_seconds")
          for part in ("bucket", "sum", "count")),
    }
    assert expected <= names, f"missing: {sorted(expected - names)}"
    readme = (COLLECTOR_DIR / "README.md").read_text(encoding="utf-8")
    for name in sorted(expected):
        assert name in readme, f"README.md does not list {name}"
    for name in spanmetrics_settings(MAIN).prometheus_series():
        assert name in readme, f"README.md does not list {name}"


@pytest.mark.parametrize("query", dashboard_queries() + rule_queries(), ids=lambda q: q.ident)
def test_queried_metrics_and_labels_exist(query):
    series = _known_series()
    names, labels = promql_refs(query.expr)
    assert names, f"found no metric in {query.expr!r}"
    unknown = names - set(series)
    assert not unknown, f"{query.ident}: no component or exporter produces {sorted(unknown)}"
    available = set().union(*(series[name] for name in names)) | {"job", "instance"}
    missing = labels - available
    assert not missing, f"{query.ident}: labels {sorted(missing)} exist on none of {sorted(names)}"


def test_template_variables_read_existing_labels():
    series = _known_series()
    for metric, label in variable_queries():
        assert label in series.get(metric, set()), f"label_values({metric}, {label}): no such series or label"

