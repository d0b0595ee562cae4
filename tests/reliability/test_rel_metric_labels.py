"""Metric label values stay low-cardinality and content-free.

The guard's own instruments carry no tool name at all (nor session id, nor argument): their
series are the same whether an agent uses five tools or two hundred. Tool names do become a
label in the Collector's spanmetrics (``gen_ai.tool.name``): collector-config/collector.yaml
caps that connector's cardinality, with an overflow series beyond the cap.
"""

from __future__ import annotations

from pathlib import Path

import yaml

import otel_agentguard as ag
from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.testing import GuardedTracing

COLLECTOR = Path(__file__).resolve().parents[2] / "collector-config"
GUARD_METRICS = (A.METRIC_SESSIONS, A.METRIC_STALLS, A.METRIC_INTERNAL_ERRORS, A.METRIC_SESSION_STEPS,
                 A.METRIC_SESSION_TOKENS, A.METRIC_SESSION_DURATION)
ALLOWED_LABEL_KEYS = {A.STOP_REASON, A.PROFILE, A.PROBE, A.BUDGET_KIND, "kind"}


def run_agent_with_tools(count: int) -> tuple[set[str], list[tuple[str, dict]]]:
    """Sessions that use ``count`` distinct tool names and hit every probe; the names and every
    metric data point's (metric, labels)."""
    names = {f"zq{n:03d}{'write' if n % 7 == 0 else 'read'}" for n in range(count)}
    with GuardedTracing() as tracing:
        tools = {name: ag.tool(lambda order: {"state": "stalled"}, name=name, tracer_provider=tracing.tracer_provider)
                 for name in sorted(names)}

        def failing(order: str) -> dict:
            raise TimeoutError("down")

        broken = ag.tool(failing, name=sorted(names)[0], tracer_provider=tracing.tracer_provider)
        for n, (_name, tool) in enumerate(sorted(tools.items())):
            with tracing.session(f"s-{n}"):
                shape = n % 4
                if shape == 0:  # tool_loop
                    for _ in range(3):
                        tool("A1")
                elif shape == 1:  # error_streak (and no_progress)
                    for k in range(5):
                        try:
                            broken(f"A{k}")
                        except TimeoutError:
                            pass
                elif shape == 2:  # budget
                    for k in range(13):
                        tool(f"A{k}")
                tracing.record_model_call(final_claims=("write",) if shape == 3 else ())  # fake_completion
        # A foreign span whose tool name is hostile: it must not become a label either.
        with tracing.session("foreign"):
            with tracing.tracer.start_as_current_span("execute_tool x", attributes={
                    A.GEN_AI_OPERATION_NAME: A.OP_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: "zq999hostile"}):
                pass
        names.add("zq999hostile")
        _internal_errors.report("labels.check")  # and an internal error, counted by kind
        points = [(metric, labels) for metric in GUARD_METRICS for labels, _ in tracing.metric_points(metric)]
    return names, points


def test_the_guards_metrics_carry_no_tool_names_and_their_series_do_not_grow_with_tools():
    few_names, few = run_agent_with_tools(8)
    many_names, many = run_agent_with_tools(200)
    for names, points in ((few_names, few), (many_names, many)):
        assert points
        for metric, labels in points:
            assert set(labels) <= ALLOWED_LABEL_KEYS, (metric, labels)
            for value in labels.values():
                assert not any(name in str(value) for name in names) and "zq" not in str(value), (metric, labels)
                assert "s-" not in str(value)  # no session id either
    # Every probe was hit, and the series are the same sets: bounded by stop reasons, probes and profiles.
    assert {labels.get(A.PROBE) for metric, labels in many if metric == A.METRIC_STALLS} >= set(A.PROBE_NAMES)
    series = lambda points: {(m, tuple(sorted(labels.items()))) for m, labels in points}  # noqa: E731
    assert series(few) == series(many)


def _spanmetrics(config: dict) -> dict:
    (connector,) = [value for key, value in config["connectors"].items() if key.split("/")[0] in
                    ("spanmetrics", "span_metrics")]
    return connector


def test_the_collectors_spanmetrics_caps_tool_name_cardinality():
    config = yaml.safe_load((COLLECTOR / "collector.yaml").read_text(encoding="utf-8"))
    spanmetrics = _spanmetrics(config)
    dimensions = {d["name"] for d in spanmetrics.get("dimensions", [])}
    assert A.GEN_AI_TOOL_NAME in dimensions  # the one application-named dimension...
    limit = spanmetrics.get("aggregation_cardinality_limit")
    assert isinstance(limit, int) and 0 < limit <= 10_000  # ...is capped, with an overflow series past the cap
    assert "dimensions_cache_size" not in spanmetrics  # deprecated for the limit above
    # Never a per-call or per-session value as a dimension.
    for never in (A.SESSION_ID, A.GEN_AI_CONVERSATION_ID, A.SESSION_ID_SEMCONV, A.GEN_AI_TOOL_CALL_ID,
                  A.GEN_AI_TOOL_CALL_ARGUMENTS, A.GEN_AI_TOOL_CALL_RESULT, A.TOOL_ARGS_FINGERPRINT,
                  A.TOOL_RESULT_FINGERPRINT, A.SEQUENCE):
        assert never not in dimensions
        assert never not in {d["name"] for d in spanmetrics.get("events", {}).get("dimensions", [])}
    readme = (COLLECTOR / "README.md").read_text(encoding="utf-8")
    assert "aggregation_cardinality_limit" in readme and "otel_metric_overflow" in readme
