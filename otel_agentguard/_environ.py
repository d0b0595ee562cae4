"""Environment settings read on every call, cheaply.

Some settings are read per model or tool call, so that changing the environment
takes effect at once (tests and notebooks rely on it). ``os.environ.get`` on an
unset name raises and catches a ``KeyError`` inside the ``Mapping`` protocol: for
an instrumented call, four such reads cost as much as writing its span's
attributes. ``os.environ`` keeps its entries in a plain dict of encoded names
(``_data``), updated by every write through ``os.environ``; it is read here
directly when this interpreter's layout is the one checked at import and
``os.environ`` is still that object, and through ``os.environ.get`` otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def _direct_reader() -> Callable[[str], str] | None:
    environ: Any = os.environ
    data, encode, decode = (getattr(environ, name, None) for name in ("_data", "encodekey", "decodevalue"))
    if type(data) is not dict or not callable(encode) or not callable(decode):
        return None
    probe = next(iter(environ), None)
    try:
        if probe is not None and decode(data[encode(probe)]) != environ[probe]:
            return None
    except Exception:  # deliberate: any surprise means the public API
        return None
    encoded: dict[str, Any] = {}  # the guard reads a handful of names

    def read(name: str) -> str:
        if os.environ is not environ:  # replaced (``mock.patch("os.environ", ...)``): read the new one
            return _public_read(name)
        key = encoded.get(name)
        if key is None:
            key = encoded[name] = encode(name)
        value = data.get(key)
        return "" if value is None else decode(value)

    return read


def _public_read(name: str) -> str:
    return os.environ.get(name, "")


#: ``os.environ.get(name, "")``: the value of an environment variable, ``""`` when unset.
setting: Callable[[str], str] = _direct_reader() or _public_read
