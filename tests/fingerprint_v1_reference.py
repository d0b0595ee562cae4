"""REFERENCE ONLY (tests): the canonical form as it was before the benchmark work.

The package now writes a faster, JSON-shaped form; tests/test_fingerprint_regression.py
checks that it makes exactly the same values equal as this one did.

Canonical form and keyed fingerprints of tool arguments and results.

Two calls are the same call when their canonical forms are equal:

* key order never matters; keys are compared as text;
* a number and its string spelling are one value (``1001 == "1001"``,
  ``1.0 == 1``); a string is read as a number only when it is spelled as a JSON
  number, so ``"007"`` stays an identifier;
* noise keys (``trace_id``, ``request_id``, ``timestamp``, ``random_seed`` and
  the tool's own) are dropped at any depth;
* lists under a tool's ``unordered_keys``, and sets, compare as multisets.

The canonical form never leaves the process: only its size and a keyed hash of
it (BLAKE2b with a secret key) do, so low-entropy values such as order ids
cannot be recovered by hashing guesses. The key comes from
``OTEL_AGENTGUARD_FINGERPRINT_KEY``; without it each process draws a random key
and its fingerprints do not correlate with other processes'.

Any Python value gives a deterministic form and nothing here raises: cycles,
very deep values (past 64 levels), huge values (past 50,000 nested values),
odd objects and failing ``model_dump`` calls all become fixed markers, so two
values that differ only beyond those bounds share a fingerprint.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import hashlib
import logging
import os
import re
import threading
import uuid
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, NamedTuple

OTEL_AGENTGUARD_FINGERPRINT_KEY = "OTEL_AGENTGUARD_FINGERPRINT_KEY"

logger = logging.getLogger(__name__)

DEFAULT_NOISE_KEYS = frozenset({"trace_id", "request_id", "timestamp", "random_seed"})

_MAX_DEPTH = 64
_DIGEST_BYTES = 16
# JSON number grammar: the only strings read as numbers.
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_NUMBER_START = frozenset("-0123456789")

_key_lock = threading.Lock()
_key: bytes | None = None


def _derive_key(secret: bytes) -> bytes:
    # Any length of secret works; BLAKE2b keys are at most 64 bytes.
    return hashlib.blake2b(secret, digest_size=32, person=b"agentguard.fp").digest()


def fingerprint_key() -> bytes:
    """The process's fingerprint key, read from the environment on first use."""
    global _key
    if _key is not None:
        return _key
    with _key_lock:
        if _key is None:
            secret = os.environ.get(OTEL_AGENTGUARD_FINGERPRINT_KEY, "")
            if secret:
                _key = _derive_key(secret.encode("utf-8"))
            else:
                logger.warning(
                    "%s is not set: fingerprints use a random per-process key and do not "
                    "correlate across processes or restarts",
                    OTEL_AGENTGUARD_FINGERPRINT_KEY,
                )
                _key = _derive_key(os.urandom(32))
    return _key


def set_fingerprint_key(secret: str | bytes | None) -> None:
    """Set the key (e.g. when rotating it); ``None`` re-reads the environment on next use."""
    global _key
    with _key_lock:
        if secret is None:
            _key = None
        else:
            raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
            _key = _derive_key(raw)


def keyed_hash(data: str, key: bytes | None = None) -> str:
    """Hex keyed BLAKE2b digest of ``data``."""
    return hashlib.blake2b(
        data.encode("utf-8", "surrogatepass"),
        key=key if key is not None else fingerprint_key(),
        digest_size=_DIGEST_BYTES,
    ).hexdigest()


def _number_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Inf" if value > 0 else "-Inf"
    if value.is_integer():
        return str(int(value))  # exact: 1e16 == 10**16, at most 309 digits
    return repr(value)


