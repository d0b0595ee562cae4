"""The TOML policy: profiles of thresholds, tool contracts, prices and claims.

A policy is compiled once at load and never re-read per span. Every mistake
in the file is one :class:`PolicyError` whose message names the file, the line
where it can tell, the key and what was expected::

    policy.toml:4: profiles.default.windw: unknown key (did you mean 'window'?)

Every key the parser accepts is one row of :data:`KEYS` (where it goes, the
kind of value it takes, its default and what it does): the parser reads its
keys, kinds and defaults from that table, and docs/policy.md is generated from
it (``python scripts/policy_reference.py``), so the two cannot drift.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import re
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_agentguard._environ import reader
from otel_agentguard.attributes import PROBE_NAMES
from otel_agentguard.environment_variables import OTEL_AGENTGUARD_POLICY, OTEL_AGENTGUARD_PROFILE
from otel_agentguard.judge import _ranges
from otel_agentguard.judge.claims import BUILTIN_PATTERNS, CLAIM_CATEGORIES, ClaimDetector
from otel_agentguard.judge.claims.classifier import (
    DEFAULT_TIMEOUT_MS,
    MODES,
    ClaimClassifier,
    ClassifierLoadError,
    load_callable,
)
from otel_agentguard.judge.claims.model_judge import ModelJudge
from otel_agentguard.judge.fingerprints.canonical import DEFAULT_NOISE_KEYS, Fingerprinter
from otel_agentguard.judge.pricing import Price, PriceTable
from otel_agentguard.judge.repetition import DEFAULT_MAX_REPEATED_CHARS, DEFAULT_MAX_REPEATS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

logger = logging.getLogger(__name__)

DEFAULT_PROFILE = "default"
DEFAULT_FINISH_TOOL = "finalize"
BUILTIN_VERSION = "builtin"
_MAX_POLICY_BYTES = 1 << 20
EFFECTS = ("read", "write")


_profile_setting = reader(OTEL_AGENTGUARD_PROFILE)  # read at each resolution: a change applies at once
_MAX_FINGERPRINTERS = 1024  # tools past this many get a fresh fingerprinter per call


class PolicyError(ValueError):
    """A policy that cannot be used; the message says where and why."""


# --- every key, once -----------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One policy key: the table it lives in, its name, the kind of value, its default, what it does.

    ``section`` is a dotted table path whose ``<...>`` parts are names the user picks
    (``profiles.<profile>``); a ``name`` in ``<...>`` stands for any key of that table.
    """

    section: str
    name: str
    kind: str
    default: Any
    doc: str

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name


# Kind -> what a value of it must be (the docs' "takes" column).
KINDS: dict[str, str] = {
    "string": "a non-empty string",
    "strings": "a list of strings",
    "bool": "true or false",
    "table": "a table",
    "positive_int": "a positive integer",
    "threshold": "an integer of at least 2",
    "positive_number": "a positive number",
    "probe_list": "a list of probe names",
    "profile_name": "the name of a profile",
    "effect": '"read" or "write"',
    "usd_per_mtok": "a number of USD per million tokens (0 or more)",
    "patterns": "a list of regular expressions",
    "ladder": 'a list of "intervene", "stop", "observe"',
}
NO_DEFAULT = None
PROFILE_SECTION = "profiles.<profile>"
TOOL_SECTION = "tools.<tool>"
PRICE_SECTION = "pricing.<model>"
CLAIM_SECTION = "claims.<language>"

