"""The ``agentguard`` command line, in process (``cli.run``) and as a real subprocess."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from otel_agentguard.replay.cli import EXAMPLES, run

SUPPORT_SESSIONS = str(EXAMPLES / "support_sessions.yaml")
MORE_SHAPES = str(EXAMPLES / "more_shapes.yaml")
POLICY = str(EXAMPLES / "policy.toml")
DATA = Path(__file__).parent / "data"
WRONG_LABEL_SUITE = str(DATA / "wrong_label_suite.yaml")
AGENTGUARD_SCRIPT = Path(sys.executable).with_name("agentguard")


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = run(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _json(capsys, *argv: str) -> dict:
    code, out, err = _run(capsys, *argv, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _by_id(document: dict) -> dict[str, dict]:
    return {session["session_id"]: session for session in document["sessions"]}


def _subprocess(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("OTEL_AGENTGUARD_POLICY", None)
    env.pop("OTEL_AGENTGUARD_PROFILE", None)
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, env=env, cwd=cwd)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    monkeypatch.delenv("OTEL_AGENTGUARD_POLICY", raising=False)
    monkeypatch.delenv("OTEL_AGENTGUARD_PROFILE", raising=False)


# --- replay ------------------------------------------------------------------------------


def test_replay_json_has_the_documented_shape(capsys):
    document = _json(capsys, "replay", SUPPORT_SESSIONS, "--policy", POLICY)

    assert set(document) == {"sessions"}
    assert [s["session_id"] for s in document["sessions"]] == ["A", "B", "C", "D"]
    for session in document["sessions"]:
        assert {"session_id", "stop_reason", "steps", "tokens", "alerts"} <= set(session)
        assert isinstance(session["steps"], int) and isinstance(session["tokens"], int)
        for alert in session["alerts"]:
            assert {"probe", "evidence", "detail"} <= set(alert)
            assert all(isinstance(seq, int) for seq in alert["evidence"])
            assert isinstance(alert["detail"], str) and alert["detail"]


def test_replay_json_values_for_the_support_sessions(capsys):
    sessions = _by_id(_json(capsys, "replay", SUPPORT_SESSIONS, "--policy", POLICY))

    a = sessions["A"]
    assert a["stop_reason"] == "fake_completion"  # fake_completion outranks the first alert
    assert (a["steps"], a["tokens"]) == (8, 1310)
    assert [(x["probe"], x["evidence"]) for x in a["alerts"]] == [
        ("tool_loop", [3, 4, 5]),
        ("no_progress", [4, 5, 6, 7]),
        ("fake_completion", [8]),
    ]
    b = sessions["B"]
    assert (b["stop_reason"], b["steps"], b["tokens"]) == ("fake_completion", 4, 780)
    assert [x["probe"] for x in b["alerts"]] == ["fake_completion"]
    c = sessions["C"]
    assert (c["stop_reason"], c["steps"], c["tokens"], c["alerts"]) == ("completed", 4, 720, [])
    d = sessions["D"]
    assert (d["stop_reason"], d["steps"], d["tokens"], d["alerts"]) == ("completed", 15, 4480, [])


def test_replay_uses_the_policy_the_trajectory_file_names(capsys):
    # No --policy: support_sessions.yaml says `policy: policy.toml`, whose task_types put D on long_chain.
    sessions = _by_id(_json(capsys, "replay", SUPPORT_SESSIONS))
    assert sessions["D"]["stop_reason"] == "completed"
    assert sessions["D"]["profile"] == "long_chain"
    assert sessions["A"]["policy_version"] == "2026-11-30"


def test_replay_profile_default_puts_session_d_over_budget(capsys):
    own = _by_id(_json(capsys, "replay", SUPPORT_SESSIONS, "--policy", POLICY))["D"]
    forced = _by_id(_json(capsys, "replay", SUPPORT_SESSIONS, "--policy", POLICY, "--profile", "default"))["D"]

    assert own["stop_reason"] == "completed" and own["alerts"] == []
    assert forced["stop_reason"] == "budget_exceeded"
    assert forced["profile"] == "default"
    budget = [(x["budget_kind"], x["evidence"]) for x in forced["alerts"] if x["probe"] == "budget_exceeded"]
    assert ("steps", [13]) in budget  # max_steps 12: step 13 crosses the line
    assert ("tokens", [14]) in budget  # max_tokens 4000: 4280 tokens after d14


def test_replay_profile_long_chain_lets_every_session_run_longer(capsys):
    sessions = _by_id(_json(capsys, "replay", SUPPORT_SESSIONS, "--policy", POLICY, "--profile", "long_chain"))
    assert sessions["D"]["stop_reason"] == "completed"
    # Under long_chain (repeat_threshold 5) A's five identical lookups still loop, later.
    loop = [x for x in sessions["A"]["alerts"] if x["probe"] == "tool_loop"]
    assert [x["evidence"] for x in loop] == [[3, 4, 5, 6, 7]]


def test_compare_profile_json_judges_each_session_twice(capsys):
    sessions = _by_id(_json(capsys, "replay", SUPPORT_SESSIONS, "--policy", POLICY, "--compare-profile", "default"))

    d = sessions["D"]
    assert (d["profile"], d["stop_reason"]) == ("long_chain", "completed")
    assert d["compare"]["profile"] == "default"
    assert d["compare"]["stop_reason"] == "budget_exceeded"
    assert {x["probe"] for x in d["compare"]["alerts"]} == {"budget_exceeded"}
    assert sessions["C"]["compare"]["stop_reason"] == "completed"


def test_compare_profile_table_shows_both_verdicts(capsys):
    code, out, _ = _run(capsys, "replay", SUPPORT_SESSIONS, "--policy", POLICY, "--compare-profile", "default")
    assert code == 0
    block_d = out[out.index("session D"):]
    assert "profile long_chain" in block_d
    assert "under profile default: budget_exceeded" in block_d
    assert "evidence: d13" in block_d


def test_replay_table_names_probes_evidence_ids_and_disposals(capsys):
    code, out, err = _run(capsys, "replay", SUPPORT_SESSIONS, "--policy", POLICY)
    assert code == 0 and err == ""
    block_a = out[out.index("session A"):out.index("session B")]
    assert "stop_reason: fake_completion" in block_a
    assert "tool_loop" in block_a and "no_progress" in block_a and "fake_completion" in block_a
    assert "evidence: s03 s04 s05" in block_a
    assert "evidence: s04 s05 s06 s07" in block_a
    assert "evidence: s08" in block_a
    assert block_a.count("disposal:") == 3
    assert "4 sessions, 2 stalled" in out


def test_replay_table_is_the_default_format(capsys):
    code, out, _ = _run(capsys, "replay", SUPPORT_SESSIONS)
    assert code == 0
    assert not out.lstrip().startswith("{")
    assert "session C" in out and "stop_reason: completed" in out


def test_replay_of_several_files_reports_all_sessions(capsys):
    sessions = _json(capsys, "replay", SUPPORT_SESSIONS, MORE_SHAPES)["sessions"]
    assert [s["session_id"] for s in sessions] == list("ABCDEFGH")
    by_id = {s["session_id"]: s for s in sessions}
    assert by_id["G"]["stop_reason"] == "explicit_finish"
    assert by_id["F"]["stop_reason"] == "error_streak"


def test_replay_compact_json_is_one_line(capsys):
    code, out, _ = _run(capsys, "replay", SUPPORT_SESSIONS, "--format", "json", "--compact")
    assert code == 0
    assert out.count("\n") == 1
    assert len(json.loads(out)["sessions"]) == 4


# --- check ------------------------------------------------------------------------------------


def test_check_passes_on_the_bundled_suites(capsys):
    code, out, err = _run(capsys, "check", SUPPORT_SESSIONS, MORE_SHAPES)
    assert code == 0, out + err
    assert "MISS" not in out
    assert "8 labelled sessions, 0 misses" in out
    # The confusion table: 5 must-stop sessions stopped, 3 must-pass sessions passed.
    assert "stopped  passed" in out
    assert [line.split() for line in out.splitlines() if line.strip().startswith("must ")] == [
        ["must", "stop", "5", "0"],
        ["must", "pass", "0", "3"],
    ]


def test_check_exits_1_and_names_each_missed_label(capsys):
    code, out, _ = _run(capsys, "check", WRONG_LABEL_SUITE)
    assert code == 1
    assert "ok   right-fake" in out
    assert "MISS wrong-stop" in out and "missing: tool_loop" in out
    assert "MISS wrong-pass" in out
    assert [line.split() for line in out.splitlines() if line.strip().startswith("must ")] == [
        ["must", "stop", "1", "1"],
        ["must", "pass", "1", "0"],
    ]
    assert "3 labelled sessions, 2 misses" in out


def test_check_json_reports_misses(capsys):
    code, out, _ = _run(capsys, "check", WRONG_LABEL_SUITE, "--format", "json")
    assert code == 1
    document = json.loads(out)
    assert document["misses"] == 2
    assert {s["session_id"]: s["ok"] for s in document["sessions"]} == {
        "right-fake": True, "wrong-stop": False, "wrong-pass": False,
    }


def test_check_missing_one_of_several_expected_probes_is_a_miss(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        "sessions:\n"
        "  - id: L\n"
        "    expect: {stop: [tool_loop, cycle]}\n"
        "    steps:\n"
        "      - {tool: q, args: {x: 1}, result: same}\n"
        "      - {tool: q, args: {x: 1}, result: same}\n"
        "      - {tool: q, args: {x: 1}, result: same}\n",
        encoding="utf-8",
    )
    code, out, _ = _run(capsys, "check", str(suite))
    assert code == 1
    assert "missing: cycle" in out


def test_check_with_profile_default_misses_session_d(capsys):
    code, out, _ = _run(capsys, "check", SUPPORT_SESSIONS, "--profile", "default")
    assert code == 1
    assert "MISS D" in out


def test_check_without_labels_is_unusable_input(tmp_path, capsys):
    suite = tmp_path / "unlabelled.yaml"
    suite.write_text("steps:\n  - {tool: q, args: {}, result: 1}\n", encoding="utf-8")
    code, out, err = _run(capsys, "check", str(suite))
    assert code == 2
    assert len(err.strip().splitlines()) == 1


# --- report and demo -------------------------------------------------------------------------


def test_report_prints_stop_reason_shares_and_percentiles(capsys):
    code, out, _ = _run(capsys, "report", SUPPORT_SESSIONS, MORE_SHAPES)
    assert code == 0
    assert "8 sessions" in out
    sections = [block.splitlines() for block in out.split("\n\n")]
    reasons = next(block for block in sections if block[0].split()[:1] == ["stop_reason"])
    rows = {line.split()[0]: line.split()[1:] for line in reasons[1:]}
    assert rows["completed"] == ["2", "25.0%"]
    assert rows["fake_completion"] == ["2", "25.0%"]
    assert rows["explicit_finish"] == ["1", "12.5%"]
    assert sum(int(row[0]) for row in rows.values()) == 8
    figures = next(block for block in sections if block[0].split()[:4] == ["per", "session", "p50", "p90"])
    assert figures[0].split()[2:] == ["p50", "p90", "p99", "max"]
    per_session = {line.split()[0]: line.split()[1:] for line in figures[1:]}
    # Steps per session: 4 4 4 5 6 8 10 15 -> nearest-rank p50 5, p90 15, p99 15, max 15.
    assert per_session["steps"] == ["5", "15", "15", "15"]
    assert per_session["tokens"][-1] == "4,480"


def test_report_json_figures(capsys):
    document = _json(capsys, "report", SUPPORT_SESSIONS, MORE_SHAPES)
    assert document["sessions"] == 8
    assert document["stop_reasons"]["completed"] == {"count": 2, "share": 0.25}
    assert sum(entry["count"] for entry in document["stop_reasons"].values()) == 8
    assert document["steps"]["p50"] == 5
    assert document["steps"]["p90"] == 15
    assert document["tokens"]["max"] == 4480
    assert document["stalls"]["fake_completion"] == 2


def test_demo_runs_a_live_agent_replays_it_and_checks_the_suite(capsys, tmp_path):
    code, out, err = _run(capsys, "demo", "--out", str(tmp_path / "demo"))
    assert code == 0, err
    assert "stuck-parcel     tool_loop" in out
    assert "phantom-refund   fake_completion" in out
    assert "honest-refund    completed" in out
    assert out.count("same stop_reason and alerts at the same sequence numbers") == 3
    assert "8 labelled sessions, 0 misses" in out


def test_demo_keeps_its_trace_and_the_replay_command_it_prints_works(tmp_path):
    done = _subprocess(str(AGENTGUARD_SCRIPT), "demo", "--out", "my demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "my demo").iterdir()) == ["policy.toml", "trace.jsonl"]
    command = done.stdout.rstrip().splitlines()[-1].strip()
    assert command.endswith("agentguard replay 'my demo/trace.jsonl' --policy 'my demo/policy.toml'")
    # It works pasted into the user's shell, where the virtual environment is not activated.
    bin_dir = str(AGENTGUARD_SCRIPT.parent)
    shell_path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != bin_dir)
    again = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                           env={**os.environ, "PATH": shell_path})
    assert again.returncode == 0, again.stderr
    assert "stop_reason: tool_loop" in again.stdout and "stop_reason: fake_completion" in again.stdout
    # A second run replaces the trace instead of appending to it: still three sessions.
    assert _subprocess(str(AGENTGUARD_SCRIPT), "demo", "--out", "my demo", cwd=tmp_path).returncode == 0
    third = _subprocess(str(AGENTGUARD_SCRIPT), *shlex.split(command)[1:], cwd=tmp_path)
    assert "3 sessions, 2 stalled" in third.stdout


def test_demo_defaults_to_a_kept_folder_in_the_working_directory(tmp_path):
    done = _subprocess(sys.executable, "-m", "otel_agentguard", "demo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "agentguard-demo" / "trace.jsonl").stat().st_size > 0
    assert done.stdout.rstrip().endswith(
        "agentguard replay agentguard-demo/trace.jsonl --policy agentguard-demo/policy.toml")


def test_demo_output_folder_that_cannot_be_written_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, out, err = _run(capsys, "demo", "--out", str(blocker / "demo"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"agentguard: {blocker / 'demo'}: cannot write")


def test_replay_table_says_what_each_number_counts(tmp_path):
    done = _subprocess(str(AGENTGUARD_SCRIPT), "demo", "--out", "d", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # The live table and the replay both name the tool_loop's evidence by sequence number and
    # say on the line what those numbers are; the step total says what it counts.
    assert any(line.split()[:4] == ["stuck-parcel", "tool_loop", "5", "750"] and line.endswith("tool_loop: seq 2 4 6")
               for line in lines)
    assert "  ! tool_loop at seq 6; evidence: seq 2 4 6 (sequence numbers count model and tool calls)" in lines
    assert any("| 5 steps (tool calls + final answer) |" in line for line in lines)
    assert any(line.startswith("  steps: tool calls + final answer") and "seq: sequence numbers" in line
               for line in lines)


# --- as a real process --------------------------------------------------------------------------


def test_python_dash_m_replay_json():
    done = _subprocess(sys.executable, "-m", "otel_agentguard", "replay", SUPPORT_SESSIONS, "--format", "json")
    assert done.returncode == 0, done.stderr
    sessions = _by_id(json.loads(done.stdout))
    assert sessions["A"]["stop_reason"] == "fake_completion"
    assert sessions["A"]["alerts"][0]["evidence"] == [3, 4, 5]


def test_console_script_check_bundled_suites():
    assert AGENTGUARD_SCRIPT.exists(), "the agentguard console script is not installed"
    done = _subprocess(str(AGENTGUARD_SCRIPT), "check", SUPPORT_SESSIONS, MORE_SHAPES)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 misses" in done.stdout


def test_console_script_check_wrong_label_exits_1():
    done = _subprocess(str(AGENTGUARD_SCRIPT), "check", WRONG_LABEL_SUITE)
    assert done.returncode == 1
    assert "MISS wrong-stop" in done.stdout


def test_console_script_demo():
    done = _subprocess(str(AGENTGUARD_SCRIPT), "demo")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "0 misses" in done.stdout


def test_console_script_version():
    done = _subprocess(str(AGENTGUARD_SCRIPT), "--version")
    assert done.returncode == 0
    assert done.stdout.startswith("agentguard ")


@pytest.mark.parametrize("name", ["missing.jsonl", "missing.yaml"])
def test_subprocess_missing_file_exits_2_without_traceback(tmp_path, name):
    path = tmp_path / name
    done = _subprocess(sys.executable, "-m", "otel_agentguard", "replay", str(path))
    assert done.returncode == 2, done.stderr[-300:]
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert str(path) in done.stderr


def test_subprocess_deeply_nested_json_exits_2_without_traceback(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "\n", encoding="utf-8")
    done = _subprocess(str(AGENTGUARD_SCRIPT), "replay", str(path))
    assert done.returncode == 2, done.stderr[-500:]
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert f"{path}:1" in done.stderr


def test_subprocess_usage_error_exits_2():
    done = _subprocess(str(AGENTGUARD_SCRIPT), "replay")  # no FILE
    assert done.returncode == 2
    assert "Traceback" not in done.stderr


# --- unusable input: exit 2, one line naming file (and line), no traceback ------------------

TRAJECTORY_UNKNOWN_KEY = """\
sessions:
  - id: X
    steps:
      - {id: x1, tool: t, args: {}, result: ok}
      - {id: x2, tool: t, args: {}, bogus: 1}