def _int_text(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # more digits than int->str allows: still exact, still deterministic
        return hex(value)


def _numeric_string(text: str) -> str | None:
    """Canonical number text when ``text`` is spelled as a JSON number."""
    if not text or text[0] not in _NUMBER_START or len(text) > 400:
        return None
    match = _NUMBER.fullmatch(text)
    if match is None:
        return None
    if match.group(1) is None and match.group(2) is None:
        try:
            return _int_text(int(text))
        except ValueError:
            return None
    return _number_text(float(text))


def _decimal_text(value: decimal.Decimal) -> str:
    if value.is_nan():
        return "NaN"
    if value.is_infinite():
        return "Inf" if value > 0 else "-Inf"
    if value == value.to_integral_value() and value.adjusted() < 64:
        return _int_text(int(value))
    return _number_text(float(value))


_MAX_NODES = 50_000  # beyond this many nested values a form ends in a fixed marker (bounds the cost)


class _Walk:
    """Per-call state: the containers on the current path (cycles) and the nodes left."""

    __slots__ = ("active", "left")

    def __init__(self) -> None:
        self.active: set[int] = set()
        self.left = _MAX_NODES


class _Canonicalizer:
    """Writes the canonical form of a value as a list of text parts.

    Strings are length-prefixed, so no escaping is needed and no two different
    values share a form.
    """

    __slots__ = ("_noise", "_unordered")

    def __init__(self, noise_keys: frozenset[str], unordered_keys: frozenset[str]):
        self._noise = noise_keys
        self._unordered = unordered_keys

    def form(self, value: Any) -> str:
        out: list[str] = []
        try:
            self._write(value, out, 0, _Walk(), False)
        except Exception:  # deliberate: a fingerprint must never break the caller
            return f"!{type(value).__qualname__}"
        return "".join(out)

    def _write(self, value: Any, out: list[str], depth: int, path: _Walk, unordered: bool) -> None:
        kind = type(value)
        if kind is str:
            number = _numeric_string(value)
            if number is None:
                out.append(f"s{len(value)}:{value}")
            else:
                out.append(f"n{number}")
            return
        if kind is int:
            out.append(f"n{_int_text(value)}")
            return
        if value is None:
            out.append("N")
            return
        if kind is bool:
            out.append("T" if value else "F")
            return
        if kind is float:
            out.append(f"n{_number_text(value)}")
            return
        if depth >= _MAX_DEPTH:
            out.append("~")
            return
        if kind is dict:
            self._write_mapping(value.items(), out, depth, path, value)
            return
        if kind is list or kind is tuple:
            self._write_sequence(value, out, depth, path, unordered)
            return
        self._write_other(value, out, depth, path, unordered)

    def _child(self, value: Any, depth: int, path: _Walk, unordered: bool) -> str:
        """The form of one nested value; if it fails, only it becomes a marker."""
        path.left -= 1
        if path.left < 0:
            return "…"  # a huge value: everything past the budget compares equal
        part: list[str] = []
        try:
            self._write(value, part, depth, path, unordered)
        except Exception:  # deliberate: the siblings still tell calls apart
            return f"!{type(value).__qualname__}"
        return "".join(part)

    def _write_mapping(self, items: Any, out: list[str], depth: int, path: _Walk, owner: Any) -> None:
        marker = id(owner)
        if marker in path.active:
            out.append("@")
            return
        path.active.add(marker)
        try:
            entries = []
            for key, item in items:
                name = key if type(key) is str else self._key_text(key)
                if name in self._noise:
                    continue
                entries.append((name, self._child(item, depth + 1, path, name in self._unordered)))
            entries.sort()
            out.append("{")
            for name, text in entries:
                out.append(f"{len(name)}:{name}={text},")
            out.append("}")
        finally:
            path.active.discard(marker)

    def _write_sequence(self, items: Any, out: list[str], depth: int, path: _Walk, unordered: bool) -> None:
        marker = id(items)
        if marker in path.active:
            out.append("@")
            return
        path.active.add(marker)
        try:
            texts = []
            for item in items:
                if path.left < 0:
                    texts.append("…")  # over budget: the rest of a huge list compares equal
                    break
                texts.append(self._child(item, depth + 1, path, False))
            if unordered:
                texts.sort()
            out.append("[")
            for text in texts:
                out.append(text)
                out.append(",")
            out.append("]")
        finally:
            path.active.discard(marker)

    def _key_text(self, key: Any) -> str:
        # JSON keys are text: the key 1 and the key "1" are the same key.
        if isinstance(key, int) and not isinstance(key, bool):
            return _int_text(int(key))
        if isinstance(key, float):
            return _number_text(key)
        part: list[str] = []
        self._write(key, part, _MAX_DEPTH - 1, _Walk(), False)
        return "".join(part)

    def _write_other(self, value: Any, out: list[str], depth: int, path: _Walk, unordered: bool) -> None:
        if isinstance(value, str):  # str subclasses, StrEnum members
            self._write(str.__str__(value), out, depth, path, unordered)
        elif isinstance(value, bool):
            out.append("T" if value else "F")
        elif isinstance(value, enum.Enum):
            self._write(value.value, out, depth + 1, path, unordered)
        elif isinstance(value, int):
            out.append(f"n{_int_text(int(value))}")
        elif isinstance(value, float):
            out.append(f"n{_number_text(float(value))}")
        elif isinstance(value, decimal.Decimal):
            out.append(f"n{_decimal_text(value)}")
        elif isinstance(value, (bytes, bytearray, memoryview)):
            # Bytes are digested first: bounded size, and the outer hash is keyed anyway.
            out.append(f"b{hashlib.blake2b(bytes(value), digest_size=16).hexdigest()}")
        elif isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            out.append(f"t{value.isoformat()}")
        elif isinstance(value, datetime.timedelta):
            out.append(f"n{_number_text(value.total_seconds())}")
        elif isinstance(value, (uuid.UUID, PurePath)):
            self._write(str(value), out, depth, path, unordered)
        elif isinstance(value, Mapping):
            self._write_mapping(value.items(), out, depth, path, value)
        elif isinstance(value, (list, tuple)):
            self._write_sequence(value, out, depth, path, unordered)
        elif isinstance(value, (set, frozenset)):
            self._write_sequence(list(value), out, depth, path, True)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = [(f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value)]
            self._write_mapping(fields, out, depth, path, value)
        else:
            self._write_object(value, out, depth, path)

    def _write_object(self, value: Any, out: list[str], depth: int, path: _Walk) -> None:
        dump = getattr(value, "model_dump", None)  # pydantic v2
        if callable(dump):
            try:
                dumped = dump()
            except Exception:  # a failing model_dump must not break fingerprinting
                dumped = None
            if isinstance(dumped, dict):
                self._write_mapping(dumped.items(), out, depth, path, value)
                return
        # Plain objects: their class and public state, never repr() (it may hold addresses).
        out.append(f"<{type(value).__qualname__}")
        state = getattr(value, "__dict__", None)
        if isinstance(state, dict):
            public = [(k, v) for k, v in state.items() if isinstance(k, str) and not k.startswith("_")]
            self._write_mapping(public, out, depth, path, value)
        out.append(">")


def is_empty(value: Any) -> bool:
    """True for results that carry nothing: None, blank text, empty containers,
    or a mapping whose every value is empty."""
    try:
        return _is_empty(value, 0)
    except Exception:  # deliberate: unknown objects are not empty
        return False


def _is_empty(value: Any, depth: int) -> bool:
    if value is None:
        return True
    if isinstance(value, str):
        return not value.strip()
    if isinstance(value, (list, tuple, set, frozenset, bytes, bytearray)):
        return len(value) == 0
    if isinstance(value, Mapping):
        if depth > 8:
            return False
        return all(_is_empty(item, depth + 1) for item in value.values())
    return False


class ArgumentsFingerprint(NamedTuple):
    fingerprint: str
    keys: tuple[str, ...]
    size: int


class Fingerprinter:
    """Canonical form and keyed hash for one tool's arguments and results.

    Built once per tool from its contract (noise and unordered keys); cheap to
    call and safe from any thread.
    """

    __slots__ = ("tool_name", "_canonical", "_key")

    def __init__(
        self,
        tool_name: str,
        noise_keys: frozenset[str] = DEFAULT_NOISE_KEYS,
        unordered_keys: frozenset[str] = frozenset(),
        key: bytes | None = None,
    ):
        self.tool_name = tool_name
        self._canonical = _Canonicalizer(frozenset(noise_keys), frozenset(unordered_keys))
        # An explicit secret is derived like the environment's, so any length works.
        self._key = _derive_key(key) if key is not None else None

    def canonical(self, value: Any) -> str:
        return self._canonical.form(value)

    def arguments(self, arguments: Any) -> ArgumentsFingerprint:
        form = self._canonical.form(arguments)
        size = len(form.encode("utf-8", "surrogatepass"))
        # The tool name is part of the call: the same arguments to two tools differ.
        digest = keyed_hash(f"{len(self.tool_name)}:{self.tool_name}|{form}", self._key)
        return ArgumentsFingerprint(digest, _top_level_keys(arguments), size)

    def result(self, result: Any) -> str:
        return keyed_hash(self._canonical.form(result), self._key)


def _top_level_keys(arguments: Any) -> tuple[str, ...]:
    try:
        if isinstance(arguments, Mapping):
            return tuple(sorted(str(k) for k in arguments))
    except Exception:  # deliberate: keys are a courtesy, not a requirement
        pass
    return ()