KEYS: tuple[Key, ...] = (
    Key("", "version", "string", BUILTIN_VERSION,
        "Your name for this policy's version; recorded on every session span as `agentguard.policy.version`."),
    Key("", "default_profile", "profile_name", DEFAULT_PROFILE,
        "The profile of a session that names none and whose task type maps to none."),
    Key("", "finish_tool", "string", DEFAULT_FINISH_TOOL,
        "The tool whose successful call ends a session as `explicit_finish`."),
    Key("", "noise_keys", "strings", [],
        "Argument keys dropped at any depth before fingerprinting, added to the built-in "
        f"{', '.join(f'`{k}`' for k in sorted(DEFAULT_NOISE_KEYS))}."),
    Key("", "budget_note", "bool", False,
        "Enforce mode: add a remaining-budget note (\"Step 7 of 15: 8 left ...\") to each model request."),
    Key("", "profiles", "table", NO_DEFAULT, "Named threshold profiles (below)."),
    Key("", "task_types", "table", NO_DEFAULT, "Task type -> profile name (below)."),
    Key("", "tools", "table", NO_DEFAULT, "Per-tool contracts (below)."),
    Key("", "pricing", "table", NO_DEFAULT, "Prices per model name prefix (below)."),
    Key("", "claims", "table", NO_DEFAULT, "Claim patterns per language (below)."),
    Key("", "escalation", "table", NO_DEFAULT, "Enforce mode: what each probe's alert leads to (below)."),
    Key(PROFILE_SECTION, "window", "positive_int", 6,
        "Sliding window of tool steps that `tool_loop` counts repeats in."),
    Key(PROFILE_SECTION, "repeat_threshold", "threshold", 3,
        "Identical calls with the same result within the window that make a `tool_loop` (at most `window`)."),
    Key(PROFILE_SECTION, "no_progress_steps", "threshold", 4,
        "Tool steps in a row that bring no new state fingerprint before `no_progress` fires."),
    Key(PROFILE_SECTION, "error_streak", "threshold", 4,
        "Tool results in a row that failed or came back empty before `error_streak` fires."),
    Key(PROFILE_SECTION, "handoff_bounces", "positive_int", 3,
        "Times control comes back between the same two agents, with no write tool succeeding in between, "
        "before `handoff_loop` fires (A to B and back is one)."),
    Key(PROFILE_SECTION, "max_steps", "positive_int", 12,
        "Budget of steps: tool calls plus the final answer."),
    Key(PROFILE_SECTION, "max_tokens", "positive_int", 4000,
        "Budget of tokens (input + output, all model calls)."),
    Key(PROFILE_SECTION, "max_cost_usd", "positive_number", NO_DEFAULT,
        "Budget in USD, estimated from `[pricing]` and the built-in price table. Unset: no cost budget."),
    Key(PROFILE_SECTION, "max_wall_time_s", "positive_number", NO_DEFAULT,
        "Budget of seconds from the session's first span to its latest. Unset: none."),
    Key(PROFILE_SECTION, "max_model_calls", "positive_int", NO_DEFAULT,
        "Budget of model calls. Unset: none."),
    Key(PROFILE_SECTION, "cycle_repeats", "threshold", 3,
        "Back-to-back repetitions of a 2-4 call sequence that make a `cycle`."),
    Key(PROFILE_SECTION, "output_max_repeats", "threshold", DEFAULT_MAX_REPEATS,
        "`output_repetition`: copies in a row of one chunk (a sentence, a line) or of a short cycle of chunks "
        "that one answer may hold."),
    Key(PROFILE_SECTION, "output_max_repeated_chars", "positive_int", DEFAULT_MAX_REPEATED_CHARS,
        "`output_repetition`: characters of text repeating what came just before (after the first copy) that "
        "one answer may hold."),
    Key(PROFILE_SECTION, "disabled_probes", "probe_list", [],
        f"Probes this profile does not run ({', '.join(f'`{p}`' for p in PROBE_NAMES)})."),
    Key("task_types", "<task type>", "profile_name", NO_DEFAULT,
        "The profile for sessions of this `task_type` (tight budgets for constrained tasks, loose for exploration)."),
    Key(TOOL_SECTION, "effect", "effect", NO_DEFAULT,
        "The tool contract: only a successful `write` tool counts as the side effect a final answer may claim. "
        "Wins over what the span or the framework says."),
    Key(TOOL_SECTION, "noise_keys", "strings", [],
        "Argument keys of this tool dropped before fingerprinting, added to the global ones."),
    Key(TOOL_SECTION, "unordered_keys", "strings", [],
        "Arguments whose list order carries no meaning: compared as multisets."),
    Key(TOOL_SECTION, "claims", "strings", [],
        "Words that name what this write tool does (\"moved\", \"rescheduled\", \"改期\"): a final answer that "
        "says it did so is a claim even with an unusual verb. A write tool's name already adds its first word; "
        "`=word` takes a past form exactly as written."),
    Key("claims", "classifier", "string", NO_DEFAULT,
        "A callable `module:function` that returns the claim categories of an answer text (a small local model, "
        "an LLM call); used with the built-in rules as `classifier_mode` says, live and in replay."),
    Key("claims", "classifier_mode", "string", "after",
        "`after` (the classifier decides after the rules), `confirm` (only answers the rules flag are asked) or "
        "`instead` (the rules are not used)."),
    Key("claims", "classifier_timeout_ms", "positive_int", 2000,
        "How long a live call waits for the classifier before it falls back to the rules."),
    Key("claims", "judge_url", "string", NO_DEFAULT,
        "An OpenAI-compatible endpoint (`http://127.0.0.1:11434/v1`) whose model judges the answers the rules "
        "cannot read, off the agent's path: live at the session's end, and in replay. The key, if any, comes from "
        "`OTEL_AGENTGUARD_CLAIMS_JUDGE_API_KEY`."),
    Key("claims", "judge_model", "string", NO_DEFAULT, "The model the judge asks (required with `judge_url`)."),
    Key("claims", "judge_timeout_ms", "positive_int", 5000, "The judge's time budget per answer."),
    Key("claims", "judge_calls_per_minute", "positive_int", 60,
        "The judge's rate budget: past it, an answer stays unchecked."),
    Key("claims", "judge_cache", "positive_int", 1024, "Answers the judge remembers (by a hash of their text)."),
    Key(PRICE_SECTION, "input_usd_per_mtok", "usd_per_mtok", NO_DEFAULT,
        "USD per million input tokens; a model uses its longest listed name prefix, and a name here overrides "
        "the built-in price. Required together with the next key."),
    Key(PRICE_SECTION, "output_usd_per_mtok", "usd_per_mtok", NO_DEFAULT,
        "USD per million output tokens. Required together with the previous key."),
    Key(CLAIM_SECTION, "<category>", "patterns", NO_DEFAULT,
        "Regular expressions that find an action claim in a final answer; a language named here replaces "
        "its built-in patterns, a new one is added. Categories: "
        + ", ".join(f"`{c}`" for c in CLAIM_CATEGORIES) + "."),
    Key("escalation", "<probe>", "ladder", NO_DEFAULT,
        "Enforce mode: what a probe's alert leads to, rung by rung (an `intervene` moves on to the next rung "
        "when the model repeats the call); `observe` turns the probe's enforcement off. Defaults: `tool_loop`, "
        "`cycle`, `error_streak` intervene, then stop; the others stop."),
)