"""
TRAJECTORY_NEITHER = """\
sessions:
  - id: X
    steps:
      - {id: x1, tool: t, args: {}, result: ok}
      - {id: x2, args: {q: 1}, tokens: 5}
"""
TRAJECTORY_BAD_EXPECT = """\
sessions:
  - id: X
    steps:
      - {id: x1, tool: t, args: {}, result: ok}
  - id: Y
    expect: {stop: [tool_lop]}
    steps:
      - {id: y1, tool: t, args: {}, result: ok}
"""
INVALID_YAML = """\
sessions:
  - id: X
    steps:
   - {id: x1, tool: t}
"""
OTLP_WITHOUT_TRACE_ID = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
    "spanId": "00000000000000aa", "name": "execute_tool q", "startTimeUnixNano": "1",
    "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}],
}]}]}]})
OTLP_OK = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
    "traceId": "0" * 31 + "1", "spanId": "00000000000000ab", "name": "execute_tool q", "startTimeUnixNano": "1",
    "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "execute_tool"}}],
}]}]}]})

# (id, file name, content, line expected in the message or None, fragment the message must contain)
BAD_FILES = [
    ("invalid-json-line-3", "spans.jsonl", OTLP_OK + "\n" + OTLP_OK + "\n{bad json\n", 3, "invalid JSON"),
    ("invalid-yaml", "bad.yaml", INVALID_YAML, 4, "YAML"),
    ("unknown-step-key", "unknown.yaml", TRAJECTORY_UNKNOWN_KEY, 5, "'bogus'"),
    ("step-neither-tool-nor-answer", "neither.yaml", TRAJECTORY_NEITHER, 5, "steps[2]"),
    ("bad-expect-label", "expect.yaml", TRAJECTORY_BAD_EXPECT, 6, "expect"),
    ("otlp-span-without-trace-id", "spans.jsonl", OTLP_OK + "\n" + OTLP_WITHOUT_TRACE_ID + "\n", 2, "traceId"),
    ("not-utf8-yaml", "latin1.yaml", "sessions:\n  - id: caf\xe9\n".encode("latin-1"), None, "UTF-8"),
    ("unrecognised-json", "other.jsonl", '{"hello": "world"}\n', 1, "not a recognised format"),
    ("unknown-top-level-key", "top.yaml", "sesions: []\nsteps: []\n", 1, "'sesions'"),
    ("deep-json-lines", "deep.jsonl", "[" * 100_000 + "\n", 1, ""),
    ("deep-json-document", "deep.json", "[" * 100_000 + "\n", None, ""),
    ("deep-pretty-json-document", "deep_pretty.json", "{\n" + "[" * 100_000 + "\n", None, ""),
    ("deep-yaml", "deep.yaml", "[" * 100_000 + "\n", 1, ""),
    ("infinite-tokens-yaml", "inf.yaml", "steps:\n  - {tool: t, args: {}, result: 1, tokens: .inf}\n", 2, "tokens"),
    ("infinite-tokens-json", "inf.jsonl", '{"steps": [{"tool": "t", "args": {}, "tokens": 1e999}]}\n', None, "tokens"),
    (
        "agent-trace-infinite-timestamp",
        "agent-trace.jsonl",
        '{"session_id": "s", "sequence": 1, "event": "tool_call_planned", "tool": "t", "timestamp": 1e999}\n',
        1,
        "timestamp",
    ),
    ("otlp-infinite-start-time", "spans.jsonl", OTLP_OK.replace('"startTimeUnixNano": "1"', '"startTimeUnixNano": 1e999')
     + "\n", 1, ""),
]


def _assert_one_line_error(code: int, out: str, err: str, path: Path, line: int | None) -> str:
    assert code == 2, (out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    message = lines[0]
    assert str(path) in message
    if line is not None:
        assert f"{path}:{line}:" in message, message
    assert out == ""
    return message


@pytest.mark.parametrize(
    ("name", "content", "line", "fragment"), [b[1:] for b in BAD_FILES], ids=[b[0] for b in BAD_FILES]
)
def test_bad_input_file_exits_2_with_one_line(tmp_path, capsys, name, content, line, fragment):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    code, out, err = _run(capsys, "replay", str(path))
    message = _assert_one_line_error(code, out, err, path, line)
    assert fragment in message


def _alias_bomb(levels: int) -> str:
    """A YAML file of about 1 KB whose aliases expand to 9**levels strings."""
    lines = ["steps:", "  - tool: t", "    args:", '      a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"      a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    lines.append(f"    result: *a{levels}")
    return "\n".join(lines) + "\n"


def test_yaml_alias_bomb_is_bounded(tmp_path):
    # "documents are bounded in size and depth": a 1 KB file must not take minutes and gigabytes
    # (rejected as unusable input, or judged with bounded work: either is fine).
    resource = pytest.importorskip("resource")
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(12), encoding="utf-8")  # 9**12 strings once expanded
    assert path.stat().st_size < 2000

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_AGENTGUARD_P")}
    try:
        done = subprocess.run([str(AGENTGUARD_SCRIPT), "replay", str(path)], capture_output=True, text=True,
                              timeout=10, env=env, preexec_fn=limit_memory)
    except subprocess.TimeoutExpired:
        pytest.fail("replay of a 1 KB alias-bomb YAML file ran for more than 10 s")
    assert "Traceback" not in done.stderr, done.stderr[-300:]
    assert done.returncode in (0, 2)


def test_otlp_error_names_the_file_once(tmp_path, capsys):
    path = tmp_path / "spans.jsonl"
    path.write_text(OTLP_WITHOUT_TRACE_ID + "\n", encoding="utf-8")
    code, out, err = _run(capsys, "replay", str(path))
    message = _assert_one_line_error(code, out, err, path, 1)
    assert message.count(str(path)) == 1, message


@pytest.mark.parametrize("name", ["missing.jsonl", "missing.json", "missing.yaml"])
def test_missing_file_exits_2(tmp_path, capsys, name):
    path = tmp_path / name
    code, out, err = _run(capsys, "replay", str(path))
    message = _assert_one_line_error(code, out, err, path, None)
    assert "no such file" in message.lower()


@pytest.mark.parametrize("name", ["traces", "traces.yaml", "traces.json"])
def test_directory_exits_2(tmp_path, capsys, name):
    path = tmp_path / name
    path.mkdir()
    code, out, err = _run(capsys, "replay", str(path))
    _assert_one_line_error(code, out, err, path, None)


def test_missing_file_among_good_ones_exits_2(tmp_path, capsys):
    path = tmp_path / "gone.jsonl"
    code, out, err = _run(capsys, "replay", SUPPORT_SESSIONS, str(path))
    _assert_one_line_error(code, out, err, path, None)


def test_unknown_profile_exits_2(capsys):
    code, out, err = _run(capsys, "replay", SUPPORT_SESSIONS, "--profile", "nope")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "'nope'" in err and "--profile" in err
    assert "Traceback" not in err


def test_unknown_compare_profile_exits_2(capsys):
    code, out, err = _run(capsys, "replay", SUPPORT_SESSIONS, "--compare-profile", "nope")
    assert code == 2 and out == ""
    assert "'nope'" in err and len(err.strip().splitlines()) == 1


def test_bad_policy_file_exits_2_naming_file_line_and_key(tmp_path, capsys):
    policy = tmp_path / "p.toml"
    policy.write_text('version = "v"\n[profiles.default]\nwindw = 6\n', encoding="utf-8")
    code, out, err = _run(capsys, "replay", SUPPORT_SESSIONS, "--policy", str(policy))
    message = _assert_one_line_error(code, out, err, policy, 3)
    assert "profiles.default.windw" in message
    assert "did you mean 'window'" in message


def test_missing_policy_file_exits_2(tmp_path, capsys):
    policy = tmp_path / "absent.toml"
    code, out, err = _run(capsys, "replay", SUPPORT_SESSIONS, "--policy", str(policy))
    _assert_one_line_error(code, out, err, policy, None)


def test_trajectory_naming_a_missing_policy_exits_2(tmp_path, capsys):
    suite = tmp_path / "suite.yaml"
    suite.write_text("policy: nowhere.toml\nsteps:\n  - {tool: q, args: {}, result: 1}\n", encoding="utf-8")
    code, out, err = _run(capsys, "replay", str(suite))
    _assert_one_line_error(code, out, err, tmp_path / "nowhere.toml", None)


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.json", "empty.yaml"])
@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["zero-bytes", "blank-lines"])
def test_empty_file_is_an_error_naming_it(tmp_path, capsys, name, content):
    # An exporter that saw no spans leaves an empty file: in CI that hides a broken export.
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    code, out, err = _run(capsys, "replay", str(path))
    message = _assert_one_line_error(code, out, err, path, None)
    assert "no sessions" in message and "--allow-empty" in message


@pytest.mark.parametrize("command", ["replay", "check", "report"])
def test_no_sessions_in_several_files_names_them_all(tmp_path, capsys, command):
    first, second = tmp_path / "a.jsonl", tmp_path / "b.yaml"
    first.write_text("", encoding="utf-8")
    second.write_text("sessions: []\n", encoding="utf-8")
    code, out, err = _run(capsys, command, str(first), str(second))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert str(first) in err and str(second) in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["empty.jsonl", "empty.json", "empty.yaml"])
@pytest.mark.parametrize("content", ["", "\n\n  \n"], ids=["zero-bytes", "blank-lines"])
def test_empty_file_with_allow_empty_is_no_sessions(tmp_path, capsys, name, content):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    code, out, err = _run(capsys, "replay", str(path), "--allow-empty")
    assert (code, err) == (0, "")
    assert "no sessions found" in out


def test_empty_file_json_output_with_allow_empty_has_no_sessions(tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_text("", encoding="utf-8")
    assert _json(capsys, "replay", str(path), "--allow-empty") == {"sessions": []}


def test_check_with_allow_empty_and_no_sessions_passes(tmp_path, capsys):
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    code, out, err = _run(capsys, "check", str(path), "--allow-empty")
    assert (code, err) == (0, "")
    assert "0 labelled sessions, 0 misses" in out


def test_check_of_unlabelled_sessions_stays_an_error_with_allow_empty(capsys):
    # --allow-empty is about no sessions at all, not about a suite without labels.
    code, out, err = _run(capsys, "check", str(EXAMPLES / "support_sessions.yaml"), "--allow-empty", "--profile", "default")
    assert code in (0, 1)  # the bundled suite is labelled: it runs
    path = DATA / "wrong_label_suite.yaml"
    assert path.exists()


# --- what a newcomer meets first ---------------------------------------------------------------


def test_no_arguments_print_the_help():
    done = _subprocess(str(AGENTGUARD_SCRIPT))
    assert done.returncode == 0 and "usage: agentguard" in done.stdout
    assert all(command in done.stdout for command in ("replay", "check", "examples", "serve"))


@pytest.mark.parametrize(("argv", "usage"), [
    (["--bogus"], "usage: agentguard [-h]"),
    (["replay", "--bogus"], "usage: agentguard replay"),
    (["replay", "--bogus", "x.jsonl"], "usage: agentguard replay"),
    (["check", "--nope=1", "a.yaml"], "usage: agentguard check"),
])
def test_a_bad_flag_is_named_in_the_usage_of_its_command(argv, usage):
    done = _subprocess(str(AGENTGUARD_SCRIPT), *argv)
    flag = argv[1].split("=")[0] if argv[0] != "--bogus" else "--bogus"
    assert done.returncode == 2
    assert usage in done.stderr and f"unrecognized argument: {flag}" in done.stderr, done.stderr


def test_examples_are_written_where_asked_and_never_over_a_file(tmp_path, capsys):
    code, out, _ = _run(capsys, "examples", str(tmp_path / "ex"))
    assert code == 0
    written = sorted(p.name for p in (tmp_path / "ex").iterdir())
    assert written == ["more_shapes.yaml", "policy.toml", "support_sessions.yaml"]
    assert out.split() == [str(tmp_path / "ex" / name) for name in ("policy.toml", "support_sessions.yaml",
                                                                   "more_shapes.yaml")]
    code, _, err = _run(capsys, "examples", str(tmp_path / "ex"))
    assert code == 2 and "exists already (--force overwrites it)" in err
    assert _run(capsys, "examples", str(tmp_path / "ex"), "--force")[0] == 0
    code, out, _ = _run(capsys, "examples", "--list")
    assert code == 0 and "support_sessions.yaml" in out and "regression suite" in out
    # and what they are for works on them
    assert _run(capsys, "check", str(tmp_path / "ex" / "support_sessions.yaml"))[0] == 0


def test_counts_agree_with_their_nouns(tmp_path, capsys):
    suite = tmp_path / "one.json"
    suite.write_text(json.dumps({"sessions": [{"id": "only", "expect": "pass", "steps": [
        {"tool": "get_order", "args": {"order": "A1"}, "result": "paid"}, {"answer": "Your order A1 has the status paid."}]}]}))
    code, out, err = _run(capsys, "check", str(suite))
    assert code == 0, err
    assert "1 labelled session, 0 misses" in out
    code, out, _ = _run(capsys, "replay", str(suite))
    assert "1 session, 0 stalled" in out
