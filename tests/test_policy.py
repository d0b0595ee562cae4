"""The TOML policy: the documented example, built-in defaults, inheritance, task types,
every kind of mistake as one clear PolicyError, and runtime profile resolution."""

from __future__ import annotations

import copy
import logging
import pickle
import re
import weakref
from pathlib import Path

import pytest

from otel_agentguard.judge.policy import Policy, PolicyError, Profile, load_policy, parse_policy
from otel_agentguard.replay.cli import EXAMPLES

# The documented example policy, verbatim.
EXAMPLE_POLICY = """\
version = "2026-11-30"          # recorded on every session span

[profiles.default]
window = 6                       # sliding window of tool steps
repeat_threshold = 3             # identical calls (no new result) in the window
no_progress_steps = 4            # consecutive steps with no new state fingerprint
error_streak = 4                 # consecutive failed or empty tool results
max_steps = 12                   # tool steps plus the final answer
max_tokens = 4000
# also: max_cost_usd, max_wall_time_s, max_model_calls, cycle_repeats ...

[profiles.long_chain]
window = 8
repeat_threshold = 5
no_progress_steps = 6
max_steps = 18
max_tokens = 6000

[tools.update_order]
effect = "write"                 # the tool contract: only these count as side effects

[tools.fetch_sources]
unordered_keys = ["urls"]        # list order carries no meaning for these arguments
noise_keys = ["cursor"]          # added to the global noise keys for this tool
"""

EXPECTED_DEFAULT = {
    "window": 6,
    "repeat_threshold": 3,
    "no_progress_steps": 4,
    "error_streak": 4,
    "max_steps": 12,
    "max_tokens": 4000,
}
EXPECTED_LONG_CHAIN = {
    "window": 8,
    "repeat_threshold": 5,
    "no_progress_steps": 6,
    "error_streak": 4,  # not set: inherited from profiles.default
    "max_steps": 18,
    "max_tokens": 6000,
}


def _thresholds(profile: Profile) -> dict[str, int]:
    return {key: getattr(profile, key) for key in EXPECTED_DEFAULT}


