"""``json.loads`` for JSON text that spans carry, through orjson when it reads the text alike.

orjson (the ``fast`` extra) parses a small payload about four times faster than the
standard library. It rejects a few texts the standard library reads (``NaN``, numbers
beyond double range, lone surrogates) and reads integers beyond 64 bits as floats: texts
holding a run of 19 or more digits, and every text orjson fails on, go to the standard
library, so the value is always the one ``json.loads`` returns.
"""

from __future__ import annotations

import json
import re
from typing import Any

try:
    import orjson as _orjson
except ImportError:  # optional: the standard library parses every text
    _orjson = None  # type: ignore[assignment]  # checked before use

# 19 digits in a row may be an integer orjson cannot hold (also inside strings: then the
# standard library parses a text orjson could have; the value is the same either way).
_LONG_DIGITS = re.compile(r"[0-9]{19}").search


def loads(text: str) -> Any:
    """The value of JSON ``text``; raises ``ValueError`` (or ``RecursionError``) as ``json.loads`` does."""
    if _orjson is not None and _LONG_DIGITS(text) is None:
        try:
            return _orjson.loads(text)
        except ValueError:  # orjson.JSONDecodeError: the standard library decides and words the error
            pass
    return json.loads(text)


MAX_PAYLOAD_CHARS = 1 << 20  # a payload beyond 1 MiB is not parsed (it is taken as text)


def decode_payload(raw: Any, starts: str = '{["') -> Any:
    """A payload attribute's value: JSON text beginning with one of ``starts`` becomes its
    value; anything else (or invalid, too long, absurdly deep JSON) is returned as is."""
    if isinstance(raw, str) and raw and len(raw) <= MAX_PAYLOAD_CHARS and raw[0] in starts:
        try:
            return loads(raw)
        except (ValueError, RecursionError):  # not JSON after all: taken as text
            return raw
    return raw
