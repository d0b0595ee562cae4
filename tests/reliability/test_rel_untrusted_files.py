"""Policy and trace files are data: parsed without executing anything (no YAML object
construction, no pickle anywhere in the package) and bounded in size and depth. What
tests/test_cli.py already covers (deep JSON and YAML, the alias bomb, non-UTF-8, infinities) is
not repeated here.
"""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path

import pytest

from otel_agentguard.judge.policy import PolicyError, load_policy, parse_policy
from otel_agentguard.replay import InputError, read_files
from otel_agentguard.replay import sources as replay_sources
from otel_agentguard.replay.cli import run

PACKAGE = Path(__file__).resolve().parents[2] / "otel_agentguard"
CANARY_CALLS: list[str] = []


def canary(*args: object) -> str:
    """What a YAML tag would call if the loader constructed Python objects."""
    CANARY_CALLS.append(repr(args))
    return "called"


def _yaml_with(tagged: str) -> str:
    return "steps:\n  - tool: t\n    args:\n      x: " + tagged + "\n    result: 1\n"


TAGS = {
    "object-apply": f"!!python/object/apply:{__name__}.canary ['pwned']",
    "object-new": "!!python/object/new:collections.OrderedDict [[]]",
    "name": f"!!python/name:{__name__}.canary",
    "module": "!!python/module:os",
    "object": f"!!python/object:{__name__}.Path {{}}",
    "os-system": "!!python/object/apply:os.system ['touch {canary_file}']",
    "subprocess": "!!python/object/apply:subprocess.check_output [['touch', '{canary_file}']]",
    "custom-tag": "!mytag 1",
}


@pytest.mark.parametrize("tag", sorted(TAGS))
def test_yaml_tags_that_build_python_objects_are_refused_and_nothing_runs(tmp_path, capsys, tag):
    canary_file = tmp_path / "canary"
    path = tmp_path / "trace.yaml"
    path.write_text(_yaml_with(TAGS[tag].replace("{canary_file}", str(canary_file))), encoding="utf-8")
    CANARY_CALLS.clear()
    code = run(["replay", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and str(path) in err and "Traceback" not in err
    assert CANARY_CALLS == [] and not canary_file.exists()


def test_plain_yaml_tags_stay_data(tmp_path):
    # !!binary, !!set, !!timestamp are safe (no code), and are read as plain values or refused, not run.
    path = tmp_path / "trace.yaml"
    path.write_text("steps:\n  - tool: t\n    args: {b: !!binary aGVsbG8=, s: !!set {a: null}}\n    result: 1\n",
                    encoding="utf-8")
    try:
        read_files([path], parse_policy(""))
    except InputError:
        pass


PICKLE_LIKE = re.compile(
    r"\b(import\s+(c?pickle|marshal|shelve|dill|cloudpickle|jsonpickle)|(c?pickle|marshal|shelve|dill)\.loads?\b"
    r"|yaml\.(unsafe_load|full_load|load_all)\b|\b(Full|Unsafe)Loader\b|\beval\(|\bexec\(|\b__import__\()"
)


def test_no_pickle_eval_or_unsafe_yaml_anywhere_in_the_package():
    offenders = []
    for file in sorted(PACKAGE.rglob("*.py")):
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            code = line.split("#", 1)[0]
            if PICKLE_LIKE.search(code):
                offenders.append(f"{file.relative_to(PACKAGE)}:{number}: {line.strip()}")
    assert offenders == []
    # YAML is built from the safe loaders' events: no yaml.load at all, only the safe loader classes.
    loader = (PACKAGE / "replay" / "_yaml.py").read_text(encoding="utf-8")
    assert re.findall(r"yaml\.(?:safe_)?load\(", loader) == []
    assert set(re.findall(r"\b\w*Loader\b", loader)) <= {"CSafeLoader", "SafeLoader"}


def test_the_grep_above_can_find_what_it_looks_for():
    assert PICKLE_LIKE.search("import pickle") and PICKLE_LIKE.search("data = pickle.loads(blob)")
    assert PICKLE_LIKE.search("yaml.unsafe_load(text)") and PICKLE_LIKE.search("eval(expression)")
    assert not PICKLE_LIKE.search("evaluate(x)") and not PICKLE_LIKE.search("pickled = False")


# --- policy files ------------------------------------------------------------------------------------------


def test_a_policy_file_cannot_run_code(tmp_path):
    # TOML has no tags, no includes, no expressions: a policy that tries is a typed value or an error.
    path = tmp_path / "policy.toml"
    path.write_text('version = "__import__(\'os\').system(\'touch x\')"\n[tools."!!python/object/apply:os.system"]\n'
                    'effect = "read"\n', encoding="utf-8")
    policy = load_policy(path)
    assert policy.version.startswith("__import__")  # just a string
    assert not (tmp_path / "x").exists()


def test_a_policy_file_is_bounded_in_size(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text('version = "big"\n' + "# padding\n" * 120_000, encoding="utf-8")  # > 1 MiB
    with pytest.raises(PolicyError, match="larger than"):
        load_policy(path)


@pytest.mark.parametrize("nesting", ["array", "inline-table"])
def test_a_deeply_nested_policy_is_a_policy_error_not_a_traceback(tmp_path, capsys, nesting):
    depth = 5000
    body = "[" * depth + "]" * depth if nesting == "array" else "{a = " * depth + "1" + "}" * depth
    path = tmp_path / "deep.toml"
    path.write_text(f"version = {body}\n", encoding="utf-8")
    try:
        load_policy(path)
        raised = None
    except Exception as exc:  # noqa: BLE001 - which exception is the point
        raised = exc
    assert isinstance(raised, PolicyError), f"{type(raised).__name__}"
    code = run(["replay", str(PACKAGE / "examples" / "support_sessions.yaml"), "--policy", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


# --- trace files ----------------------------------------------------------------------------------------------


def test_a_huge_trajectory_document_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(replay_sources, "MAX_YAML_BYTES", 1 << 20)
    path = tmp_path / "big.yaml"
    path.write_text("steps:\n" + "  - {tool: t, args: {}, result: 1}\n" * 40_000, encoding="utf-8")
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="larger than"):
            read_files([path], parse_policy(""))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024  # refused from its size, not parsed


def test_a_huge_json_line_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(replay_sources, "MAX_LINE_BYTES", 1 << 20)
    path = tmp_path / "spans.jsonl"
    line = json.dumps({"resourceSpans": []})
    path.write_text(line + "\n" + json.dumps({"resourceSpans": [], "pad": "x" * (8 << 20)}) + "\n", encoding="utf-8")
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match="longer than"):
            read_files([path], parse_policy(""))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"read {peak / 2**20:.1f} MiB to refuse a line over 1 MiB"