def _write(tmp_path: Path, text: str | bytes, name: str = "policy.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def no_profile_env(monkeypatch):
    monkeypatch.delenv("OTEL_AGENTGUARD_PROFILE", raising=False)


# --- the documented example -----------------------------------------------------------


def test_a_policy_is_copied_pickled_weakly_referenced_and_subclassed_like_any_object():
    # (Two of its fields are slots, which the compiled judge loads; the rest stay in its dict.)
    policy = parse_policy('version = "slots"\nfinish_tool = "done"\n[tools.refund]\neffect = "write"\n')
    for twin in (copy.copy(policy), pickle.loads(pickle.dumps(policy))):
        assert (twin.version, twin.finish_tool, twin.effect("refund")) == ("slots", "done", "write")
        assert twin.prices.cost("unpriced", 10, 10) == policy.prices.cost("unpriced", 10, 10)
    assert weakref.ref(policy)() is policy
    policy.__class__ = type("OwnPolicy", (Policy,), {})
    policy.note = "an attribute of its own"
    assert policy.finish_tool == "done" and vars(policy)["note"] == "an attribute of its own"


def test_documented_example_parses_with_its_values(tmp_path):
    policy = load_policy(_write(tmp_path, EXAMPLE_POLICY))

    assert policy.version == "2026-11-30"
    assert set(policy.profiles) == {"default", "long_chain"}
    assert _thresholds(policy.profiles["default"]) == EXPECTED_DEFAULT
    assert _thresholds(policy.profiles["long_chain"]) == EXPECTED_LONG_CHAIN
    assert policy.profiles["long_chain"].name == "long_chain"
    assert policy.effect("update_order") == "write"
    assert policy.effect("fetch_sources") is None
    assert policy.effect("search_kb") is None


def test_documented_example_tool_contract_shapes_fingerprints(tmp_path):
    policy = load_policy(_write(tmp_path, EXAMPLE_POLICY))
    fetch = policy.fingerprinter("fetch_sources")
    # unordered_keys: list order is no difference; noise_keys: cursor is dropped.
    first = fetch.arguments({"urls": ["a", "b", "c"], "cursor": 1}).fingerprint
    again = fetch.arguments({"urls": ["c", "a", "b"], "cursor": 2}).fingerprint
    other = fetch.arguments({"urls": ["a", "b", "d"], "cursor": 1}).fingerprint
    assert first == again
    assert first != other
    # Without a contract, list order and unknown keys do matter.
    plain = policy.fingerprinter("fetch_other")
    assert plain.arguments({"urls": ["a", "b"]}).fingerprint != plain.arguments({"urls": ["b", "a"]}).fingerprint
    assert plain.arguments({"q": 1, "cursor": 1}).fingerprint != plain.arguments({"q": 1, "cursor": 2}).fingerprint


def test_documented_example_global_noise_keys_are_dropped_for_every_tool(tmp_path):
    policy = load_policy(_write(tmp_path, EXAMPLE_POLICY))
    fp = policy.fingerprinter("query_logistics")
    base = fp.arguments({"order": "A1001"}).fingerprint
    for noise in ("trace_id", "request_id", "timestamp", "random_seed"):
        assert fp.arguments({"order": "A1001", noise: "x-42"}).fingerprint == base, noise
    assert fp.arguments({"order": "A1001", "page": 2}).fingerprint != base


def test_bundled_example_policy_matches_the_documented_example(example_policy):
    assert example_policy.version == "2026-11-30"
    assert _thresholds(example_policy.profiles["default"]) == EXPECTED_DEFAULT
    assert _thresholds(example_policy.profiles["long_chain"]) == EXPECTED_LONG_CHAIN
    assert example_policy.source == str(EXAMPLES / "policy.toml")


# --- built-in defaults ------------------------------------------------------------------


def test_builtin_defaults_equal_the_documented_default_profile():
    builtin = Policy.builtin()
    profile = builtin.resolve_profile()
    assert profile.name == "default"
    assert _thresholds(profile) == EXPECTED_DEFAULT
    assert _thresholds(Profile()) == EXPECTED_DEFAULT
    assert builtin.finish_tool == "finalize"
    assert {"trace_id", "request_id", "timestamp", "random_seed"} <= builtin.noise_keys


def test_empty_policy_text_gives_the_builtin_defaults():
    policy = parse_policy("", source="empty.toml")
    assert set(policy.profiles) == {"default"}
    assert _thresholds(policy.profiles["default"]) == EXPECTED_DEFAULT


def test_documented_default_profile_equals_builtin_default_profile():
    parsed = parse_policy(EXAMPLE_POLICY).profiles["default"]
    assert parsed == Policy.builtin().profiles["default"]


# --- inheritance and task types ----------------------------------------------------------


def test_profiles_inherit_unset_keys_from_the_files_default_profile():
    policy = parse_policy(
        """
[profiles.default]
error_streak = 7
max_tokens = 9000
cycle_repeats = 5

[profiles.wide]
window = 10
max_tokens = 12000
""",
        source="p.toml",
    )
    wide = policy.profiles["wide"]
    assert wide.window == 10
    assert wide.max_tokens == 12000
    assert wide.error_streak == 7  # inherited from the file's default, not the built-in 4
    assert wide.cycle_repeats == 5
    assert wide.max_steps == 12  # set nowhere: the built-in default
    assert policy.profiles["default"].window == 6


def test_profile_declared_before_default_still_inherits_from_it():
    policy = parse_policy(
        "[profiles.strict]\nmax_steps = 5\n\n[profiles.default]\nmax_tokens = 999\n",
        source="p.toml",
    )
    assert policy.profiles["strict"].max_tokens == 999
    assert policy.profiles["strict"].max_steps == 5


def test_task_types_map_to_profiles():
    policy = parse_policy(
        EXAMPLE_POLICY + '\n[task_types]\nrebooking = "default"\nwarehouse_transfer = "long_chain"\n',
        source="p.toml",
    )
    assert policy.task_types == {"rebooking": "default", "warehouse_transfer": "long_chain"}
    assert policy.resolve_profile(task_type="warehouse_transfer").name == "long_chain"
    assert policy.resolve_profile(task_type="rebooking").name == "default"
    assert policy.resolve_profile(task_type="unmapped").name == "default"
    # The session's own profile name wins over its task type.
    assert policy.resolve_profile("default", task_type="warehouse_transfer").name == "default"


def test_task_type_naming_an_unknown_profile_is_an_error(tmp_path):
    path = _write(tmp_path, EXAMPLE_POLICY + '\n[task_types]\nrefund = "strict"\n')
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    lines = EXAMPLE_POLICY.count("\n") + 3
    assert message.startswith(f"{path}:{lines}: task_types.refund: ")
    assert "'strict'" in message
    assert "\n" not in message


# --- every kind of mistake -------------------------------------------------------------------

# (id, policy text, line in the message or None, dotted key, a fragment the message must contain)
MISTAKES = [
    ("unknown-top-level-key", 'version = "v"\nprofile = 1\n', 2, "profile", "did you mean 'profiles'"),
    ("unknown-top-level-key-no-hint", 'version = "v"\nzzzz = 1\n', 2, "zzzz", "unknown key"),
    (
        "unknown-profile-key",
        "[profiles.default]\nwindow = 6\nrepeat_treshold = 3\n",
        3,
        "profiles.default.repeat_treshold",
        "did you mean 'repeat_threshold'",
    ),
    (
        "unknown-key-in-second-profile",
        "[profiles.default]\nwindow = 6\n\n[profiles.long_chain]\nwindw = 8\n",
        5,
        "profiles.long_chain.windw",
        "did you mean 'window'",
    ),
    ("unknown-tool-key", '[tools.refund]\neffekt = "write"\n', 2, "tools.refund.effekt", "did you mean 'effect'"),
    ("string-for-int", '[profiles.default]\nwindow = "6"\n', 2, "profiles.default.window", "positive integer"),
    ("float-for-int", "[profiles.default]\nmax_steps = 12.5\n", 2, "profiles.default.max_steps", "integer"),
    ("profiles-not-a-table", "profiles = 3\n", 1, "profiles", "table"),
    ("profile-not-a-table", "[profiles]\ndefault = 3\n", 2, "profiles.default", "table"),
    ("tool-not-a-table", '[tools]\nrefund = "write"\n', 2, "tools.refund", "table"),
    ("version-not-a-string", "version = 3\n", 1, "version", "string"),
    ("noise-keys-not-a-list", 'noise_keys = "cursor"\n', 1, "noise_keys", "list of strings"),
    ("zero-max-steps", "[profiles.strict]\nmax_steps = 0\n", 2, "profiles.strict.max_steps", "positive"),
    ("negative-max-tokens", "[profiles.default]\nmax_tokens = -5\n", 2, "profiles.default.max_tokens", "positive"),
    ("negative-cost", "[profiles.default]\nmax_cost_usd = -1.5\n", 2, "profiles.default.max_cost_usd", "positive"),
    ("zero-wall-time", "[profiles.default]\nmax_wall_time_s = 0\n", 2, "profiles.default.max_wall_time_s", "positive"),
    ("nan-cost", "[profiles.default]\nmax_cost_usd = nan\n", 2, "profiles.default.max_cost_usd", "positive"),
    ("bool-for-int", "[profiles.default]\nmax_tokens = true\n", 2, "profiles.default.max_tokens", "bool"),
    ("bool-for-window", "[profiles.default]\nwindow = false\n", 2, "profiles.default.window", "bool"),
    ("bool-for-threshold", "[profiles.default]\nerror_streak = true\n", 2, "profiles.default.error_streak", "bool"),
    ("effect-not-read-or-write", '[tools.refund]\neffect = "delete"\n', 2, "tools.refund.effect", "'read' or 'write'"),
    ("effect-wrong-case", '[tools.refund]\neffect = "Write"\n', 2, "tools.refund.effect", "'Write'"),
    ("bad-regex-in-claims", '[claims.en]\nwrite = ["(unclosed"]\n', 2, "claims.en.write", "regular expression"),
    ("claims-not-a-list", '[claims.en]\nwrite = "submitted"\n', 2, "claims.en.write", "list of strings"),
    (
        "repeat-threshold-over-window",
        "[profiles.default]\nwindow = 3\nrepeat_threshold = 4\n",
        3,
        "profiles.default.repeat_threshold",
        "window",
    ),
    (
        "repeat-threshold-over-inherited-window",
        "[profiles.default]\nwindow = 4\n\n[profiles.loose]\nrepeat_threshold = 5\n",
        5,
        "profiles.loose.repeat_threshold",
        "5 > 4",
    ),
    (
        "unknown-probe-disabled",
        '[profiles.default]\ndisabled_probes = ["tool_lop"]\n',
        2,
        "profiles.default.disabled_probes",
        "tool_lop",
    ),
    (
        "price-not-a-number",
        '[pricing."gpt-4o"]\ninput_usd_per_mtok = 2.5\noutput_usd_per_mtok = "ten"\n',
        3,
        'pricing.gpt-4o.output_usd_per_mtok',
        "number",
    ),
    ("default-profile-missing", 'default_profile = "strict"\n', 1, "default_profile", "'strict'"),
    (
        "pricing-missing-a-price",
        '[pricing."gpt-4o"]\ninput_usd_per_mtok = 2.5\n',
        1,  # no line sets it: the table's header
        'pricing.gpt-4o.output_usd_per_mtok',
        "missing",
    ),
]


@pytest.mark.parametrize(("text", "line", "key", "fragment"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_policy_mistake_is_one_line_naming_file_line_and_key(tmp_path, text, line, key, fragment):
    path = _write(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert "\n" not in message
    if line is None:  # no line in the file holds the mistake: a line number is optional
        assert re.match(rf"{re.escape(str(path))}(:\d+)?: {re.escape(key)}: ", message), message
    else:
        assert message.startswith(f"{path}:{line}: {key}: "), message
    assert fragment in message


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[profiles.long_chain]\nwindow = 8\n\n[profiles]\ndefault.window = 0\n", "profiles.default.window"),
        ('[tools.update_order]\neffect = "write"\n\n[tools]\nrefund.effect = "delete"\n', "tools.refund.effect"),
    ],
    ids=["profile-window", "tool-effect"],
)
def test_mistake_in_a_dotted_key_never_points_at_another_tables_line(tmp_path, text, key):
    # The mistake is on line 5; line 2 holds a valid value of another table with the same key name.
    path = _write(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert re.match(rf"{re.escape(str(path))}(:5)?: {re.escape(key)}: ", message), message


def test_policy_error_is_a_value_error():
    # Callers that catch ValueError (e.g. argument validation) also catch policy mistakes.
    with pytest.raises(ValueError):
        parse_policy("bogus = 1\n")


def test_parse_policy_names_the_given_source():
    with pytest.raises(PolicyError) as info:
        parse_policy("[profiles.default]\nwindow = 0\n", source="team/policy.toml")
    assert str(info.value).startswith("team/policy.toml:2: profiles.default.window: ")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[profiles.default\nwindow = 6\n", 1),
        ('version = "v"\n\n[profiles.default]\nwindow = = 6\n', 4),
        ('version = "v"\nversion = "w"\n', 2),
    ],
    ids=["unclosed-header", "double-equals", "duplicate-key"],
)
def test_invalid_toml_syntax_names_file_and_line(tmp_path, text, line):
    path = _write(tmp_path, text)
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"{path}:{line}: ")
    assert "TOML" in message
    assert "\n" not in message


def test_missing_policy_file_names_the_file(tmp_path):
    path = tmp_path / "nowhere.toml"
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "\n" not in message


def test_directory_as_policy_file_is_a_policy_error(tmp_path):
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: ")


def test_non_utf8_policy_file_names_the_file(tmp_path):
    path = _write(tmp_path, b'version = "caf\xe9"\n')
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "UTF-8" in message
    assert "\n" not in message


def test_first_mistake_in_file_order_is_reported_with_its_line(tmp_path):
    # Two mistakes: the message points at one of them precisely, never at a wrong line.
    path = _write(tmp_path, "[profiles.default]\nwindow = 6\nmax_steps = 0\n\n[tools.x]\neffect = 'rw'\n")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value).startswith((f"{path}:3: profiles.default.max_steps: ", f"{path}:6: tools.x.effect: "))


