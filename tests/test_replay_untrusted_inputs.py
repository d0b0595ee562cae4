"""Trace, trajectory and policy files from other systems: every problem is one line and exit 2.

Numbers too large for a float, policy paths that point at devices, huge YAML, empty
exports, non-finite numbers on output and malformed OTLP structure; plus the live side
(a server reporting absurd usage must not write a trace that replay cannot read).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import openai
import pytest

from otel_agentguard import _internal_errors
from otel_agentguard import attributes as A
from otel_agentguard.exporters import encode_request
from otel_agentguard.instrumentation.openai import OpenAIInstrumentor
from otel_agentguard.judge.policy import PolicyError, load_policy, parse_policy
from otel_agentguard.judge.steps import TOOL, Step
from otel_agentguard.replay import RecordedSession, _yaml, judge_recorded, render
from otel_agentguard.replay import cli as replay_cli
from otel_agentguard.replay.cli import EXAMPLES, run
from otel_agentguard.scripted_model import ScriptedModelServer, Turn, turns
from otel_agentguard.testing import GuardedTracing

HUGE = "1" + "0" * 400  # 10**400: an integer no float can hold
SUPPORT_SESSIONS = str(EXAMPLES / "support_sessions.yaml")
AGENTGUARD_SCRIPT = Path(sys.executable).with_name("agentguard")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    monkeypatch.delenv("OTEL_AGENTGUARD_POLICY", raising=False)
    monkeypatch.delenv("OTEL_AGENTGUARD_PROFILE", raising=False)


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(capsys, *argv: str) -> str:
    code, out, err = _run(capsys, *argv)
    assert code == 2, (out, err)
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _otlp_line(attributes: list[dict] | None = None, **span_fields: object) -> str:
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "chat gpt-4o",
        "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
        "attributes": attributes if attributes is not None else [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.conversation.id", "value": {"stringValue": "s1"}},
        ],
        **span_fields,
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})


# --- 1. numbers out of range: the file, the line, the field and what was expected ----------------------------

TRAJECTORY_NUMBERS = ["duration_s", "cost_usd", "input_tokens", "output_tokens", "tokens", "seq"]


@pytest.mark.parametrize("field", TRAJECTORY_NUMBERS)
def test_trajectory_number_too_large_for_a_float_is_one_line(tmp_path, capsys, field):
    path = tmp_path / "trajectory.yaml"
    path.write_text(f"steps:\n  - {{tool: t, args: {{}}, result: 1}}\n  - {{tool: t, args: {{}}, {field}: {HUGE}}}\n",
                    encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert f"{path}:3:" in message and f"steps[2].{field}" in message and "expected" in message
    assert "401 digits" in message  # described, not printed in full


def test_json_trajectory_number_too_large_is_one_line(tmp_path, capsys):
    path = tmp_path / "trajectory.json"
    path.write_text('{\n  "steps": [\n    {"model": "m", "input_tokens": ' + HUGE + '}\n  ]\n}\n', encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert str(path) in message and "input_tokens" in message and "expected an integer" in message


def test_json_document_with_an_integer_of_5000_digits_names_its_line(tmp_path, capsys):
    path = tmp_path / "trajectory.json"
    path.write_text('{\n  "steps": [\n    {"tool": "t", "args": {"n": %s}}\n  ]\n}\n' % ("7" * 5000), encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert f"{path}:3:" in message and "4,300 digits" in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("gen_ai.usage.input_tokens", {"intValue": HUGE}),
        ("gen_ai.usage.output_tokens", {"doubleValue": 1e300}),
        ("gen_ai.usage.prompt_tokens", {"stringValue": HUGE}),
        ("agentguard.sequence", {"intValue": "-5"}),
    ],
    ids=["int-400-digits", "double-1e300", "numeric-string", "negative-sequence"],
)
def test_otlp_count_attribute_out_of_range_is_one_line(tmp_path, capsys, key, value):
    path = tmp_path / "spans.jsonl"
    attributes = [
        {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
        {"key": key, "value": value},
    ]
    path.write_text(_otlp_line(attributes) + "\n", encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert f"{path}:1:" in message and key in message


@pytest.mark.parametrize("value", [0, 7, 2**63 - 1, 2**63, -1, True, False, 7.0, "7", None, 10**400])
def test_counts_are_in_range_when_each_is_an_exact_int_from_0_to_int64_max(value):
    from otel_agentguard.replay.otlp import counts_in_range

    expected = type(value) is int and 0 <= value <= 2**63 - 1
    for others in ({}, {"gen_ai.usage.input_tokens": 3, "agentguard.sequence": 1, "http.status_code": -1}):
        assert counts_in_range({**others, "gen_ai.usage.output_tokens": value}) is expected
    assert counts_in_range({"gen_ai.operation.name": "chat", "http.status_code": -1}) is True


@pytest.mark.parametrize("field", ["startTimeUnixNano", "endTimeUnixNano"])
def test_otlp_timestamp_too_large_is_one_line(tmp_path, capsys, field):
    path = tmp_path / "spans.jsonl"
    path.write_text(_otlp_line(**{field: HUGE}) + "\n", encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert f"{path}:1:" in message and field in message and "nanoseconds" in message


@pytest.mark.parametrize("spend", [HUGE, "NaN", "Infinity", "-1"])
def test_agent_trace_projected_spend_out_of_range_is_one_line(tmp_path, capsys, spend):
    path = tmp_path / "agent-trace.jsonl"
    path.write_text('{"session_id": "s", "sequence": 1, "event": "tool_call_planned", "tool": "t", '
                    f'"timestamp": 1.5, "projected_spend_usd": {spend}}}\n', encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert f"{path}:1:" in message and "projected_spend_usd" in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        (f'[pricing.m]\ninput_usd_per_mtok = {HUGE}\noutput_usd_per_mtok = 1\n', "pricing.m.input_usd_per_mtok"),
        (f'[profiles.default]\nmax_cost_usd = {HUGE}\n', "profiles.default.max_cost_usd"),
        (f'[profiles.default]\nmax_wall_time_s = {HUGE}\n', "profiles.default.max_wall_time_s"),
        (f'[profiles.default]\nwindow = {HUGE}\n', "profiles.default.window"),
        (f'[profiles.default]\nmax_tokens = {HUGE}\n', "profiles.default.max_tokens"),
    ],
    ids=["price", "max_cost_usd", "max_wall_time_s", "window", "max_tokens"],
)
def test_policy_number_too_large_is_a_policy_error(tmp_path, capsys, text, key):
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    message = _one_line_error(capsys, "replay", SUPPORT_SESSIONS, "--policy", str(path))
    assert f"{path}:" in message and key in message and "401 digits" in message


def test_live_usage_beyond_range_is_dropped_counted_and_the_trace_replays(tmp_path, capsys):
    # A server that reports 10**400 tokens: the span keeps no usage, one internal error is
    # counted per dropped figure, and the exported trace reads back without an error.
    script = turns(Turn.answer("Done.", input_tokens=10**400, output_tokens=10**400))
    before = _internal_errors.counts().get("number_out_of_range", 0)
    with ScriptedModelServer(script, model="gpt-4o").start() as server, GuardedTracing() as tracing:
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracing.tracer_provider)
        try:
            with tracing.session("huge-usage"):
                with openai.OpenAI(base_url=server.openai_url, api_key="test", max_retries=0) as client:
                    client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        finally:
            instrumentor.uninstrument()
        spans = tracing.spans()
    chat = [s for s in spans if (s.attributes or {}).get(A.GEN_AI_OPERATION_NAME) == "chat"]
    assert len(chat) == 1
    assert A.GEN_AI_USAGE_INPUT_TOKENS not in chat[0].attributes
    assert A.GEN_AI_USAGE_OUTPUT_TOKENS not in chat[0].attributes
    assert _internal_errors.counts().get("number_out_of_range", 0) - before == 2
    path = tmp_path / "trace.jsonl"
    path.write_text(json.dumps(encode_request(spans)) + "\n", encoding="utf-8")
    code, out, err = _run(capsys, "replay", str(path), "--format", "json")
    assert (code, err) == (0, "")
    assert [s["session_id"] for s in json.loads(out)["sessions"]] == ["huge-usage"]


def test_live_foreign_span_with_absurd_tokens_is_judged_without_them(tmp_path):
    # Another instrumentation's span says 10**400 tokens: the judge drops the figure (and
    # counts it), the session is judged, nothing reaches the application.
    before = _internal_errors.counts().get("number_out_of_range", 0)
    with GuardedTracing() as tracing:
        with tracing.session("foreign"):
            tracing.record_model_call(input_tokens=10**400, output_tokens=7)
        verdict = tracing.verdict("foreign")
    assert verdict.tokens == 7 and math.isfinite(verdict.cost_usd)
    assert _internal_errors.counts().get("number_out_of_range", 0) - before == 1


# --- 2. policy files: regular files only, bounded before they are read -------------------------------------------


def test_policy_size_is_checked_before_reading(tmp_path):
    path = tmp_path / "sparse.toml"
    with path.open("wb") as handle:
        handle.truncate(64 << 20)  # 64 MiB of holes: costs no disk, would cost memory to read
    tracemalloc.start()
    try:
        with pytest.raises(PolicyError, match="larger than"):
            load_policy(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"read {peak / 2**20:.0f} MiB to refuse a policy file"


def test_policy_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "policy.toml"
    os.mkfifo(fifo)
    done = subprocess.run([str(AGENTGUARD_SCRIPT), "replay", SUPPORT_SESSIONS, "--policy", str(fifo)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "not a regular file" in done.stderr and "Traceback" not in done.stderr


def _limited_memory() -> None:
    # A regression here would read /dev/zero until memory runs out: keep it to this child.
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_policy_dev_zero_is_refused_at_once(tmp_path):
    pytest.importorskip("resource")
    done = subprocess.run([str(AGENTGUARD_SCRIPT), "replay", SUPPORT_SESSIONS, "--policy", "/dev/zero"],
                          capture_output=True, text=True, timeout=30, preexec_fn=_limited_memory)
    assert done.returncode == 2, done.stderr[-300:]
    assert done.stderr.strip() == "agentguard: /dev/zero: not a regular file"


def _suite_naming(tmp_path: Path, policy: str) -> Path:
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"# a suite\npolicy: {policy}\nsteps:\n  - {{tool: q, args: {{}}, result: 1}}\n",
                     encoding="utf-8")
    return suite


def test_trajectory_naming_a_missing_policy_names_the_trajectory_and_line(tmp_path, capsys):
    suite = _suite_naming(tmp_path, "nope.toml")
    message = _one_line_error(capsys, "replay", str(suite))
    assert message.startswith(f"agentguard: {suite}:2: policy: ")
    assert str(tmp_path / "nope.toml") in message


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_trajectory_naming_a_device_is_refused_naming_the_trajectory(tmp_path):
    pytest.importorskip("resource")
    (tmp_path / "zero.toml").symlink_to("/dev/zero")
    suite = _suite_naming(tmp_path, "zero.toml")
    done = subprocess.run([str(AGENTGUARD_SCRIPT), "replay", str(suite)],
                          capture_output=True, text=True, timeout=30, preexec_fn=_limited_memory)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-300:]
    message = done.stderr.strip()
    assert message.startswith(f"agentguard: {suite}:2: policy: ") and "not a regular file" in message


def test_trajectory_naming_an_absolute_policy_path_is_refused(tmp_path, capsys):
    suite = _suite_naming(tmp_path, str(EXAMPLES / "policy.toml"))  # a real policy, but named by an absolute path
    message = _one_line_error(capsys, "replay", str(suite))
    assert message.startswith(f"agentguard: {suite}:2: policy: ") and "relative" in message


def test_json_trajectory_naming_a_missing_policy_names_its_line(tmp_path, capsys):
    suite = tmp_path / "suite.json"
    suite.write_text('{\n  "steps": [{"tool": "q", "args": {}}],\n  "policy": "nope.toml"\n}\n', encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(suite))
    assert message.startswith(f"agentguard: {suite}:3: policy: ")


def test_trajectory_named_policy_resolves_relative_to_the_trajectory(tmp_path, capsys, monkeypatch):
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "p.toml").write_text('version = "next-to-the-suite"\n', encoding="utf-8")
    suite = _suite_naming(tmp_path / "suites", "p.toml")
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(capsys, "replay", str(suite.relative_to(tmp_path)), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["sessions"][0]["policy_version"] == "next-to-the-suite"


# --- 3. YAML: parsed once, bounded by size and by a value budget that says what was exceeded ------------------


def test_a_trajectory_naming_its_policy_is_parsed_once(tmp_path, capsys, monkeypatch):
    calls = []
    original = _yaml.load_yaml

    def counting(text: str, path: str):
        calls.append(path)
        return original(text, path)

    monkeypatch.setattr(_yaml, "load_yaml", counting)
    code, _, err = _run(capsys, "replay", SUPPORT_SESSIONS)
    assert code == 0, err
    assert calls == [SUPPORT_SESSIONS]


def test_a_large_yaml_without_aliases_says_how_many_values_it_exceeds(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_yaml, "MAX_VALUES", 1000, raising=False)
    path = tmp_path / "big.yaml"
    path.write_text("steps:\n" + "  - {tool: t, args: {q: x}, result: 1}\n" * 200, encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert "more than 1,000 values" in message and "alias" not in message


def test_a_yaml_alias_expansion_over_budget_says_aliases_count(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_yaml, "MAX_VALUES", 50_000, raising=False)
    levels = ["steps:", "  - tool: t", "    args:", '      a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    levels += [f"      a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 5)]
    path = tmp_path / "aliases.yaml"
    path.write_text("\n".join(levels) + "\n    result: 1\n", encoding="utf-8")  # 10**5 values through aliases
    message = _one_line_error(capsys, "replay", str(path))
    assert "more than 50,000 values" in message and "aliases count" in message


def test_a_yaml_document_over_the_size_cap_is_refused_before_parsing(tmp_path, capsys, monkeypatch):
    from otel_agentguard.replay import sources

    monkeypatch.setattr(sources, "MAX_YAML_BYTES", 4096)
    path = tmp_path / "big.yaml"
    path.write_text("steps:\n" + "  - {tool: t, args: {}, result: 1}\n" * 200, encoding="utf-8")
    monkeypatch.setattr(_yaml, "load_yaml", lambda *a: pytest.fail("parsed a file over the size cap"))
    message = _one_line_error(capsys, "replay", str(path))
    assert "YAML document larger than 4,096 bytes" in message


def test_yaml_still_reads_merge_keys_anchors_and_plain_scalars(tmp_path, capsys):
    path = tmp_path / "shapes.yaml"
    path.write_text(
        "sessions:\n  - id: A\n    steps:\n      - &call {tool: lookup, args: {order: A1}, result: same}\n"
        "      - *call\n      - <<: *call\n        tokens: 0x10\n"
        "      - {<<: *call, result: other, duration_s: 1.5}\n"
        "      - {model: m, answer: 'Yes: null, true, 1e3'}\n",
        encoding="utf-8",
    )
    code, out, err = _run(capsys, "replay", str(path), "--format", "json")
    assert code == 0, err
    session = json.loads(out)["sessions"][0]
    assert session["steps"] == 5 and session["tokens"] == 16 and session["duration_s"] == 1.5


# --- 4. no sessions: see tests/test_cli.py (exit 2 unless --allow-empty) --------------------------------------

# --- 5. strict JSON output ---------------------------------------------------------------------------------


def _non_finite_verdict() -> render.Judged:
    session = RecordedSession("nan-cost", "memory")
    session.steps.append(Step("nan-cost", 1, TOOL, "t", cost_usd=math.inf))
    session.steps.append(Step("nan-cost", 2, TOOL, "t", cost_usd=-math.inf))  # inf - inf: NaN
    return session, judge_recorded(session, parse_policy(""))


def test_json_output_is_strict_json_even_for_non_finite_numbers(capsys):
    judged = [_non_finite_verdict()]
    assert not math.isfinite(judged[0][1].cost_usd)
    args = argparse.Namespace(format="json", compact=True)
    replay_cli._emit(args, render.replay_json(judged), lambda: render.replay_table(judged))
    out = capsys.readouterr().out

    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    document = json.loads(out, parse_constant=refuse)
    assert document["sessions"][0]["cost_usd"] is None


def test_table_output_flags_non_finite_numbers():
    judged = [_non_finite_verdict()]
    table = render.replay_table(judged)
    assert "not finite (null in JSON)" in table and "$nan" not in table.lower()


# --- 6. structure errors in the file's terms ---------------------------------------------------------------

STRUCTURE = [
    ('{"resourceSpans": "nope"}', "resourceSpans must be a list, got a string"),
    ('{"resourceSpans": [7]}', "resourceSpans[0] must be an object, got a number"),
    ('{"resourceSpans": [{"scopeSpans": {}}]}', "resourceSpans[0].scopeSpans must be a list, got an object"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [[]]}]}]}', "resourceSpans[0].scopeSpans[0].spans[0] must be an object"),
    (_otlp_line(attributes={"a": 1}), "spans[0].attributes must be a list, got an object"),
    (_otlp_line(attributes=["a"]), "spans[0].attributes[0] must be an object with 'key' and 'value'"),
    (_otlp_line(attributes=[{"key": "k", "value": "v"}]), 'spans[0].attributes[0] (k).value must be an object such as'),
    (_otlp_line(attributes=[{"key": "k", "value": {"intValue": "abc"}}]), "(k).value.intValue: expected an integer"),
    (_otlp_line(attributes=[{"key": "k", "value": {"arrayValue": {"values": [{"intValue": HUGE}]}}}]),
     "(k).value.arrayValue.values[0].intValue: expected an integer from -2**63 to 2**63-1"),
    (_otlp_line(traceId=7), "spans[0].traceId must be a string, got a number"),
    (_otlp_line(status="ERROR"), "spans[0].status must be an object, got a string"),
]


@pytest.mark.parametrize(("line", "expected"), STRUCTURE, ids=[e for _, e in STRUCTURE])
def test_otlp_structure_errors_describe_the_file_not_python(tmp_path, capsys, line, expected):
    path = tmp_path / "spans.jsonl"
    path.write_text(_otlp_line(spanId="00f067aa0ba902b7") + "\n" + line + "\n", encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert message.startswith(f"agentguard: {path}:2: ")
    assert expected in message
    assert "Error" not in message and "'str' object" not in message


def test_one_line_json_trajectory_names_its_policy_relative_to_itself(tmp_path, capsys):
    (tmp_path / "p.toml").write_text('version = "one-line"\n', encoding="utf-8")
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"policy": "p.toml", "steps": [{"tool": "q", "args": {}}]}) + "\n", encoding="utf-8")
    code, out, err = _run(capsys, "replay", str(suite), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["sessions"][0]["policy_version"] == "one-line"


def test_yaml_integer_of_5000_digits_is_one_line_naming_its_line(tmp_path, capsys):
    path = tmp_path / "trajectory.yaml"
    path.write_text("steps:\n  - {tool: t, args: {}, result: 1}\n  - {tool: t, args: {n: %s}}\n" % ("7" * 5000),
                    encoding="utf-8")
    message = _one_line_error(capsys, "replay", str(path))
    assert f"{path}:3:" in message and "more than 4,300 digits" in message and "sys." not in message
