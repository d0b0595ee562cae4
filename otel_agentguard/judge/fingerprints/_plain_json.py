"""The canonical form of plain JSON values, written by a C encoder.

A value qualifies when every container in it is an exact ``dict`` (with exact
``str`` keys), ``list`` or ``tuple`` and every leaf an exact ``str``, ``int``,
``float``, ``bool`` or ``None``, and when the canonical form of each leaf is
what the encoder writes anyway: no string value spelled as a JSON number
(those become numbers), no integral float (written as an integer), no noise
or unordered key, and everything within the walk's budgets. Then
``orjson.dumps(OPT_SORT_KEYS)`` (when installed) or the
standard library's C encoder writes exactly the canonical form, byte for byte; anything else
returns ``None`` and the reference walker in :mod:`otel_agentguard.judge.fingerprints.canonical`
writes it.

The check reads the value one nesting level at a time with C-level iteration
over exact builtins only, so it runs no application code (save a key class's
comparison, when two dict keys' hashes collide) and costs a few Python steps
per level, not per value: a level's values are gathered in one call (the
garbage collector's view of builtin containers), their types become one byte
string (one byte per value), and the strings, floats and containers among them
are picked out through masks translated from it.
"""

from __future__ import annotations

import gc
import json.encoder
import math
import re
import sys
from itertools import chain, compress
from typing import Any

try:
    import orjson as _orjson
except ImportError:  # optional: the standard library's encoder is used
    _orjson = None  # type: ignore[assignment]  # checked before use

_MAX_DEPTH = 64
_LEVEL_COST = 64  # a level checked costs about as much as this many values
_SHORT_TEXT = 256  # longer string values count against the walk's text budget

# The types a plain value is made of, each named by a byte: a level's values become one byte
# string, and the values of one kind are picked out by translating it into a 0/1 mask.
# (Ints, not one-byte strings: ``int in bytes`` is a memchr, ``bytes in bytes`` first tries
# the needle as an int and formats the error it raises.)
_STR_CODE, _FLOAT_CODE, _DICT_CODE, _SEQUENCE_CODE = ord("s"), ord("f"), ord("d"), ord("l")
_CODES: dict[type, int] = {str: _STR_CODE, int: ord("i"), float: _FLOAT_CODE, bool: ord("b"), type(None): ord("n"),
                           dict: _DICT_CODE, list: _SEQUENCE_CODE, tuple: _SEQUENCE_CODE}
# KeyError for any other type (TypeError for an unhashable one), which is the check failing.
# (``__getitem__``: a cheaper call than ``get``.)
_code_of = _CODES.__getitem__


def _mask(code: int) -> bytes:
    return bytes(1 if byte == code else 0 for byte in range(256))


_STR_ONLY_CODES = _mask(_STR_CODE)
_FLOAT_ONLY_CODES = _mask(_FLOAT_CODE)
_DICT_ONLY_CODES = _mask(_DICT_CODE)
_SEQUENCE_ONLY_CODES = _mask(_SEQUENCE_CODE)
# The values of exact dicts, lists and tuples in one C call: the garbage collector's view of a
# builtin container is its values (and, for a dict whose key table is not all-str, its keys too:
# then the count is off and they are read the ordinary way). Nothing of the application runs.
_referents = gc.get_referents if sys.implementation.name == "cpython" else None


def _children(dicts: list[dict[Any, Any]], sequences: list[Any], count: int) -> list[Any]:
    """The values held by these exact dicts, lists and tuples (``count`` of them), in any order."""
    if _referents is not None:
        values = _referents(*dicts, *sequences)
        if len(values) == count:
            return values
    return [*chain.from_iterable(map(dict.values, dicts)), *chain.from_iterable(sequences)]


_STR_ONLY = frozenset({str})
_EMPTY: frozenset[Any] = frozenset()
_is_long = _SHORT_TEXT.__lt__  # 256 < length
# A whole string spelled as a JSON number (the reference's grammar) among NUL-separated strings.
# (Each string is preceded by a NUL: a literal first character makes the search skip to it.)
# The first string that begins like a number is found first: most strings do not.
_starts_like_number = re.compile(r"\x00[-0-9]").search
_NUMBER_BETWEEN_NULS = r"\x00-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][+-]?+[0-9]++)?+(?:\x00|\Z)"