# --- resolve_profile ----------------------------------------------------------------------


def _policy_warnings(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "otel_agentguard.judge.policy" and r.levelno == logging.WARNING]


def test_resolve_unknown_profile_falls_back_to_default_with_one_warning(no_profile_env, caplog):
    policy = parse_policy(EXAMPLE_POLICY)
    with caplog.at_level(logging.WARNING, logger="otel_agentguard.judge.policy"):
        first = policy.resolve_profile("nope")
        second = policy.resolve_profile("nope")
    assert first.name == second.name == "default"
    warnings = _policy_warnings(caplog)
    assert len(warnings) == 1
    assert "nope" in warnings[0].getMessage()


def test_resolve_known_profile_does_not_warn(no_profile_env, caplog):
    policy = parse_policy(EXAMPLE_POLICY)
    with caplog.at_level(logging.WARNING, logger="otel_agentguard.judge.policy"):
        assert policy.resolve_profile("long_chain").name == "long_chain"
        assert policy.resolve_profile().name == "default"
    assert _policy_warnings(caplog) == []


def test_resolve_warns_once_per_unknown_name(no_profile_env, caplog):
    policy = parse_policy(EXAMPLE_POLICY)
    with caplog.at_level(logging.WARNING, logger="otel_agentguard.judge.policy"):
        for _ in range(3):
            policy.resolve_profile("nope")
            policy.resolve_profile("other")
    assert len(_policy_warnings(caplog)) == 2


