"""Canonical form and keyed fingerprints of tool arguments and results.

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

The canonical form is compact JSON text with keys sorted by their text: a
string is JSON-quoted (the escapes of ``json.dumps(ensure_ascii=False)``, which
are also orjson's), a number is written in one spelling (integral floats and
numeric strings as integers, other floats as ``repr``; ``NaN``, ``Infinity``,
``-Infinity``), and values JSON cannot hold get markers that never begin a JSON
value (``%b`` bytes digest, ``%t"iso"`` dates and times, ``<"Class"{...}>``
objects, ``!"Type"`` failures, ``@`` cycles, ``~`` too deep, ``…`` over budget).
(It used to be a length-prefixed text form; the JSON shape writes faster
and makes exactly the same values equal, see tests/test_fingerprint_regression.py.)
Plain dicts with string keys and lists of str/int/float/bool/None are written
inline, one Python frame per level, with each tool's quoted keys remembered; the
keyed BLAKE2b state (with the tool name already fed) is built once and copied.

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
import json
import json.encoder
import logging
import os
import re
import threading
import uuid
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, NamedTuple

from otel_agentguard.environment_variables import OTEL_AGENTGUARD_FINGERPRINT_KEY

logger = logging.getLogger(__name__)

DEFAULT_NOISE_KEYS = frozenset({"trace_id", "request_id", "timestamp", "random_seed"})

_MAX_DEPTH = 64
_DIGEST_BYTES = 16
# JSON number grammar: the only strings read as numbers.
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_NUMBER_START = frozenset("-0123456789")
_INF = float("inf")
# JSON string quoting (C-accelerated in CPython); the same escapes orjson writes.
_quote = json.encoder.encode_basestring

_key_lock = threading.Lock()
_key: bytes | None = None
# The keyed BLAKE2b state for the process key, built once: each digest copies it
# instead of re-keying (a key block less per call). Reset with the key.
_keyed_state: Any = None


def _derive_key(secret: bytes) -> bytes:
    # Any length of secret works; BLAKE2b keys are at most 64 bytes.
    return hashlib.blake2b(secret, digest_size=32, person=b"agentguard.fp").digest()


def fingerprint_key() -> bytes:
    """The process's fingerprint key, read from the environment on first use."""
    global _key
    if _key is not None:
        return _key
    return _load_key()


def _load_key() -> bytes:
    global _key
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


def _process_state() -> Any:
    """The keyed hash state of the process key (copy it, never update it)."""
    global _keyed_state
    state = _keyed_state
    if state is None:
        key = fingerprint_key()
        state = hashlib.blake2b(key=key, digest_size=_DIGEST_BYTES)
        with _key_lock:
            if _key == key:  # not rotated meanwhile
                _keyed_state = state
    return state


def set_fingerprint_key(secret: str | bytes | None) -> None:
    """Set the key (e.g. when rotating it); ``None`` re-reads the environment on next use."""
    global _key, _keyed_state
    with _key_lock:
        _keyed_state = None
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
    if value.is_integer():
        return str(int(value))  # exact: 1e16 == 10**16, at most 309 digits
    if value != value:
        return "NaN"
    if value in (_INF, -_INF):
        return "Infinity" if value > 0 else "-Infinity"
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
        return "Infinity" if value > 0 else "-Infinity"
    if value == value.to_integral_value() and value.adjusted() < 64:
        return _int_text(int(value))
    return _number_text(float(value))


_MAX_LABELS = 4096  # quoted keys remembered per tool
_MAX_NODES = 50_000  # beyond this many nested values a form ends in a fixed marker (bounds the cost)


class _Walk:
    """Per-call state: the containers on the current path (cycles) and the nodes left."""

    __slots__ = ("active", "left")

    def __init__(self) -> None:
        self.active: set[int] = set()
        self.left = _MAX_NODES