def _without_possessive_quantifiers(pattern: str) -> str:
    """The pattern as Python 3.10 reads it (possessive quantifiers came in 3.11). In the pattern
    above they only spare backtracking: no match changes (a test compares the two)."""
    return pattern.replace("++", "+").replace("*+", "*").replace("?+", "?")


_number_between_nuls = re.compile(
    _NUMBER_BETWEEN_NULS if sys.version_info >= (3, 11) else _without_possessive_quantifiers(_NUMBER_BETWEEN_NULS)
).search
# orjson writes a float as ``repr`` does only between these (outside: 1e-05 vs 0.00001).
_ORJSON_LOW = 1e-4
_ORJSON_HIGH = 1e16

# The C encoder of the standard library, built once: sorted keys, compact, no ASCII escaping
# (the quoting the reference uses), NaN and Infinity allowed. Cycles cannot reach it: a
# cycle never ends, so the check stops it at the depth bound.
_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_stdlib_encode = (
    _c_make_encoder(None, None, json.encoder.encode_basestring, None, ":", ",", True, False, True)
    if _c_make_encoder is not None else None
)


class Plain:
    """What a qualifying value spends of the walk's budgets, and which encoders may write it."""

    __slots__ = ("entries", "text", "orjson", "stdlib")

    def __init__(self, entries: int, text: int, orjson: bool, stdlib: bool):
        self.entries = entries
        self.text = text
        self.orjson = orjson  # orjson writes it (its floats are repr's; it raises on wide integers)
        self.stdlib = stdlib  # the standard library's encoder writes it (every key checked a str)


def _holds_any(dicts: list[dict[Any, Any]], keys: frozenset[str]) -> bool:
    """Whether any of these exact dicts holds one of ``keys``. Their keys are gathered into one
    set with the hashes the dicts already hold (one C loop, where testing each key was a lookup
    and a hash call per key); only keys whose hashes collide are compared, and a key class whose
    comparison raises counts as a hit (the reference walker then writes the value)."""
    try:
        return not keys.isdisjoint(_EMPTY.union(*dicts))
    except Exception:  # deliberate: see above
        return True


def _str_keys_only(dict_levels: list[list[dict[Any, Any]]]) -> bool:
    return _STR_ONLY.issuperset(map(type, chain.from_iterable(chain.from_iterable(dict_levels))))


