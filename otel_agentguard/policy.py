"""The TOML policy: profiles of thresholds, tool contracts, prices and claims.

A policy is compiled once at load and never re-read per span. Every mistake
in the file is one :class:`PolicyError` whose message names the file, the line
where it can tell, the key and what was expected::

    policy.toml:4: profiles.default.windw: unknown key (did you mean 'window'?)

See the README's "Policy reference" for every key.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_agentguard.attributes import PROBE_NAMES
from otel_agentguard.claims import BUILTIN_PATTERNS, CLAIM_CATEGORIES, ClaimDetector
from otel_agentguard.environment_variables import OTEL_AGENTGUARD_POLICY, OTEL_AGENTGUARD_PROFILE
from otel_agentguard.fingerprint import DEFAULT_NOISE_KEYS, Fingerprinter
from otel_agentguard.pricing import Price, PriceTable

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


_MAX_FINGERPRINTERS = 1024  # tools past this many get a fresh fingerprinter per call


class PolicyError(ValueError):
    """A policy that cannot be used; the message says where and why."""


@dataclass(frozen=True)
class Profile:
    """Thresholds of one scenario. Defaults equal DESIGN.md's ``profiles.default``."""

    name: str = DEFAULT_PROFILE
    window: int = 6
    repeat_threshold: int = 3
    no_progress_steps: int = 4
    error_streak: int = 4
    max_steps: int = 12
    max_tokens: int = 4000
    max_cost_usd: float | None = None
    max_wall_time_s: float | None = None
    max_model_calls: int | None = None
    cycle_repeats: int = 3
    disabled_probes: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolContract:
    name: str
    effect: str | None = None
    noise_keys: frozenset[str] = frozenset()
    unordered_keys: frozenset[str] = frozenset()


# Profile key -> the kind of value it takes; one table drives parsing and validation.
_PROFILE_FIELDS: dict[str, str] = {
    "window": "positive_int",
    "repeat_threshold": "threshold",
    "no_progress_steps": "threshold",
    "error_streak": "threshold",
    "max_steps": "positive_int",
    "max_tokens": "positive_int",
    "max_cost_usd": "positive_number",
    "max_wall_time_s": "positive_number",
    "max_model_calls": "positive_int",
    "cycle_repeats": "threshold",
    "disabled_probes": "probe_list",
}
_TOP_LEVEL = (
    "version", "default_profile", "finish_tool", "noise_keys", "profiles",
    "task_types", "tools", "pricing", "claims", "escalation", "budget_note",
)
_ESCALATION_ACTIONS = ("intervene", "stop", "observe")
# Probes whose stall is a repeated call are nudged first; the others stop at the next cut point.
DEFAULT_LADDER: dict[str, tuple[str, ...]] = {
    "tool_loop": ("intervene", "stop"),
    "cycle": ("intervene", "stop"),
    "error_streak": ("intervene", "stop"),
    "no_progress": ("stop",),
    "budget_exceeded": ("stop",),
    "fake_completion": ("stop",),
}
_TOOL_KEYS = ("effect", "noise_keys", "unordered_keys")
_PRICE_KEYS = ("input_usd_per_mtok", "output_usd_per_mtok")


class Policy:
    """A compiled policy. Immutable after construction; safe to share across threads."""

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
        self.claims = ClaimDetector(claim_patterns)
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
            name = os.environ.get(OTEL_AGENTGUARD_PROFILE) or self.default_profile
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
        raw = file.read_bytes()
    except OSError as exc:
        raise PolicyError(f"{file}: cannot read policy file: {exc.strerror or exc}") from None
    if len(raw) > _MAX_POLICY_BYTES:
        raise PolicyError(f"{file}: policy file is larger than {_MAX_POLICY_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{file}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    return parse_policy(text, source=str(file))


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
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if kind == "positive_int":
            if not is_int or value < 1:
                raise self._error(key, f"expected a positive integer, got {_describe(value)}")
        elif kind == "threshold":
            if not is_int or value < 2:
                raise self._error(key, f"expected an integer of at least 2, got {_describe(value)}")
        elif kind == "positive_number":
            if not (is_int or isinstance(value, float)) or not value > 0 or value != value:
                raise self._error(key, f"expected a positive number, got {_describe(value)}")
            value = float(value)
        return value

    # -- sections -----------------------------------------------------------------------
    def policy(self, data: Mapping[str, Any]) -> Policy:
        self._unknown(data, _TOP_LEVEL, "")
        version = self._string(data["version"], "version") if "version" in data else BUILTIN_VERSION
        finish_tool = self._string(data.get("finish_tool", DEFAULT_FINISH_TOOL), "finish_tool")
        noise = DEFAULT_NOISE_KEYS | frozenset(self._strings(data.get("noise_keys", []), "noise_keys"))
        profiles = self._profiles(self._table(data.get("profiles", {}), "profiles"))
        default_profile = self._string(data.get("default_profile", DEFAULT_PROFILE), "default_profile")
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
            escalation=self._escalation(self._table(data.get("escalation", {}), "escalation")),
            budget_note=self._bool(data.get("budget_note", False), "budget_note"),
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
                        raise self._error(prefix + key, f"unknown probe {name!r} (expected one of: {', '.join(PROBE_NAMES)})")
                values[key] = names
            else:
                values[key] = self._number(value, prefix + key, kind)
        return values

    def _profiles(self, table: Mapping[str, Any]) -> dict[str, Profile]:
        # Every profile inherits what it does not set from the policy's "default" profile.
        base_values = {}
        if DEFAULT_PROFILE in table:
            base_values = self._profile_values(
                self._table(table[DEFAULT_PROFILE], _key("profiles", DEFAULT_PROFILE)), _key("profiles", DEFAULT_PROFILE) + "."
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
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                    raise self._error(prefix + key, f"expected a number of USD per million tokens, got {_describe(value)}")
            prices[model] = Price(float(section["input_usd_per_mtok"]), float(section["output_usd_per_mtok"]))
        return prices

    def _claims(self, table: Mapping[str, Any]) -> dict[str, dict[str, tuple[str, ...]]]:
        patterns: dict[str, dict[str, tuple[str, ...]]] = {}
        for lang, section in table.items():
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
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type(value).__name__})"


__all__ = [
    "BUILTIN_PATTERNS",
    "DEFAULT_PROFILE",
    "Policy",
    "PolicyError",
    "Profile",
    "ToolContract",
    "coerce_policy",
    "load_policy",
    "parse_policy",
    "policy_from_env",
]
