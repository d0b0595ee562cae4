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
value (``%b`` bytes digest, ``%a`` typed buffer, ``%t"iso"`` dates and times,
``%j`` complex numbers, ``%f`` classes and functions by name, ``@`` cycles,
``~`` too deep, ``…`` over budget, ``?`` opaque). JSON-like values get the same
form as the earlier length-prefixed one made equal (see
tests/test_fingerprint_regression.py). Plain dicts with string keys and lists of
str/int/float/bool/None are written inline, one Python frame per level, with
quoted keys remembered (a small dict of scalars, the usual tool arguments,
without the walk's bookkeeping at all); larger plain containers whose form is
what ``json.dumps`` writes are written whole by orjson or the standard library's
encoder (see :mod:`otel_agentguard.judge.fingerprints._plain_json`). The keyed BLAKE2b state (with
the tool name already fed) is built once and copied.

Only values whose content can be read without running application code are
canonicalised (see :mod:`otel_agentguard.judge.fingerprints._readable`); any other object is
*opaque*: it gets a marker unique to the call, so it never makes two calls look
alike, and :class:`ArgumentsFingerprint` says so. Every readable value gives a
deterministic form and nothing here raises; one call reads at most 50,000
values (every container kind together), 64 levels and 4 MiB of long strings
and buffers, so two values that differ only beyond those bounds share a
fingerprint.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import hashlib
import itertools
import json.encoder
import logging
import operator
import os
import re
import threading
import uuid
from pathlib import Path, PosixPath, PurePath, PurePosixPath, PureWindowsPath, WindowsPath
from typing import Any, NamedTuple

from otel_agentguard._fork import renew_in_forked_children
from otel_agentguard.environment_variables import OTEL_AGENTGUARD_FINGERPRINT_KEY
from otel_agentguard.judge.fingerprints import _plain_json, _readable

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
renew_in_forked_children(globals(), "_key_lock")
_key: bytes | None = None
# The keyed BLAKE2b state for the process key, built once: each digest copies it
# instead of re-keying (a key block less per call). Reset with the key.
_keyed_state: Any = None
# Counts key changes, so what remembers fingerprints can tell they were made with another key.
_key_epoch = 0


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
                    "%s is not set: fine for one process; to compare fingerprints across processes "
                    "or restarts, set it to the same secret everywhere (e.g. openssl rand -hex 32)",
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


def key_epoch() -> int:
    """Changes whenever the process key is set: fingerprints remembered under another epoch are stale."""
    return _key_epoch


def set_fingerprint_key(secret: str | bytes | None) -> None:
    """Set the key (e.g. when rotating it); ``None`` re-reads the environment on next use."""
    global _key, _keyed_state, _key_epoch
    with _key_lock:
        _keyed_state = None
        _key_epoch += 1
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


def numeric_string_text(text: str) -> str | None:
    """Canonical number text when ``text`` is spelled as a JSON number (how the form writes
    such a string value), else None."""
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


_MAX_NODES = 50_000  # values (container entries) read per call, every container kind together
_MAX_TEXT = 4 << 20  # characters of long strings plus bytes of buffers read per call
# Strings up to this long are read in full and not counted against _MAX_TEXT: with at most
# _MAX_NODES values per call their total is bounded anyway, and counting them costs the hot path.
_SHORT_TEXT = 256
# Containers are offered to the bulk encoder before the walk reads them, only those with this
# many entries or more: smaller ones are cheaper to walk than to check.
_BULK_MIN = 8
_MAX_LABELS = 8192  # quoted keys remembered, for all tools together
_MAX_LABEL_CHARS = 64  # longer keys are quoted each time, never remembered

# Argument keys repeat across calls: their JSON-quoted labels are remembered (bounded,
# shared by every tool so memory does not grow with the number of tools).
_labels: dict[str, str] = {}

_DATETIMES = (datetime.datetime, datetime.time)
_PATHS = frozenset({PurePath, PurePosixPath, PureWindowsPath, Path, PosixPath, WindowsPath})
_STR_ONLY = frozenset({str})
_first_item = operator.itemgetter(0)


def _str_text(value: str) -> str:
    """A string: its number text when it is spelled as a JSON number, else JSON-quoted."""
    if value and value[0] in _NUMBER_START:
        number = numeric_string_text(value)
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


def _label(key: str) -> str:
    label = _labels.get(key)
    if label is None:
        label = _quote(key) + ":"
        if len(key) <= _MAX_LABEL_CHARS and len(_labels) < _MAX_LABELS:
            _labels[key] = label
    return label


class _Walk:
    """Per-call state: containers on the current path (cycles), what is left of the
    budgets, and whether anything was opaque or cut off."""

    __slots__ = ("active", "left", "text_left", "opaque", "truncated", "bulk_left")

    def __init__(self) -> None:
        self.active: set[int] = set()
        self.left = _MAX_NODES
        self.text_left = _MAX_TEXT
        self.opaque = False
        self.truncated = False
        # Values the bulk check may look at in vain before the walker stops asking it.
        self.bulk_left = _MAX_NODES

    def spend(self, count: int) -> int:
        """Take up to ``count`` values from the budget; returns how many may be read."""
        granted = count if count <= self.left else max(self.left, 0)
        self.left -= granted
        if granted < count:
            self.truncated = True
        return granted


def _opaque(walk: _Walk) -> str:
    # Unique to this call, so an unreadable argument never makes two calls look alike.
    walk.opaque = True
    return "?" + os.urandom(8).hex()


class _Canonicalizer:
    """Writes the canonical form of a value: compact JSON with sorted keys, numbers in
    one spelling, and markers (never valid JSON) for values JSON cannot hold.

    The hot path handles plain dicts and lists of str/int/float/bool/None inline, one
    Python frame per nesting level; everything else goes through ``_other``, which
    reads only what :mod:`otel_agentguard.judge.fingerprints._readable` allows.

    One class, longer than most here, because the walk is the hot path: its budgets
    and output buffer live on one object whose methods call each other without
    passing state, and splitting it would add a frame per value.
    """

    __slots__ = ("_noise", "_unordered", "_special", "bulk")

    def __init__(self, noise_keys: frozenset[str], unordered_keys: frozenset[str], bulk: bool = True):
        self._noise = noise_keys
        self._unordered = unordered_keys
        self._special = noise_keys | unordered_keys  # keys the bulk encoder cannot honour
        self.bulk = bulk  # False: the reference walker alone (tests compare the two)

    @property
    def special_keys(self) -> frozenset[str]:
        return self._special

    def form(self, value: Any) -> str:
        return self.root(value)[0]

    def small(self, value: dict[Any, Any]) -> tuple[str, tuple[str, ...]] | None:
        """The form of a small exact dict under plain string keys, and its sorted keys, written
        without the walk's bookkeeping when every value is a short scalar (no cycle, depth or
        budget can be reached). None for any other dict, which the walk then writes."""
        if not _STR_ONLY.issuperset(map(type, value)):  # an exact dict's own iterator: no application code
            return None
        entries = sorted(dict.items(value))  # exact str keys, unique: values are never compared
        noise = self._noise
        parts = []
        for key, item in entries:
            if key in noise:
                continue
            kind = type(item)
            # The scalar dispatch of _dict; anything longer or nested goes the general way.
            if kind is str:
                if len(item) > _SHORT_TEXT:
                    return None
                if item and item[0] in _NUMBER_START:
                    text = numeric_string_text(item) or _quote(item)
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
            else:
                return None
            parts.append((_labels.get(key) or _label(key)) + text)
        return "{" + ",".join(parts) + "}", tuple(map(_first_item, entries))

    def root(self, value: Any, walk: _Walk | None = None) -> tuple[str, tuple[str, ...] | None]:
        """The form and, for a dict whose keys are all plain strings, its sorted keys."""
        walk = walk or _Walk()
        try:
            kind = type(value)
            if kind is dict or kind is list or kind is tuple:
                text = self._bulk(value, 0, walk)
                if text is not None:
                    return text, tuple(sorted(value)) if kind is dict else None
            if kind is dict or dict in _readable.mro(kind):
                form, keys = self._dict(value, 0, walk, True)
                return form, keys if keys is not None else self._key_texts(value, walk)
            return self._value(value, 0, walk, False), None
        except Exception:  # deliberate: a fingerprint must never break the caller
            return _opaque(walk), None

    def _value(self, value: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        kind = type(value)
        if kind is str:
            return self._str(value, walk)
        text = _scalar_text(value)
        if text is not None:
            return text
        if depth >= _MAX_DEPTH:
            walk.truncated = True
            return "~"
        if kind is dict:
            return self._dict(value, depth, walk, False)[0]
        if kind is list or kind is tuple:
            return self._sequence(value, depth, walk, unordered)
        return self._other(value, depth, walk, unordered)

    def _str(self, value: str, walk: _Walk) -> str:
        if len(value) <= _SHORT_TEXT:
            return _str_text(value)
        readable = walk.text_left
        walk.text_left -= len(value)
        if walk.text_left >= 0:
            return _str_text(value)
        # Over the text budget: a digest of what fits, and the length.
        walk.truncated = True
        head = value[: max(readable, 0)].encode("utf-8", "surrogatepass")
        return "…" + hashlib.blake2b(head, digest_size=16).hexdigest() + str(len(value))

    def _dict(self, value: dict[Any, Any], depth: int, walk: _Walk, want_keys: bool) -> tuple[str, Any]:
        marker = id(value)
        active = walk.active
        if marker in active:
            return "@", None
        size = dict.__len__(value)
        left = walk.left
        if size <= left:
            # Only exact-str keys are sorted directly: a key class may define its own __lt__.
            # (Iterating a dict's keys through dict's own iterator runs no application code.)
            if not _STR_ONLY.issuperset(map(type, dict.__iter__(value))):
                return self._mapping(value, depth, walk), None
            walk.left = left - size
            readable = size
            entries = sorted(dict.items(value))  # keys are unique: values are never compared
        else:  # over the budget: the first entries, in insertion order, and a marker
            readable = walk.spend(size)
            entries = list(itertools.islice(dict.items(value), readable))
            if not set(map(type, [key for key, _ in entries])) <= _STR_ONLY:
                walk.left += readable
                return self._mapping(value, depth, walk), None
            entries.sort()
        active.add(marker)
        try:
            noise = self._noise
            unordered = self._unordered
            child_depth = depth + 1
            parts = []
            for key, item in entries:
                if key in noise:
                    continue
                label = _labels.get(key) or _label(key)
                kind = type(item)
                # The scalar dispatch of _value, written out: a call per value is the cost
                # this hot path exists to avoid (the same in _sequence).
                if kind is str:
                    if len(item) > _SHORT_TEXT:
                        text = self._str(item, walk)  # long text counts against the text budget
                    elif item and item[0] in _NUMBER_START:
                        text = numeric_string_text(item) or _quote(item)
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
                    walk.truncated = True
                    text = "~"
                else:
                    try:
                        if kind is dict:
                            text = self._bulk(item, child_depth, walk) or self._dict(item, child_depth, walk, False)[0]
                        elif kind is list or kind is tuple:
                            if key in unordered:
                                text = self._sequence(item, child_depth, walk, True)
                            else:
                                text = self._bulk(item, child_depth, walk) or self._sequence(item, child_depth, walk,
                                                                                             False)
                        else:
                            text = self._other(item, child_depth, walk, key in unordered)
                    except Exception:  # deliberate: unreadable, so unique to this call
                        text = _opaque(walk)
                parts.append(label + text)
        finally:
            active.discard(marker)
        keys = tuple(map(_first_item, entries)) if want_keys else None
        if readable < size:
            parts.append("…")
        return "{" + ",".join(parts) + "}", keys

    def _sequence(self, items: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        """An exact list or tuple (a subclass is copied into a bounded list first)."""
        marker = id(items)
        active = walk.active
        if marker in active:
            return "@"
        count = len(items)
        left = walk.left
        if count <= left:
            walk.left = left - count
            readable = count
        else:
            readable = walk.spend(count)
            items = items[:readable]
        active.add(marker)
        try:
            child_depth = depth + 1
            texts = []
            for item in items:
                kind = type(item)
                if kind is str:
                    if len(item) > _SHORT_TEXT:
                        text = self._str(item, walk)  # long text counts against the text budget
                    elif item and item[0] in _NUMBER_START:
                        text = numeric_string_text(item) or _quote(item)
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
                    walk.truncated = True
                    text = "~"
                else:
                    try:
                        if kind is dict:
                            text = self._bulk(item, child_depth, walk) or self._dict(item, child_depth, walk, False)[0]
                        elif kind is list or kind is tuple:
                            text = self._bulk(item, child_depth, walk) or self._sequence(item, child_depth, walk, False)
                        else:
                            text = self._other(item, child_depth, walk, False)
                    except Exception:  # deliberate: unreadable, so unique to this call
                        text = _opaque(walk)
                texts.append(text)
        finally:
            active.discard(marker)
        if unordered:
            texts.sort()
        if readable < count:
            texts.append("…")  # over budget: the rest of a huge list compares equal
        return "[" + ",".join(texts) + "]"

    def _bulk(self, value: Any, depth: int, walk: _Walk) -> str | None:
        """The form of an exact dict, list or tuple written by a C encoder when every value in
        it is a plain JSON value whose canonical form is the encoder's (see
        :mod:`otel_agentguard.judge.fingerprints._plain_json`); None to walk it here. Spends the same budgets."""
        if not self.bulk or walk.bulk_left <= 0:
            return None
        if len(value) < _BULK_MIN:
            return None  # small containers are cheaper to walk than to check in Python
        plain = _plain_json.check(value, depth, walk.left, walk.text_left, self._special)
        if type(plain) is int:
            walk.bulk_left -= plain + 1
            return None
        assert isinstance(plain, _plain_json.Plain)
        text = _plain_json.encode(value, plain)
        if text is None:
            walk.bulk_left -= plain.entries + 1
            return None
        walk.left -= plain.entries
        walk.text_left -= plain.text
        return text

    def _mapping(self, value: dict[Any, Any], depth: int, walk: _Walk) -> str:
        """A dict with keys that are not all plain strings, or too big to read whole.

        Keys are compared as text (JSON's rule: the key 1 and the key "1" are one key);
        when two keys of one dict share a text, their kinds tell them apart.
        """
        marker = id(value)
        if marker in walk.active:
            return "@"
        size = dict.__len__(value)
        readable = walk.spend(size)
        walk.active.add(marker)
        try:
            entries = []
            for key, item in itertools.islice(dict.items(value), readable):
                name, kind = self._key_text(key, walk)
                if name in self._noise:
                    continue
                entries.append((name, kind, self._child(item, depth + 1, walk, name in self._unordered)))
        finally:
            walk.active.discard(marker)
        names = [name for name, _, _ in entries]
        if len(set(names)) < len(names):
            entries = [(name if kind == "s" else f"{name}\x00{kind}", kind, text) for name, kind, text in entries]
        entries.sort()
        parts = [_quote(name) + ":" + text for name, _, text in entries]
        if readable < size:
            parts.append("…")
        return "{" + ",".join(parts) + "}"

    def _fields(self, fields: list[tuple[str, Any]], depth: int, walk: _Walk, owner: Any) -> str:
        """Named fields of a dataclass or model, written like a dict of them."""
        marker = id(owner)
        if marker in walk.active:
            return "@"
        walk.active.add(marker)
        try:
            readable = walk.spend(len(fields))
            entries = sorted(
                (name, self._child(item, depth + 1, walk, name in self._unordered))
                for name, item in fields[:readable] if name not in self._noise
            )
        finally:
            walk.active.discard(marker)
        parts = [_quote(name) + ":" + text for name, text in entries]
        if readable < len(fields):
            parts.append("…")
        return "{" + ",".join(parts) + "}"

    def _child(self, value: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        """The form of one nested value (general path); if it fails, only it becomes opaque."""
        try:
            return self._value(value, depth, walk, unordered)
        except Exception:  # deliberate: the siblings still tell calls apart
            return _opaque(walk)

    def _key_texts(self, value: dict[Any, Any], walk: _Walk) -> tuple[str, ...]:
        """The sorted texts of a dict's keys that are strings or numbers (bounded)."""
        texts = []
        for key in itertools.islice(dict.__iter__(value), _MAX_LABELS):
            text, kind = self._key_text(key, walk)
            if kind != "o":
                texts.append(text)
        return tuple(sorted(texts))

    def _key_text(self, key: Any, walk: _Walk) -> tuple[str, str]:
        """A dict key as JSON text, and its kind (to tell apart keys that share a text)."""
        kind = type(key)
        if kind is str:
            return key, "s"
        if key is None:
            return "null", "n"
        if kind is bool:
            return ("true" if key else "false"), "b"
        classes = _readable.mro(kind)
        if str in classes:
            return str.__str__(key), "s"
        if int in classes:
            return _int_text(int.__index__(key)), "i"
        if float in classes:
            return _number_text(float.__float__(key)), "f"
        return self._value(key, _MAX_DEPTH - 1, walk, False), "o"

    def _other(self, value: Any, depth: int, walk: _Walk, unordered: bool) -> str:
        """Every value but exact dicts, lists, tuples and JSON scalars."""
        kind = type(value)
        classes = _readable.mro(kind)
        if enum.Enum in classes:
            return self._value(object.__getattribute__(value, "_value_"), depth, walk, unordered)
        if str in classes:  # read through str's own method: a subclass may override __str__
            return self._str(str.__str__(value), walk)
        if int in classes:
            return _int_text(int.__index__(value))
        if float in classes:
            return _number_text(float.__float__(value))
        if kind is complex:
            return "%j" + _quote(complex.__repr__(value))
        if kind is decimal.Decimal:
            return _decimal_text(value)
        if bytes in classes or bytearray in classes or kind is memoryview:
            return self._bytes(value, walk)
        if kind in _DATETIMES:
            return "%t" + _quote(value.isoformat()) if _readable.standard_zone(value) else _opaque(walk)
        if kind is datetime.date:
            return "%t" + _quote(value.isoformat())
        if kind is datetime.timedelta:
            return _number_text(value.total_seconds())
        if kind is uuid.UUID or kind in _PATHS:
            return self._str(str(value), walk)
        if dict in classes:
            return self._dict(value, depth, walk, False)[0]
        if list in classes or tuple in classes:
            # A bounded copy through the builtin iterator (a subclass may override __iter__).
            iterate = list.__iter__ if list in classes else tuple.__iter__
            size = list.__len__(value) if list in classes else tuple.__len__(value)
            items = list(itertools.islice(iterate(value), min(size, max(walk.left, 0) + 1)))
            return self._sequence(items, depth, walk, unordered)
        if set in classes or frozenset in classes:
            iterate_unordered = set.__iter__ if set in classes else frozenset.__iter__
            items = list(itertools.islice(iterate_unordered(value), max(walk.left, 0) + 1))
            return self._sequence(items, depth, walk, True)
        fields = _readable.dataclass_fields(value)
        if fields is None:
            fields = _readable.pydantic_fields(value)
        if fields is not None:
            return self._fields(fields, depth, walk, value)
        name = _readable.qualified_name(value)
        if name is not None:
            return "%f" + _quote(name)
        if not _readable.defines_python_buffer(kind):
            try:
                view = memoryview(value)  # C buffers only (numpy arrays): no application code
            except (TypeError, ValueError):
                pass
            else:
                with view:
                    return self._buffer(view, walk)
        return _opaque(walk)

    def _bytes(self, value: Any, walk: _Walk) -> str:
        # Bytes are digested first: bounded size, and the outer hash is keyed anyway.
        with memoryview(value) as view:
            digest = _digest(view, walk)
        return "%b" + digest if digest is not None else _opaque(walk)

    def _buffer(self, view: memoryview, walk: _Walk) -> str:
        """A typed buffer (a numpy array): element format, shape and bounded content."""
        if "O" in view.format:
            return _opaque(walk)  # elements are object pointers: application objects, unread
        digest = _digest(view, walk)
        if digest is None:
            return _opaque(walk)
        return "%a" + _quote(view.format) + _quote(",".join(map(str, view.shape or ()))) + digest


def _digest(view: memoryview, walk: _Walk) -> str | None:
    """Digest of a buffer's bytes within the text budget; None when it cannot be read bounded."""
    size = view.nbytes
    if size <= walk.text_left:
        walk.text_left -= size
        data = view if view.c_contiguous else view.tobytes()
        return hashlib.blake2b(data, digest_size=16).hexdigest()
    if not view.c_contiguous:
        return None
    readable = max(walk.text_left, 0)
    walk.text_left = -1
    walk.truncated = True
    head = view.cast("B")[:readable]
    return hashlib.blake2b(head, digest_size=16).hexdigest() + "…" + str(size)


def is_empty(value: Any) -> bool:
    """True for results that carry nothing: None, blank text, empty containers,
    or a dict whose every value is empty. Reads no application code."""
    kind = type(value)
    if kind is str:  # the exact builtins most results are, answered without the class walk
        return not value.strip()
    if kind is list or kind is tuple:
        return not value
    if kind is dict and value and dict.__len__(value) <= 64:
        for item in dict.values(value):
            if type(item) is str and item.strip() or type(item) in _NEVER_EMPTY:
                return False  # one value that carries something: not empty, whatever the others
    try:
        return _is_empty(value, 0)
    except Exception:  # deliberate: unknown objects are not empty
        return False


def _is_empty(value: Any, depth: int) -> bool:
    if value is None:
        return True
    classes = _readable.mro(type(value))
    if str in classes:
        return not str.strip(value)
    for builtin in (list, tuple, set, frozenset, bytes, bytearray):
        if builtin in classes:
            return builtin.__len__(value) == 0
    if dict in classes:
        if depth > 8 or dict.__len__(value) > 64:
            return False
        return all(_is_empty(item, depth + 1) for item in dict.values(value))
    return False


_NEVER_EMPTY = frozenset({int, float, bool})  # a number or a flag is something (only None and blanks are not)


class ArgumentsFingerprint(NamedTuple):
    fingerprint: str
    keys: tuple[str, ...]  # sorted top-level keys of a dict of arguments
    size: int  # bytes of the canonical form
    opaque: bool = False  # held a value the guard does not read: the fingerprint is unique to this call
    truncated: bool = False  # past a budget (size, depth): values differing only there compare equal


_new_tuple = tuple.__new__


class Fingerprinter:
    """Canonical form and keyed hash for one tool's arguments and results.

    Built once per tool from its contract (noise and unordered keys); cheap to
    call and safe from any thread. The keyed hash states (and the argument
    state already fed the tool name) are built once and copied per digest.
    """

    __slots__ = ("tool_name", "special_keys", "_canonical", "_key", "_prefix", "_states")

    def __init__(
        self,
        tool_name: str,
        noise_keys: frozenset[str] = DEFAULT_NOISE_KEYS,
        unordered_keys: frozenset[str] = frozenset(),
        key: bytes | None = None,
    ):
        self.tool_name = tool_name
        self._canonical = _Canonicalizer(frozenset(noise_keys), frozenset(unordered_keys))
        #: Keys whose values the canonical form does not write as JSON does (noise, unordered).
        self.special_keys: frozenset[str] = self._canonical.special_keys
        # An explicit secret is derived like the environment's, so any length works.
        self._key = _derive_key(key) if key is not None else None
        # The tool name is part of the call: the same arguments to two tools differ.
        self._prefix = f"{len(tool_name)}:{tool_name}|".encode("utf-8", "surrogatepass")
        # (the base it was built from, the result's state, the arguments' state)
        self._states: tuple[Any, Any, Any] | None = None

    def _hash_states(self) -> tuple[Any, Any, Any]:
        """(the base it was built from, the result's state, the arguments' state) for the current
        key: one tuple, read once, so that another thread's rebuild cannot mix two keys' states
        in one answer."""
        base: Any = _process_state() if self._key is None else None  # the process key's state
        states = self._states
        if states is not None and states[0] is base:
            return states
        key = self._key if self._key is not None else fingerprint_key()
        result = base if self._key is None else hashlib.blake2b(key=key, digest_size=_DIGEST_BYTES)
        arguments = result.copy()
        arguments.update(self._prefix)
        states = (base, result, arguments)
        self._states = states
        return states

    def canonical(self, value: Any) -> str:
        return self._canonical.form(value)

    def arguments(self, arguments: Any) -> ArgumentsFingerprint:
        canonical = self._canonical
        small = None
        if type(arguments) is dict and dict.__len__(arguments) < _BULK_MIN and canonical.bulk:
            try:
                small = canonical.small(arguments)
            except Exception:  # deliberate: the walk below writes it (and never raises)
                small = None
        keys: tuple[str, ...] | None
        if small is not None:
            form, keys = small
            opaque = truncated = False
        else:
            walk = _Walk()
            form, keys = canonical.root(arguments, walk)
            opaque, truncated = walk.opaque, walk.truncated
        data = form.encode("utf-8", "surrogatepass")
        states = self._states
        # The states built for the current process key (or this fingerprinter's own key).
        if states is not None and states[0] is (_keyed_state if self._key is None else None):
            digest = states[2].copy()
        else:
            digest = self._hash_states()[2].copy()
        digest.update(data)
        # tuple.__new__: the NamedTuple's generated __new__ is Python code, a frame per call.
        return _new_tuple(ArgumentsFingerprint, (digest.hexdigest(), keys or (), len(data), opaque, truncated))

    def result(self, result: Any) -> str:
        digest: hashlib.blake2b = self._hash_states()[1].copy()
        digest.update(self._canonical.form(result).encode("utf-8", "surrogatepass"))
        return digest.hexdigest()

    def digest_of_form(self, form: bytes, arguments: bool) -> str:
        """The fingerprint of a canonical form written elsewhere (UTF-8): of arguments, else of a result."""
        states = self._hash_states()
        digest = (states[2] if arguments else states[1]).copy()
        digest.update(form)
        return digest.hexdigest()  # type: ignore[no-any-return]