def check(value: Any, depth: int, entries_left: int, text_left: int, special: frozenset[str]) -> Plain | int:
    """``Plain`` when an encoder writes ``value``'s canonical form; otherwise what giving up
    cost, in values (each level counts as ``_LEVEL_COST`` values), so the caller bounds the waste."""
    kind = type(value)
    dicts: list[Any] = [value] if kind is dict else []
    sequences: list[Any] = [value] if kind is list or kind is tuple else []
    entries = 0
    text = 0
    orjson_ok = _orjson_agrees
    unchecked: list[list[dict[Any, Any]]] = []  # dicts whose key types orjson is left to check
    levels = 1
    while True:
        if depth >= _MAX_DEPTH:
            return entries + _LEVEL_COST * levels
        level_entries = sum(map(len, dicts)) + sum(map(len, sequences))
        entries += level_entries
        if entries > entries_left:
            return entries + _LEVEL_COST * levels
        if dicts:
            if special and _holds_any(dicts, special):
                return entries + _LEVEL_COST * levels
            if orjson_ok:  # orjson takes exact str keys only (it raises on any other; checked at import)
                unchecked.append(dicts)
            elif not _STR_ONLY.issuperset(map(type, chain.from_iterable(dicts))):
                return entries + _LEVEL_COST * levels
        values = _children(dicts, sequences, level_entries)
        try:
            # One byte per value naming its type; a type outside the table has none (KeyError).
            codes = bytes(map(_code_of, map(type, values)))
        except (KeyError, TypeError):
            return entries + _LEVEL_COST * levels
        if _STR_CODE in codes:
            strings = values if codes.count(_STR_CODE) == len(codes) else [
                *compress(values, codes.translate(_STR_ONLY_CODES))]
            # Long strings count against the text budget before anything reads them: the search
            # below reads at most the short ones and the budget.
            if max(map(len, strings)) > _SHORT_TEXT:
                text += sum(filter(_is_long, map(len, strings)))
                if text > text_left:
                    return entries + _LEVEL_COST * levels
            # One search for a whole string spelled as a JSON number among NUL-separated strings
            # (a NUL inside one can only make it look numeric: then the reference walker writes it;
            # so can a number-like string over 400 characters, which the reference quotes).
            joined = "\x00" + "\x00".join(strings)
            first = _starts_like_number(joined)  # cheaper than the whole grammar at every string
            if first is not None and _number_between_nuls(joined, first.start()) is not None:
                return entries + _LEVEL_COST * levels
        if _FLOAT_CODE in codes:
            floats = [*compress(values, codes.translate(_FLOAT_ONLY_CODES))]
            if any(map(float.is_integer, floats)):
                return entries + _LEVEL_COST * levels
            if orjson_ok:
                magnitudes = [*map(abs, floats)]
                # A NaN or an infinity makes the sum non-finite; then min and max are reliable.
                orjson_ok = (math.isfinite(sum(magnitudes)) and min(magnitudes) >= _ORJSON_LOW
                             and max(magnitudes) < _ORJSON_HIGH)
                if not orjson_ok:  # the stdlib encoder writes it: the key check skipped above, now
                    if not _str_keys_only(unchecked):
                        return entries + _LEVEL_COST * levels
                    unchecked.clear()
        has_dicts = _DICT_CODE in codes
        has_sequences = _SEQUENCE_CODE in codes
        if not has_dicts and not has_sequences:
            return Plain(entries, text, orjson_ok, not unchecked)
        dicts = [*compress(values, codes.translate(_DICT_ONLY_CODES))] if has_dicts else []
        sequences = [*compress(values, codes.translate(_SEQUENCE_ONLY_CODES))] if has_sequences else []
        depth += 1
        levels += 1


def encode(value: Any, plain: Plain) -> str | None:
    """The canonical form of a value ``check`` accepted; None when no encoder can write it
    (an integer beyond 64 bits for orjson, beyond the int->str limit for both)."""
    if plain.orjson and _orjson is not None:
        try:
            return _orjson.dumps(value, option=_orjson.OPT_SORT_KEYS).decode()
        except TypeError:  # orjson.JSONEncodeError is a TypeError
            pass
    if not plain.stdlib:
        return None
    try:
        if _stdlib_encode is not None:
            return "".join(_stdlib_encode(value, 0))
    except ValueError:  # an integer with more digits than int->str allows
        return None
    return None


def _orjson_writes_the_canonical_form() -> bool:
    """orjson is used only when this version writes what the checks above assume: repr's
    floats in the accepted range, the standard library's string escapes, sorted keys, and
    an error (never a guess) for keys that are not exact strings."""
    if _orjson is None:
        return False
    sample = {"b": [0.0001, 0.35, -123456789012345.6, 2.5e-4, 9.999999999999998e15], "a": "\x00\x1f\x7f\"\\/é\u2028😀",
              "é": {"x": [None, True, False, -(2**63), 2**64 - 1]}, "": ()}
    expected = json.dumps(sample, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        if _orjson.dumps(sample, option=_orjson.OPT_SORT_KEYS) != expected.encode():
            return False
    except Exception:  # deliberate: any surprise disables the path
        return False

    class Key(str):
        pass

    for odd in ({Key("a"): 1}, {1: 1}):
        try:
            _orjson.dumps(odd, option=_orjson.OPT_SORT_KEYS)
        except TypeError:
            continue
        except Exception:  # deliberate: any surprise disables the path
            return False
        return False
    return True


_orjson_agrees = _orjson_writes_the_canonical_form()


def orjson_agrees() -> bool:
    """Whether orjson is installed and writes the canonical form of plain values."""
    return _orjson_agrees
