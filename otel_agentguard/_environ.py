"""Environment settings read on every call, cheaply.

Some settings are read per model or tool call, so that changing the environment
takes effect at once (tests and notebooks rely on it). ``os.environ.get`` on an
unset name raises and catches a ``KeyError`` inside the ``Mapping`` protocol: for
an instrumented call, four such reads cost as much as writing its span's
attributes. ``os.environ`` keeps its entries in a plain dict of encoded names
(``_data``), updated by every write through ``os.environ``; a :func:`reader`
looks its name up there directly, encoded once, when this interpreter's layout
is the one checked at import and ``os.environ`` is still that object, and
through ``os.environ.get`` otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

#: ``os.environ`` and its dict of encoded entries with the encoder and decoder, when checked.
_Layout = tuple[Any, dict[Any, Any], Callable[[str], Any], Callable[[Any], str]]


def _direct_layout() -> _Layout | None:
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
    return environ, data, encode, decode


_LAYOUT = _direct_layout()


def reader(name: str, layout: _Layout | None = _LAYOUT) -> Callable[[], str]:
    """A function that returns ``os.environ.get(name, "")``, read afresh at each call."""
    if layout is None:
        return partial(_public_read, name)
    environ, data, encode, decode = layout
    key = encode(name)

    def read() -> str:
        if os.environ is not environ:  # replaced (``mock.patch("os.environ", ...)``): read the new one
            return _public_read(name)
        value = data.get(key)
        return "" if value is None else decode(value)

    return read


def _public_read(name: str) -> str:
    return os.environ.get(name, "")