def keys_in(section: str) -> dict[str, Key]:
    """The keys of one table of :data:`KEYS`, by name, in table order."""
    return {key.name: key for key in KEYS if key.section == section}


def _default(section: str, name: str) -> Any:
    return keys_in(section)[name].default


@dataclass(frozen=True)
class Profile:
    """Thresholds of one scenario. Defaults come from :data:`KEYS`."""

    name: str = DEFAULT_PROFILE
    window: int = _default(PROFILE_SECTION, "window")
    repeat_threshold: int = _default(PROFILE_SECTION, "repeat_threshold")
    no_progress_steps: int = _default(PROFILE_SECTION, "no_progress_steps")
    error_streak: int = _default(PROFILE_SECTION, "error_streak")
    handoff_bounces: int = _default(PROFILE_SECTION, "handoff_bounces")
    max_steps: int = _default(PROFILE_SECTION, "max_steps")
    max_tokens: int = _default(PROFILE_SECTION, "max_tokens")
    max_cost_usd: float | None = _default(PROFILE_SECTION, "max_cost_usd")
    max_wall_time_s: float | None = _default(PROFILE_SECTION, "max_wall_time_s")
    max_model_calls: int | None = _default(PROFILE_SECTION, "max_model_calls")
    cycle_repeats: int = _default(PROFILE_SECTION, "cycle_repeats")
    output_max_repeats: int = _default(PROFILE_SECTION, "output_max_repeats")
    output_max_repeated_chars: int = _default(PROFILE_SECTION, "output_max_repeated_chars")
    disabled_probes: tuple[str, ...] = tuple(_default(PROFILE_SECTION, "disabled_probes"))


@dataclass(frozen=True)
class ToolContract:
    name: str
    effect: str | None = None
    noise_keys: frozenset[str] = frozenset()
    unordered_keys: frozenset[str] = frozenset()
    claims: tuple[str, ...] = ()  # words that name what a write tool does ("moved", "改期")