def test_resolve_honours_profile_environment_variable(monkeypatch):
    policy = parse_policy(EXAMPLE_POLICY)
    monkeypatch.setenv("OTEL_AGENTGUARD_PROFILE", "long_chain")
    assert policy.resolve_profile().name == "long_chain"
    # A session's own profile still wins over the process-wide default.
    assert policy.resolve_profile("default").name == "default"


def test_resolve_environment_profile_unknown_falls_back_with_warning(monkeypatch, caplog):
    policy = parse_policy(EXAMPLE_POLICY)
    monkeypatch.setenv("OTEL_AGENTGUARD_PROFILE", "no_such_profile")
    with caplog.at_level(logging.WARNING, logger="otel_agentguard.judge.policy"):
        assert policy.resolve_profile().name == "default"
    assert len(_policy_warnings(caplog)) == 1


def test_resolve_task_type_beats_environment_default(monkeypatch):
    policy = parse_policy(EXAMPLE_POLICY + '\n[task_types]\nwarehouse_transfer = "long_chain"\n')
    monkeypatch.setenv("OTEL_AGENTGUARD_PROFILE", "default")
    assert policy.resolve_profile(task_type="warehouse_transfer").name == "long_chain"


def test_resolve_uses_files_default_profile_setting(no_profile_env):
    policy = parse_policy('default_profile = "strict"\n[profiles.strict]\nmax_steps = 5\n')
    assert policy.resolve_profile().name == "strict"
    assert policy.resolve_profile("unknown").max_steps == 5