def _str_text(value: str) -> str:
    """A string: its number text when it is spelled as a JSON number, else JSON-quoted."""
    if value and value[0] in _NUMBER_START:
        number = _numeric_string(value)
        if number is not None:
            return number
    return _quote(value)


def _scalar_text(value: Any) -> str | None:
    """The form of an exact str, int, float, bool or None; None for anything else."""
    kind = type(value)
    if kind is str:
        return _str_text(value)
    if kind is int:
        return _int_text(value)
    if kind is float:
        return _number_text(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    return None


def _failure(value: Any) -> str:
    try:
        name = type(value).__qualname__
    except Exception:  # deliberate: even the type may be unreadable
        name = "?"
    return "!" + _quote(str(name))


class _Canonicalizer:
    """Writes the canonical form of a value: compact JSON with sorted keys, numbers in
    one spelling, and markers (never valid JSON) for values JSON cannot hold.

    The hot path handles plain dicts and lists of str/int/float/bool/None inline, one
    Python frame per nesting level; everything else goes through ``_other``.
    """

    __slots__ = ("_noise", "_unordered", "_labels")

    def __init__(self, noise_keys: frozenset[str], unordered_keys: frozenset[str]):
        self._noise = noise_keys
        self._unordered = unordered_keys
        # key -> its quoted label ('"key":'), or None for a noise key. Argument keys
        # repeat across calls of a tool, so most are looked up, not quoted (bounded).
        self._labels: dict[str, str | None] = {}

    def form(self, value: Any) -> str:
        return self.root(value)[0]

    def root(self, value: Any) -> tuple[str, tuple[str, ...] | None]:
        """The form and, for a dict whose keys are all plain strings, its sorted keys."""
        try:
            if type(value) is dict:
                return self._dict(value, 0, _Walk(), True)
            text = _scalar_text(value)
            if text is None:
                text = self._value(value, 0, _Walk(), False)
            return text, None
        except Exception:  # deliberate: a fingerprint must never break the caller
            return _failure(value), None

    def _value(self, value: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        text = _scalar_text(value)
        if text is not None:
            return text
        if depth >= _MAX_DEPTH:
            return "~"
        kind = type(value)
        if kind is dict:
            return self._dict(value, depth, walk, False)[0]
        if kind is list or kind is tuple:
            return self._sequence(value, depth, walk, unordered)
        return self._other(value, depth, walk, unordered)

    def _dict(self, value: dict[Any, Any], depth: int, walk: _Walk, want_keys: bool) -> tuple[str, Any]:
        marker = id(value)
        active = walk.active
        if marker in active:
            return "@", None
        walk.left -= len(value)
        try:
            entries = sorted(value.items())  # keys are unique: values are never compared
        except Exception:  # keys of several types (or odd ones): the general path sorts them as text
            entries = None
        if walk.left < 0 or entries is None or (entries and type(entries[0][0]) is not str):
            walk.left += len(value)
            return self._mapping(value.items(), depth, walk, value), None
        # Sorted without error and the first is a str: every key is a str (or a subclass).
        active.add(marker)
        try:
            labels = self._labels
            unordered = self._unordered
            child_depth = depth + 1
            plain = True
            parts = []
            for key, item in entries:
                if type(key) is not str:
                    plain = False
                    key = str.__str__(key)
                label = labels.get(key, False)
                if label is False:
                    label = self._label(key)
                if label is None:
                    continue  # a noise key
                kind = type(item)
                if kind is str:
                    if item and item[0] in _NUMBER_START:
                        text = _numeric_string(item) or _quote(item)
                    else:
                        text = _quote(item)
                elif kind is int:
                    text = _int_text(item)
                elif kind is float:
                    text = _number_text(item)
                elif item is None:
                    text = "null"
                elif kind is bool:
                    text = "true" if item else "false"
                elif child_depth >= _MAX_DEPTH:
                    text = "~"
                else:
                    try:
                        if kind is dict:
                            text = self._dict(item, child_depth, walk, False)[0]
                        elif kind is list or kind is tuple:
                            text = self._sequence(item, child_depth, walk, key in unordered)
                        else:
                            text = self._other(item, child_depth, walk, key in unordered)
                    except Exception:  # deliberate: the siblings still tell calls apart
                        text = _failure(item)
                parts.append(label + text)
        finally:
            active.discard(marker)
        keys = tuple([key for key, _ in entries]) if want_keys and plain else None
        return "{" + ",".join(parts) + "}", keys

    def _label(self, key: str) -> str | None:
        label = None if key in self._noise else _quote(key) + ":"
        if len(self._labels) < _MAX_LABELS:
            self._labels[key] = label
        return label

    def _sequence(self, items: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        marker = id(items)
        active = walk.active
        if marker in active:
            return "@"
        walk.left -= len(items)
        if walk.left < 0:
            walk.left += len(items)
            return self._sequence_over_budget(items, depth, walk, unordered)
        active.add(marker)
        try:
            child_depth = depth + 1
            texts = []
            for item in items:
                # The same scalar dispatch as in _dict, written out again on purpose: a call per
                # value is the cost this hot path exists to avoid.
                kind = type(item)
                if kind is str:
                    if item and item[0] in _NUMBER_START:
                        text = _numeric_string(item) or _quote(item)
                    else:
                        text = _quote(item)
                elif kind is int:
                    text = _int_text(item)
                elif kind is float:
                    text = _number_text(item)
                elif item is None:
                    text = "null"
                elif kind is bool:
                    text = "true" if item else "false"
                elif child_depth >= _MAX_DEPTH:
                    text = "~"
                else:
                    try:
                        if kind is dict:
                            text = self._dict(item, child_depth, walk, False)[0]
                        elif kind is list or kind is tuple:
                            text = self._sequence(item, child_depth, walk, False)
                        else:
                            text = self._other(item, child_depth, walk, False)
                    except Exception:  # deliberate: the siblings still tell calls apart
                        text = _failure(item)
                texts.append(text)
        finally:
            active.discard(marker)
        if unordered:
            texts.sort()
        return "[" + ",".join(texts) + "]"

    def _child(self, value: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        """The form of one nested value (general path); if it fails, only it becomes a marker."""
        walk.left -= 1
        if walk.left < 0:
            return "…"  # a huge value: everything past the budget compares equal
        try:
            return self._value(value, depth, walk, unordered)
        except Exception:  # deliberate: the siblings still tell calls apart
            return _failure(value)

    def _sequence_over_budget(self, items: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        marker = id(items)
        walk.active.add(marker)
        try:
            texts = []
            for item in items:
                if walk.left < 0:
                    texts.append("…")  # over budget: the rest of a huge list compares equal
                    break
                texts.append(self._child(item, depth + 1, walk, False))
        finally:
            walk.active.discard(marker)
        if unordered:
            texts.sort()
        return "[" + ",".join(texts) + "]"

    def _mapping(self, items: Any, depth: int, walk: _Walk, owner: Any) -> str:
        """Any mapping (general path): keys as text, noise dropped, entries sorted by key text."""
        marker = id(owner)
        if marker in walk.active:
            return "@"
        walk.active.add(marker)
        try:
            entries = []
            for key, item in items:
                name = key if type(key) is str else self._key_text(key)
                if name in self._noise:
                    continue
                entries.append((name, self._child(item, depth + 1, walk, name in self._unordered)))
            entries.sort()
        finally:
            walk.active.discard(marker)
        return "{" + ",".join([_quote(name) + ":" + text for name, text in entries]) + "}"

    def _key_text(self, key: Any) -> str:
        # JSON keys are text: the key 1 and the key "1" are the same key.
        if isinstance(key, str):
            return str.__str__(key)
        if isinstance(key, bool):
            return "true" if key else "false"
        if isinstance(key, int):
            return _int_text(int(key))
        if isinstance(key, float):
            return _number_text(float(key))
        if key is None:
            return "null"
        return self._value(key, _MAX_DEPTH - 1, _Walk(), False)

    def _other(self, value: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        if isinstance(value, str):  # str subclasses, StrEnum members
            return _str_text(str.__str__(value))
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, enum.Enum):
            return self._value(value.value, depth, walk, unordered)
        if isinstance(value, int):
            return _int_text(int(value))
        if isinstance(value, float):
            return _number_text(float(value))
        if isinstance(value, decimal.Decimal):
            return _decimal_text(value)
        if isinstance(value, (bytes, bytearray, memoryview)):
            # Bytes are digested first: bounded size, and the outer hash is keyed anyway.
            return "%b" + hashlib.blake2b(bytes(value), digest_size=16).hexdigest()
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            return "%t" + _quote(value.isoformat())
        if isinstance(value, datetime.timedelta):
            return _number_text(value.total_seconds())
        if isinstance(value, (uuid.UUID, PurePath)):
            return _str_text(str(value))
        if isinstance(value, Mapping):
            return self._mapping(value.items(), depth, walk, value)
        if isinstance(value, (list, tuple)):
            return self._sequence(value, depth, walk, unordered)
        if isinstance(value, (set, frozenset)):
            return self._sequence(list(value), depth, walk, True)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = [(f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value)]
            return self._mapping(fields, depth, walk, value)
        return self._object(value, depth, walk)

    def _object(self, value: Any, depth: int, walk: _Walk) -> str:
        dump = getattr(value, "model_dump", None)  # pydantic v2
        if callable(dump):
            try:
                dumped = dump()
            except Exception:  # a failing model_dump must not break fingerprinting
                dumped = None
            if isinstance(dumped, dict):
                return self._mapping(dumped.items(), depth, walk, value)
        # Plain objects: their class and public state, never repr() (it may hold addresses).
        text = "<" + _quote(type(value).__qualname__)
        state = getattr(value, "__dict__", None)
        if isinstance(state, dict):
            public = [(k, v) for k, v in state.items() if isinstance(k, str) and not k.startswith("_")]
            text += self._mapping(public, depth, walk, value)
        return text + ">"


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
    call and safe from any thread. The keyed hash states (and the argument
    state already fed the tool name) are built once and copied per digest.
    """

    __slots__ = ("tool_name", "_canonical", "_key", "_prefix", "_states")

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
        # The tool name is part of the call: the same arguments to two tools differ.
        self._prefix = f"{len(tool_name)}:{tool_name}|".encode("utf-8", "surrogatepass")
        self._states: tuple[Any, Any, Any] | None = None  # (base it was built from, result, arguments)

    def _hash_states(self) -> tuple[Any, Any]:
        base = _process_state() if self._key is None else None
        states = self._states
        if states is not None and states[0] is base:
            return states[1], states[2]
        result = base if base is not None else hashlib.blake2b(key=self._key, digest_size=_DIGEST_BYTES)
        arguments = result.copy()
        arguments.update(self._prefix)
        self._states = (base, result, arguments)
        return result, arguments

    def canonical(self, value: Any) -> str:
        return self._canonical.form(value)

    def arguments(self, arguments: Any) -> ArgumentsFingerprint:
        form, keys = self._canonical.root(arguments)
        data = form.encode("utf-8", "surrogatepass")
        digest = self._hash_states()[1].copy()
        digest.update(data)
        if keys is None:
            keys = _top_level_keys(arguments)
        return ArgumentsFingerprint(digest.hexdigest(), keys, len(data))

    def result(self, result: Any) -> str:
        digest = self._hash_states()[0].copy()
        digest.update(self._canonical.form(result).encode("utf-8", "surrogatepass"))
        return digest.hexdigest()


def _top_level_keys(arguments: Any) -> tuple[str, ...]:
    try:
        if isinstance(arguments, Mapping):
            return tuple(sorted(str(k) for k in arguments))
    except Exception:  # deliberate: keys are a courtesy, not a requirement
        pass
    return ()