# What the parser accepts, read from KEYS.
_PROFILE_FIELDS: dict[str, str] = {name: key.kind for name, key in keys_in(PROFILE_SECTION).items()}
_TOP_LEVEL = tuple(keys_in(""))
_ESCALATION_ACTIONS = ("intervene", "stop", "observe")
# Probes whose stall is a repeated call are nudged first; the others stop at the next cut point.
DEFAULT_LADDER: dict[str, tuple[str, ...]] = {
    "tool_loop": ("intervene", "stop"),
    "cycle": ("intervene", "stop"),
    "error_streak": ("intervene", "stop"),
    "no_progress": ("stop",),
    "budget_exceeded": ("stop",),
    "fake_completion": ("stop",),
    "output_repetition": ("stop",),
    "handoff_loop": ("stop",),
}
_TOOL_KEYS = tuple(keys_in(TOOL_SECTION))
_CLAIMS_KEYS = tuple(keys_in("claims"))  # beside the [claims.<lang>] tables
_PRICE_KEYS = tuple(keys_in(PRICE_SECTION))


class Policy:
    """A compiled policy. Immutable after construction; safe to share across threads."""

    # What the judge reads at every step, in slots; the rest in the instance dict.
    __slots__ = ("prices", "finish_tool", "__dict__", "__weakref__")

    def __init__(
        self,
        *,
        version: str = BUILTIN_VERSION,
        profiles: Mapping[str, Profile] | None = None,
        default_profile: str = DEFAULT_PROFILE,
        task_types: Mapping[str, str] | None = None,
        tools: Mapping[str, ToolContract] | None = None,
        noise_keys: frozenset[str] = DEFAULT_NOISE_KEYS,
        finish_tool: str = DEFAULT_FINISH_TOOL,
        prices: Mapping[str, Price] | None = None,
        claim_patterns: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
        claim_classifier: ClaimClassifier | None = None,
        claim_judge: ModelJudge | None = None,
        escalation: Mapping[str, tuple[str, ...]] | None = None,
        budget_note: bool = False,
        source: str = "<built-in>",
    ):
        self.version = version
        self.profiles = dict(profiles or {DEFAULT_PROFILE: Profile()})
        self.profiles.setdefault(DEFAULT_PROFILE, Profile())
        if default_profile not in self.profiles:
            raise PolicyError(f"{source}: default_profile: no profile named {default_profile!r}")
        self.default_profile = default_profile
        self.task_types = dict(task_types or {})
        self.tools = dict(tools or {})
        self.noise_keys = frozenset(noise_keys)
        self.finish_tool = finish_tool
        self.prices = PriceTable(prices)
        self.claims = ClaimDetector(claim_patterns, vocabulary=_claim_vocabulary(self.tools.values()),
                                    classifier=claim_classifier, judge=claim_judge)
        # Enforce mode: what to do about each probe's alert, rung by rung (see _enforce).
        self.escalation = {**DEFAULT_LADDER, **(escalation or {})}
        self.budget_note = budget_note
        self.source = source
        self._fingerprinters: dict[str, Fingerprinter] = {}
        self._warned_profiles: set[str] = set()

    @classmethod
    def builtin(cls) -> Policy:
        return cls()

    def resolve_profile(self, name: str | None = None, task_type: str | None = None) -> Profile:
        """The profile for a session: its own name, else its task type's, else the default.

        Runtime lookups fail open: an unknown name logs once and uses the default.
        """
        if not name and task_type:
            name = self.task_types.get(task_type)
        if not name:
            name = _profile_setting() or self.default_profile
        profile = self.profiles.get(name)
        if profile is None:
            if name not in self._warned_profiles and len(self._warned_profiles) < 64:
                self._warned_profiles.add(name)
                logger.warning("unknown agentguard profile %r: using %r", name, self.default_profile)
            profile = self.profiles[self.default_profile]
        return profile

    def effect(self, tool_name: str | None, fallback: str | None = None) -> str | None:
        """The tool's effect: its contract in the policy wins over what the span says."""
        contract = self.tools.get(tool_name) if tool_name else None
        if contract is not None and contract.effect is not None:
            return contract.effect
        return fallback

    def fingerprinter(self, tool_name: str) -> Fingerprinter:
        """The fingerprinter for a tool, built once from its contract."""
        found = self._fingerprinters.get(tool_name)
        if found is not None:
            return found
        contract = self.tools.get(tool_name)
        noise = self.noise_keys | (contract.noise_keys if contract else frozenset())
        unordered = contract.unordered_keys if contract else frozenset()
        found = Fingerprinter(tool_name, noise, unordered)
        if len(self._fingerprinters) < _MAX_FINGERPRINTERS:  # tool names come from spans: bound the cache
            # setdefault is atomic: no lock, so nothing to deadlock on in a forked child.
            found = self._fingerprinters.setdefault(tool_name, found)
        return found


