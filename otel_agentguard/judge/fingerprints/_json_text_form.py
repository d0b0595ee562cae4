"""The canonical form of a JSON text, written by orjson and checked on its output.

A value orjson decoded from text is plain by construction: exact dicts with
string keys, lists, strings, 64-bit integers, finite floats, booleans and
None, no cycles. Written back with sorted keys it is the canonical form unless
it holds something the canonical form writes differently, and each of those
shows in orjson's output, where an unescaped quote only ever delimits a string:

* a string value spelled as a JSON number, which the form writes as the number
  (``"42"`` as ``42``): rewritten here, string token by string token, with the
  reference's own conversion;
* a float the form writes otherwise: integral (``1.0`` is ``1``) or with an
  exponent or below ``1e-4`` (where orjson and ``repr`` spell it differently;
  an integer beyond 64 bits, which orjson reads as a float, is one of those);
* a noise or unordered key: ``"key":`` (inside a string its quotes are escaped);
* nesting that may reach the walk's depth bound (counted loosely: brackets in
  strings count too).

Any of the others (or a false alarm from text inside a string) returns None
and the reference walker writes the form. Only short texts come here, far inside
the walk's value and text budgets.
"""

from __future__ import annotations

import re
from typing import Any

from otel_agentguard.judge.fingerprints import _plain_json
from otel_agentguard.judge.fingerprints.canonical import numeric_string_text

try:
    import orjson as _orjson
except ImportError:  # optional: without it every form is the walker's
    _orjson = None  # type: ignore[assignment]  # checked before use

_NUMERIC_STRING = re.compile(rb'"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"').search
# Every string token of orjson's output, in turn (outside strings there are no quotes; inside,
# a quote is escaped), and the colon that makes it a key.
_STRING_TOKEN = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"(:?)', re.DOTALL)
# Integral, with an exponent, or below 1e-4 (which orjson writes as "0.0000...", repr with one).
# (A number token of orjson's output follows ":", "[" or "," at once: so digits and an "e" inside a
# string, as in a hex id, are not taken for one, save where the string holds such a character.)
_FLOAT_WRITTEN_OTHERWISE = re.compile(rb"[:\[,]-?[0-9]+(?:\.0+[,\]}]|(?:\.[0-9]+)?[eE])|[:\[,]-?0\.0000").search
_MAX_BRACKETS = 63  # below the walk's depth bound (64), whatever the nesting
# Every digit and "-" as "0": each first look below is then one substring search (orjson
# writes exponents with a small "e").
_FIRST_LOOK = bytes.maketrans(b"123456789-", b"0000000000")
_MAX_PATTERNS = 256
_special_key_patterns: dict[frozenset[str], Any] = {}


#: Whether orjson is installed and writes the canonical form of plain values (checked at import).
AVAILABLE = _orjson is not None and _plain_json.orjson_agrees()


def form_of_json_text(raw: str, special_keys: frozenset[str]) -> tuple[bytes, Any] | None:
    """The canonical form (UTF-8) of the object or array ``raw`` holds, and the value; None
    when orjson cannot read it as the standard library does or its output needs the walker."""
    if _orjson is None:
        return None
    try:
        value = _orjson.loads(raw)
    except ValueError:  # orjson.JSONDecodeError: NaN, lone surrogates, huge numbers, no JSON
        return None
    if type(value) is not dict and type(value) is not list:
        return None
    form: bytes = _orjson.dumps(value, option=_orjson.OPT_SORT_KEYS)
    # A first look with every digit and "-" as "0" (C-level): a string can be spelled as a number only
    # where a quote precedes a digit or "-", a float written otherwise only where a digit
    # precedes "." or an exponent. Most payloads have neither, and skip the exact searches.
    # (``find``, not ``in``: ``bytes in bytes`` first tries its needle as an int, and formats
    # the error that raises.)
    look = form.translate(_FIRST_LOOK)
    if (look.find(b"0.") != -1 or look.find(b"0e") != -1) and _FLOAT_WRITTEN_OTHERWISE(form) is not None:
        return None
    if look.find(b'"0') != -1 and _NUMERIC_STRING(form) is not None:
        form = _STRING_TOKEN.sub(_as_the_form_writes_it, form)
    if len(form) > 2 * _MAX_BRACKETS and form.count(b"[") + form.count(b"{") > _MAX_BRACKETS:
        return None
    if special_keys and _special_key_pattern(special_keys)(form) is not None:
        return None
    return form, value


def _as_the_form_writes_it(token: re.Match[bytes]) -> bytes:
    """A string token of orjson's output as the canonical form writes it: a value spelled as a
    JSON number as that number (keys stay strings)."""
    if token.group(2):
        return token.group(0)
    number = numeric_string_text(token.group(1).decode("utf-8"))
    return token.group(0) if number is None else number.encode("ascii")


def _special_key_pattern(keys: frozenset[str]) -> Any:
    found = _special_key_patterns.get(keys)
    if found is None:
        assert _orjson is not None
        # '"key":' cannot occur inside a string (its quotes would be escaped): it is a key.
        quoted = b"|".join(re.escape(_orjson.dumps(key)[1:-1]) for key in sorted(keys))
        found = re.compile(b'"(?:' + quoted + b')":').search
        if len(_special_key_patterns) < _MAX_PATTERNS:  # one per tool contract at most
            _special_key_patterns[keys] = found
    return found
