"""Fuzzed input files: whatever a file holds, ``agentguard replay`` exits 0, 1 or 2 without a traceback.

Hypothesis writes OTLP JSON lines, agent-trace JSON lines, trajectory documents in JSON
and YAML, and policy TOML, filled with hostile values: integers of hundreds of digits,
NaN and infinities, numeric strings, wrong types, broken structure, YAML tags and
aliases. The bulk runs the command line in process (fast); a sample runs the installed
``agentguard`` script as a real subprocess.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from otel_agentguard import attributes as A
from otel_agentguard.replay.cli import EXAMPLES, run

AGENTGUARD_SCRIPT = Path(sys.executable).with_name("agentguard")
SUPPORT_SESSIONS = str(EXAMPLES / "support_sessions.yaml")
BULK = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SAMPLE = settings(max_examples=3, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- hostile values ----------------------------------------------------------------------------------------

HUGE_INTEGERS = st.sampled_from([10**400, -(10**400), 2**63, 2**63 - 1, 2**64, -(2**63) - 1, -1, 0, 10**4000])
NUMERIC_TEXT = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "9" * 400, "-1", "0x10", "", " 1 ", "1_000",
                                "\x00", "\ud800", "١٢٣"])
SCALARS = st.one_of(
    HUGE_INTEGERS,
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    NUMERIC_TEXT,
    st.text(max_size=12),
    st.booleans(),
    st.none(),
)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                          max_size=3), max_leaves=8)


NUMBERS = st.one_of(HUGE_INTEGERS, st.floats(allow_nan=True, allow_infinity=True), NUMERIC_TEXT, st.integers())


def _maybe(value: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any] = VALUES) -> st.SearchStrategy[Any]:
    """The sensible value about half the time, so that most files get past the first check."""
    return st.one_of(value, value, hostile, VALUES)


def _number(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return _maybe(value, NUMBERS)


def _json(value: Any) -> str:
    return json.dumps(value, allow_nan=True)  # NaN and Infinity as Python writes them: hostile too


# --- OTLP JSON lines ---------------------------------------------------------------------------------------

COUNT_KEYS = [A.GEN_AI_USAGE_INPUT_TOKENS, A.GEN_AI_USAGE_OUTPUT_TOKENS, *A.LEGACY_INPUT_TOKENS, A.SEQUENCE,
              A.RESPONSE_TOOL_CALLS]
ANY_VALUE = st.one_of(
    st.builds(lambda v: {"intValue": v}, st.one_of(HUGE_INTEGERS, st.integers().map(str), NUMERIC_TEXT)),
    st.builds(lambda v: {"intValue": str(v)}, HUGE_INTEGERS),
    st.builds(lambda v: {"doubleValue": v}, st.one_of(st.floats(), NUMERIC_TEXT)),
    st.builds(lambda v: {"stringValue": v}, st.one_of(st.text(max_size=8), NUMERIC_TEXT)),
    st.builds(lambda v: {"boolValue": v}, st.booleans()),
    st.builds(lambda v: {"arrayValue": {"values": v}}, st.lists(st.builds(lambda n: {"intValue": n}, HUGE_INTEGERS),
                                                                 max_size=2)),
    st.builds(lambda v: {"bytesValue": v}, st.text(max_size=6)),
    VALUES,
)
ATTRIBUTE = st.one_of(
    st.fixed_dictionaries({"key": st.sampled_from(COUNT_KEYS + [A.GEN_AI_OPERATION_NAME, A.SESSION_ID,
                                                                A.GEN_AI_TOOL_NAME, A.STOP_REASON]),
                           "value": ANY_VALUE}),
    VALUES,
)
OPERATION = st.sampled_from(["chat", "chat", "execute_tool", "invoke_agent"]).map(lambda op: [
    {"key": A.GEN_AI_OPERATION_NAME, "value": {"stringValue": op}},
    {"key": A.GEN_AI_CONVERSATION_ID, "value": {"stringValue": "s1"}},
    {"key": A.GEN_AI_REQUEST_MODEL, "value": {"stringValue": "gpt-4o"}},
])
SPAN = st.fixed_dictionaries(
    {
        "traceId": _maybe(st.just("0af7651916cd43dd8448eb211c80319c")),
        "spanId": _maybe(st.sampled_from(["b7ad6b7169203331", "00f067aa0ba902b7"])),
        "name": _maybe(st.just("chat m")),
        "startTimeUnixNano": _number(st.integers(0, 2**62).map(str)),
        "endTimeUnixNano": _number(st.integers(2**62, 2**63).map(str)),
        "attributes": _maybe(st.lists(ATTRIBUTE, max_size=4).flatmap(
            lambda rest: OPERATION.map(lambda first: [*first, *rest]))),
    },
    optional={"parentSpanId": _maybe(st.just("00f067aa0ba902b7")), "status": _maybe(st.just({"code": 2}))},
)


def _span_with(field: str, value: Any, member: str) -> dict[str, Any]:
    """A valid model span of session s1 with one field (or one count attribute) set to ``value``."""
    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "name": "chat gpt-4o",
        "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
        "attributes": [
            {"key": A.GEN_AI_OPERATION_NAME, "value": {"stringValue": "chat"}},
            {"key": A.GEN_AI_CONVERSATION_ID, "value": {"stringValue": "s1"}},
            {"key": A.GEN_AI_REQUEST_MODEL, "value": {"stringValue": "gpt-4o"}},
            {"key": A.GEN_AI_USAGE_INPUT_TOKENS, "value": {"intValue": "10"}},
        ],
    }
    if field in COUNT_KEYS:
        span["attributes"].append({"key": field, "value": {member: value}})
    else:
        span[field] = value
    return span


ONE_HOSTILE_SPAN = st.builds(
    _span_with,
    st.sampled_from(["startTimeUnixNano", "endTimeUnixNano", *COUNT_KEYS]),
    st.one_of(NUMBERS, NUMBERS.map(str)),
    st.sampled_from(["intValue", "doubleValue", "stringValue"]),
)
OTLP_DOCUMENT = st.one_of(
    st.lists(SPAN, min_size=1, max_size=3).map(lambda spans: {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}),
    ONE_HOSTILE_SPAN.map(lambda span: {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}),
    ONE_HOSTILE_SPAN.map(lambda span: {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}),
    VALUES.map(lambda v: {"resourceSpans": v}),
    VALUES.map(lambda v: {"resourceSpans": [{"scopeSpans": v}]}),
    VALUES.map(lambda v: {"resourceSpans": [{"scopeSpans": [{"spans": v}]}]}),
)
OTLP_FILES = st.lists(OTLP_DOCUMENT, min_size=1, max_size=3).map(lambda docs: "".join(_json(d) + "\n" for d in docs))

# --- agent-trace JSON lines --------------------------------------------------------------------------------

AGENT_EVENT = st.fixed_dictionaries(
    {"session_id": _maybe(st.just("s1")), "event": _maybe(st.sampled_from(["tool_call_planned", "session_started"]))},
    optional={
        "timestamp": _number(st.floats(0, 2e9)),
        "sequence": _number(st.integers(0, 100)),
        "tool": _maybe(st.just("search")),
        "argument_fingerprint": _maybe(st.just("search:1")),
        "projected_spend_usd": _number(st.floats(0, 10)),
    },
)
AGENT_TRACE_FILES = st.lists(AGENT_EVENT, min_size=1, max_size=4).map(lambda events: "".join(_json(e) + "\n"
                                                                                             for e in events))

# --- trajectory documents ----------------------------------------------------------------------------------

COUNT = _number(st.integers(0, 1000))
STEP = st.one_of(
    st.fixed_dictionaries(
        {"tool": _maybe(st.just("lookup"))},
        optional={"args": VALUES, "result": VALUES, "error": VALUES, "effect": _maybe(st.just("write")),
                  "tokens": COUNT, "input_tokens": COUNT, "output_tokens": COUNT, "seq": COUNT,
                  "cost_usd": _number(st.floats(0, 10)), "duration_s": _number(st.floats(0, 100)), "id": VALUES},
    ),
    st.fixed_dictionaries(
        {"model": _maybe(st.just("gpt-4o"))},
        optional={"answer": _maybe(st.just("Done.")), "claims": VALUES, "tool_calls": COUNT, "input_tokens": COUNT,
                  "output_tokens": COUNT, "cost_usd": _number(st.floats(0, 10)),
                  "duration_s": _number(st.floats(0, 100))},
    ),
    VALUES,
)
SESSION = st.fixed_dictionaries(
    {"steps": _maybe(st.lists(STEP, max_size=4))},
    optional={"id": VALUES, "expect": st.one_of(st.just("pass"), st.just({"stop": ["tool_loop"]}), VALUES),
              "profile": VALUES, "task_type": VALUES, "interrupt": VALUES, "error": VALUES},
)
TRAJECTORY = st.one_of(
    SESSION,
    st.fixed_dictionaries({"sessions": _maybe(st.lists(SESSION, max_size=3))}),
    VALUES,
)
# Hostile YAML that no dumper writes: tags, aliases, merge keys, odd scalars.
YAML_TOKENS = st.sampled_from([
    "1" + "0" * 400, "0x" + "f" * 400, "7" * 5000, ".nan", ".inf", "-.inf", "1e400", "1.0e+400", "2001-02-30",
    "!!python/object/apply:os.system ['true']", "!!binary ~~~", "!!set {a: 1}", "!custom x", "*nowhere",
    "&a [1, *a]", "{<<: 3}", "[[[[[[[[", "'unterminated", "~", "yes", "0o17", "-0", "1_000", "12:30:00",
])
YAML_TEXT = st.builds(
    lambda key, token, merge: (f"steps:\n  - &base {{tool: t, args: {{}}}}\n  - {{tool: t, args: {{}}, {key}: {token}}}\n"
                               + ("  - {<<: *base, tokens: 1}\n" if merge else "")),
    st.sampled_from(["tokens", "input_tokens", "cost_usd", "duration_s", "seq", "result", "args", "tool_calls"]),
    YAML_TOKENS,
    st.booleans(),
)

# --- policy TOML -------------------------------------------------------------------------------------------

TOML_VALUES = st.sampled_from([
    "1" + "0" * 400, "9223372036854775808", "-1", "0", "1", "3", "inf", "nan", "-inf", "1e400", "0.5", '"x"',
    "[1, 2]", '["tool_loop"]', "{a = 1}", "true", "1979-05-27", "7" * 5000,
])
TOML_KEYS = {
    "[profiles.default]": ["window", "repeat_threshold", "max_steps", "max_tokens", "max_cost_usd",
                           "max_wall_time_s", "max_model_calls", "cycle_repeats", "disabled_probes", "windw"],
    "[pricing.gpt-4o]": ["input_usd_per_mtok", "output_usd_per_mtok"],
    "[tools.refund]": ["effect", "noise_keys"],
    "": ["version", "budget_note", "default_profile", "noise_keys"],
}
TOML_TEXT = st.lists(
    st.sampled_from(sorted(TOML_KEYS)).flatmap(
        lambda header: st.lists(st.tuples(st.sampled_from(TOML_KEYS[header]), TOML_VALUES), min_size=1, max_size=3)
        .map(lambda pairs: (header + "\n" if header else "") + "".join(f"{k} = {v}\n" for k, v in pairs))),
    min_size=1, max_size=3,
).map("".join)


# --- running the command line ------------------------------------------------------------------------------


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(text)
    return path


def _in_process(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = run(argv)  # an exception escaping here fails the test with its traceback
    return code, err.getvalue()


def _as_subprocess(argv: list[str]) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_AGENTGUARD_P")}
    done = subprocess.run([str(AGENTGUARD_SCRIPT), *argv], capture_output=True, text=True, timeout=60, env=env)
    return done.returncode, done.stderr


def _assert_clean(code: int, err: str) -> None:
    assert code in (0, 1, 2), (code, err[-500:])
    assert "Traceback" not in err, err[-2000:]
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err[-500:]


def _replay(name: str, text: str, runner=_in_process, *extra: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = _write(directory, name, text)
        _assert_clean(*runner(["replay", path, "--format", "json", *extra]))


def _yaml_dump(document: Any) -> str | None:
    try:
        return yaml.safe_dump(document, allow_unicode=False)
    except (yaml.YAMLError, ValueError, OverflowError):  # a value PyYAML cannot write: nothing to test
        return None


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    monkeypatch.delenv("OTEL_AGENTGUARD_POLICY", raising=False)
    monkeypatch.delenv("OTEL_AGENTGUARD_PROFILE", raising=False)


@BULK
@given(OTLP_FILES)
def test_fuzzed_otlp_json_lines(text):
    _replay("spans.jsonl", text)


@BULK
@given(AGENT_TRACE_FILES)
def test_fuzzed_agent_trace_lines(text):
    _replay("agent-trace.jsonl", text)


@BULK
@given(TRAJECTORY, st.booleans())
def test_fuzzed_trajectory_json(document, pretty):
    _replay("trajectory.json", json.dumps(document, allow_nan=True, indent=2 if pretty else None) + "\n")


@BULK
@given(TRAJECTORY)
def test_fuzzed_trajectory_yaml(document):
    text = _yaml_dump(document)
    if text is not None:
        _replay("trajectory.yaml", text)


@BULK
@given(YAML_TEXT)
def test_fuzzed_hand_written_yaml(text):
    _replay("trajectory.yaml", text)


@BULK
@given(TOML_TEXT)
def test_fuzzed_policy_toml(text):
    with tempfile.TemporaryDirectory() as directory:
        policy = _write(directory, "policy.toml", text)
        _assert_clean(*_in_process(["check", SUPPORT_SESSIONS, "--policy", policy]))


# A sample of each through the real installed command, in its own process.


@SAMPLE
@given(OTLP_FILES, AGENT_TRACE_FILES, YAML_TEXT, TOML_TEXT, TRAJECTORY)
def test_fuzzed_files_through_the_real_command(otlp, agent_trace, hand_yaml, toml, trajectory):
    _replay("spans.jsonl", otlp, _as_subprocess)
    _replay("agent-trace.jsonl", agent_trace, _as_subprocess)
    _replay("trajectory.yaml", hand_yaml, _as_subprocess)
    _replay("trajectory.json", json.dumps(trajectory, allow_nan=True, indent=2) + "\n", _as_subprocess)
    with tempfile.TemporaryDirectory() as directory:
        policy = _write(directory, "policy.toml", toml)
        _assert_clean(*_as_subprocess(["check", SUPPORT_SESSIONS, "--policy", policy]))