# --- loading ---------------------------------------------------------------------


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Read and compile a TOML policy file; raise :class:`PolicyError` on any mistake."""
    file = Path(path)
    try:
        raw = _read_bounded(file)
    except OSError as exc:
        raise PolicyError(f"{file}: cannot read policy file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_policy(text, source=str(file))


def _read_bounded(file: Path) -> bytes:
    """The bytes of a regular file of at most ``_MAX_POLICY_BYTES``, checked before reading.

    ``/dev/zero``, a FIFO or a directory is refused from its type, a huge file from its
    size, and the read itself stops one byte past the limit (a file may grow meanwhile).
    """
    # Non-blocking: opening a FIFO must not wait for a writer; a regular file ignores the flag.
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PolicyError(f"{file}: not a regular file")
        if info.st_size > _MAX_POLICY_BYTES:
            raise PolicyError(f"{file}: policy file is larger than {_MAX_POLICY_BYTES} bytes")
        raw = handle.read(_MAX_POLICY_BYTES + 1)
    if len(raw) > _MAX_POLICY_BYTES:
        raise PolicyError(f"{file}: policy file is larger than {_MAX_POLICY_BYTES} bytes")
    return raw


def policy_from_env() -> Policy:
    """The policy named by ``OTEL_AGENTGUARD_POLICY``, else the built-in defaults."""
    path = os.environ.get(OTEL_AGENTGUARD_POLICY)
    return load_policy(path) if path else Policy.builtin()


def coerce_policy(policy: Policy | str | os.PathLike[str] | None) -> Policy:
    if policy is None:
        return policy_from_env()
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, (str, os.PathLike)):
        return load_policy(policy)
    raise TypeError(f"policy must be a Policy, a path or None, not {type(policy).__name__}")


def parse_policy(text: str, source: str = "<policy>") -> Policy:
    """Compile policy TOML text. ``source`` names the file in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        where = f"{source}:{found.group(1)}" if found else source
        raise PolicyError(f"{where}: invalid TOML: {exc}") from None
    except ValueError as exc:  # a value TOML parses but Python refuses (an integer of 5,000 digits)
        raise PolicyError(f"{source}: invalid TOML value: {exc}") from None
    except RecursionError:
        raise PolicyError(f"{source}: invalid TOML: nested too deeply") from None
    return _Parser(text, source).policy(data)


class _Parser:
    """Turns a policy's TOML text into a :class:`Policy`, naming file, line and key in every error.

    One class for every section because each check needs the same thing, the line a key
    is on; the keys themselves are one table (``KEYS``), so the class is long but flat.
    """

    def __init__(self, text: str, source: str):
        self._lines = text.splitlines()
        self._source = source

    # -- errors that point at the line --------------------------------------------
    def _error(self, key: str, message: str) -> PolicyError:
        line = self._line_of(key)
        where = f"{self._source}:{line}" if line else self._source
        return PolicyError(f"{where}: {key}: {message}")

    def _line_of(self, dotted: str) -> int | None:
        """The line where ``dotted`` is set: as ``key =`` under its table's header, as a
        dotted key under a parent table, or as a table header itself; else the nearest
        enclosing table's header. ``None`` rather than a guess at another table's line."""
        parts = _split_dotted(dotted)
        headers = self._headers()
        for cut in range(len(parts) - 1, -1, -1):
            table, key = parts[:cut], parts[cut:]
            if table and table not in headers:
                continue
            start = headers[table] if table else -1
            following = [line for line in headers.values() if line > start]
            end = min(following, default=len(self._lines))
            pattern = re.compile(r"^\s*" + r"\s*\.\s*".join(rf'"?{re.escape(k)}"?' for k in key) + r"\s*=")
            for number in range(start + 1, end):
                if pattern.match(self._lines[number]):
                    return number + 1
        for cut in range(len(parts), 0, -1):
            if parts[:cut] in headers:
                return headers[parts[:cut]] + 1
        return None

    def _headers(self) -> dict[tuple[str, ...], int]:
        headers: dict[tuple[str, ...], int] = {}
        for number, line in enumerate(self._lines):
            found = _HEADER.match(line)
            if found:
                headers.setdefault(tuple(_split_dotted(found.group(1))), number)
        return headers

    def _unknown(self, table: Mapping[str, Any], allowed: tuple[str, ...], prefix: str) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (expected one of: {', '.join(allowed)})"
                raise self._error(prefix + _key(key), f"unknown key{hint}")

    def _table(self, value: Any, key: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self._error(key, f"expected a table, got {_describe(value)}")
        return value

    def _string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self._error(key, f"expected a non-empty string, got {_describe(value)}")
        return value

    def _strings(self, value: Any, key: str) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self._error(key, f"expected a list of strings, got {_describe(value)}")
        return tuple(value)

    def _number(self, value: Any, key: str, kind: str) -> Any:
        is_int = isinstance(value, int) and not isinstance(value, bool) and value <= _ranges.MAX_COUNT
        if kind == "positive_int":
            if not is_int or value < 1:
                raise self._error(key, f"expected a positive integer up to 2**63-1, got {_describe(value)}")
        elif kind == "threshold":
            if not is_int or value < 2:
                raise self._error(key, f"expected an integer from 2 to 2**63-1, got {_describe(value)}")
        elif kind == "positive_number":
            allowed = _ranges.USD if key.endswith("_usd") else _ranges.SECONDS
            if not _ranges.within(value, allowed) or not value > 0:
                raise self._error(
                    key, f"expected a positive number up to {allowed.maximum:.3g}, got {_describe(value)}")
            value = float(value)
        return value

    # -- sections -----------------------------------------------------------------------
    def policy(self, data: Mapping[str, Any]) -> Policy:
        self._unknown(data, _TOP_LEVEL, "")
        top = keys_in("")
        version = self._string(data["version"], "version") if "version" in data else top["version"].default
        finish_tool = self._string(data.get("finish_tool", top["finish_tool"].default), "finish_tool")
        noise = DEFAULT_NOISE_KEYS | frozenset(self._strings(data.get("noise_keys", top["noise_keys"].default),
                                                             "noise_keys"))
        profiles = self._profiles(self._table(data.get("profiles", {}), "profiles"))
        default_profile = self._string(data.get("default_profile", top["default_profile"].default), "default_profile")
        if default_profile not in profiles:
            raise self._error("default_profile", f"no profile named {default_profile!r} (have: {', '.join(profiles)})")
        task_types = {}
        for task, profile in self._table(data.get("task_types", {}), "task_types").items():
            name = self._string(profile, _key("task_types", task))
            if name not in profiles:
                raise self._error(_key("task_types", task), f"no profile named {name!r} (have: {', '.join(profiles)})")
            task_types[task] = name
        return Policy(
            version=version,
            profiles=profiles,
            default_profile=default_profile,
            task_types=task_types,
            tools=self._tools(self._table(data.get("tools", {}), "tools")),
            noise_keys=noise,
            finish_tool=finish_tool,
            prices=self._prices(self._table(data.get("pricing", {}), "pricing")),
            claim_patterns=self._claims(self._table(data.get("claims", {}), "claims")),
            claim_classifier=self._claim_classifier(self._table(data.get("claims", {}), "claims")),
            claim_judge=self._claim_judge(self._table(data.get("claims", {}), "claims")),
            escalation=self._escalation(self._table(data.get("escalation", {}), "escalation")),
            budget_note=self._bool(data.get("budget_note", top["budget_note"].default), "budget_note"),
            source=self._source,
        )

    def _escalation(self, table: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
        self._unknown(table, PROBE_NAMES, "escalation.")
        ladders = {}
        for probe, steps in table.items():
            key = _key("escalation", probe)
            actions = self._strings(steps, key)
            bad = [action for action in actions if action not in _ESCALATION_ACTIONS]
            if not actions or bad:
                raise self._error(key, f"expected a list of {', '.join(_ESCALATION_ACTIONS)}, got {list(actions)!r}")
            ladders[probe] = actions
        return ladders

    def _bool(self, value: Any, key: str) -> bool:
        if not isinstance(value, bool):
            raise self._error(key, f"expected true or false, got {_describe(value)}")
        return value

    def _profile_values(self, table: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        self._unknown(table, tuple(_PROFILE_FIELDS), prefix)
        values: dict[str, Any] = {}
        for key, value in table.items():
            kind = _PROFILE_FIELDS[key]
            if kind == "probe_list":
                names = self._strings(value, prefix + key)
                for name in names:
                    if name not in PROBE_NAMES:
                        raise self._error(
                            prefix + key, f"unknown probe {name!r} (expected one of: {', '.join(PROBE_NAMES)})")
                values[key] = names
            else:
                values[key] = self._number(value, prefix + key, kind)
        return values

    def _profiles(self, table: Mapping[str, Any]) -> dict[str, Profile]:
        # Every profile inherits what it does not set from the policy's "default" profile.
        base_values = {}
        if DEFAULT_PROFILE in table:
            base_values = self._profile_values(
                self._table(table[DEFAULT_PROFILE], _key("profiles", DEFAULT_PROFILE)),
                _key("profiles", DEFAULT_PROFILE) + ".",
            )
        base = dataclasses.replace(Profile(), **base_values)
        profiles = {DEFAULT_PROFILE: base}
        for name, section in table.items():
            if name == DEFAULT_PROFILE:
                continue
            values = self._profile_values(self._table(section, _key("profiles", name)), _key("profiles", name) + ".")
            profiles[name] = dataclasses.replace(base, name=name, **values)
        for name, profile in profiles.items():
            if profile.repeat_threshold > profile.window:
                raise self._error(
                    _key("profiles", name, "repeat_threshold"),
                    f"must not exceed the window ({profile.repeat_threshold} > {profile.window})",
                )
        return profiles

    def _tools(self, table: Mapping[str, Any]) -> dict[str, ToolContract]:
        tools = {}
        for name, section in table.items():
            prefix = _key("tools", name) + "."
            section = self._table(section, _key("tools", name))
            self._unknown(section, _TOOL_KEYS, prefix)
            effect = section.get("effect")
            if effect is not None and effect not in EFFECTS:
                raise self._error(prefix + "effect", f"expected 'read' or 'write', got {_describe(effect)}")
            tools[name] = ToolContract(
                name=name,
                effect=effect,
                noise_keys=frozenset(self._strings(section.get("noise_keys", []), prefix + "noise_keys")),
                unordered_keys=frozenset(self._strings(section.get("unordered_keys", []), prefix + "unordered_keys")),
                claims=self._strings(section.get("claims", []), prefix + "claims"),
            )
        return tools

    def _prices(self, table: Mapping[str, Any]) -> dict[str, Price]:
        prices = {}
        for model, section in table.items():
            prefix = _key("pricing", model) + "."
            section = self._table(section, _key("pricing", model))
            self._unknown(section, _PRICE_KEYS, prefix)
            for key in _PRICE_KEYS:
                if key not in section:
                    raise self._error(prefix + key, "missing (both input and output prices are needed)")
                value = section[key]
                if not _ranges.within(value, _ranges.USD_PER_MTOK):
                    raise self._error(prefix + key, f"expected {_ranges.USD_PER_MTOK.expected}, got {_describe(value)}")
            prices[model] = Price(float(section["input_usd_per_mtok"]), float(section["output_usd_per_mtok"]))
        return prices

    def _claims(self, table: Mapping[str, Any]) -> dict[str, dict[str, tuple[str, ...]]]:
        patterns: dict[str, dict[str, tuple[str, ...]]] = {}
        for lang, section in table.items():
            if lang in _CLAIMS_KEYS:
                continue
            if not isinstance(section, dict):
                self._unknown({lang: section}, _CLAIMS_KEYS, "claims.")
            section = self._table(section, _key("claims", lang))
            categories = {}
            for category, sources in section.items():
                key = _key("claims", lang, category)
                if category not in CLAIM_CATEGORIES:
                    raise self._error(key, f"unknown claim category (expected one of: {', '.join(CLAIM_CATEGORIES)})")
                compiled = self._strings(sources, key)
                for source in compiled:
                    try:
                        re.compile(source)
                    except re.error as exc:
                        raise self._error(key, f"invalid regular expression {source!r}: {exc}") from None
                categories[category] = compiled
            patterns[lang] = categories
        return patterns


    def _claim_classifier(self, table: Mapping[str, Any]) -> ClaimClassifier | None:
        if "classifier" not in table:
            for key in ("classifier_mode", "classifier_timeout_ms"):
                if key in table:
                    raise self._error(_key("claims", key), "has no effect without claims.classifier")
            return None
        target = self._string(table["classifier"], "claims.classifier")
        mode = table.get("classifier_mode", MODES[0])
        if mode not in MODES:
            raise self._error("claims.classifier_mode", f"expected one of {', '.join(MODES)}, got {_describe(mode)}")
        timeout_ms = self._number(table.get("classifier_timeout_ms", DEFAULT_TIMEOUT_MS),
                                  "claims.classifier_timeout_ms", "positive_int")
        try:
            function = load_callable(target)
        except ClassifierLoadError as exc:
            raise self._error("claims.classifier", str(exc)) from None
        return ClaimClassifier(function, mode=mode, timeout_ms=timeout_ms, name=target)


    def _claim_judge(self, table: Mapping[str, Any]) -> ModelJudge | None:
        options = ("judge_model", "judge_timeout_ms", "judge_calls_per_minute", "judge_cache")
        if "judge_url" not in table:
            for key in options:
                if key in table:
                    raise self._error(_key("claims", key), "has no effect without claims.judge_url")
            return None
        url = self._string(table["judge_url"], "claims.judge_url")
        if not url.startswith(("http://", "https://")):
            raise self._error("claims.judge_url", f"expected an http(s) URL, got {_describe(url)}")
        if "judge_model" not in table:
            raise self._error("claims.judge_model", "is required with claims.judge_url")
        defaults = keys_in("claims")
        numbers = {key: self._number(table.get(key, defaults[key].default), _key("claims", key),
                                     "positive_int") for key in options[1:]}
        return ModelJudge(url, self._string(table["judge_model"], "claims.judge_model"),
                          timeout_ms=numbers["judge_timeout_ms"], calls_per_minute=numbers["judge_calls_per_minute"],
                          cache=numbers["judge_cache"])


def _claim_vocabulary(tools: Any) -> list[str]:
    """Words a claim may use for what the write tools do: their names' words and ``claims`` lists."""
    words: list[str] = []
    for contract in tools:
        words.extend(contract.claims)
        if contract.effect != "write":
            continue
        # "change_booking", "changeBooking" -> "change", "booking": the verb is usually first
        parts = re.findall(r"[A-Z]?[a-z]+|[\u3400-\u9fff]+", contract.name)
        if parts:
            words.append(parts[0].lower())
    return words


_HEADER = re.compile(r"^\s*\[\s*([^\[\]]+?)\s*\]\s*(?:#.*)?$")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_DOTTED_PART = re.compile(r"""\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|([A-Za-z0-9_-]+))\s*(?:\.|$)""")


def _split_dotted(dotted: str) -> tuple[str, ...]:
    """``profiles."gpt-4o".x`` -> ("profiles", "gpt-4o", "x")."""
    parts = []
    position = 0
    while position < len(dotted):
        found = _DOTTED_PART.match(dotted, position)
        if not found or found.end() == position:
            return tuple(dotted.split("."))
        parts.append(next(group for group in found.groups() if group is not None))
        position = found.end()
    return tuple(parts)


def _key(*parts: str) -> str:
    """A dotted key as TOML writes it: bare parts plain, others quoted."""
    return ".".join(part if _BARE_KEY.fullmatch(part) else f'"{part}"' for part in parts)


def _describe(value: Any) -> str:
    return f"{_ranges.describe(value)} ({type(value).__name__})"


__all__ = [
    "BUILTIN_PATTERNS",
    "DEFAULT_PROFILE",
    "KEYS",
    "KINDS",
    "Key",
    "Policy",
    "PolicyError",
    "Profile",
    "ToolContract",
    "coerce_policy",
    "load_policy",
    "parse_policy",
    "policy_from_env",
]
