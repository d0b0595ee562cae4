"""Fingerprints of the raw tool arguments and results other instrumentations record.

Another instrumentation's tool span carries its call's arguments and result as
JSON text (``gen_ai.tool.call.arguments`` and its foreign spellings). Decoding
and canonicalising that text is most of what judging such a span costs, and an
agent that is stuck sends the very same text again and again: a guard
fingerprints each distinct text once per tool (and key), then remembers it.
The memory is bounded (entries, and characters per text: longer texts and
values that are not text are fingerprinted every time) and forgets its older
half when full.
"""

from __future__ import annotations

from itertools import islice
from typing import Any

from otel_agentguard import _json_text_form
from otel_agentguard._json_text import decode_payload
from otel_agentguard.fingerprint import Fingerprinter, is_empty, key_epoch

MAX_ENTRIES = 4096  # per kind (arguments, results)
_MAX_REMEMBERED_CHARS = 1024  # so at most ~8 MiB of remembered text per guard
_JSON_CONTAINER_START = ("{", "[")


class PayloadFingerprints:
    """Fingerprints of raw payload texts, remembered per fingerprinter and text.

    Safe from any thread: a lost race costs a second fingerprint, never a wrong one.
    """

    __slots__ = ("_arguments", "_results", "_epoch", "_max")

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self._arguments: dict[tuple[Fingerprinter, str], str] = {}
        self._results: dict[tuple[Fingerprinter, str], tuple[str, bool]] = {}
        self._epoch = key_epoch()
        self._max = max_entries

    def arguments(self, fingerprinter: Fingerprinter, raw: Any) -> str:
        """The fingerprint of a call's arguments as a span recorded them."""
        if type(raw) is not str or len(raw) > _MAX_REMEMBERED_CHARS or not self._max:
            return fingerprinter.arguments(decode_payload(raw)).fingerprint
        if self._epoch != key_epoch():
            self._forget()
        key = (fingerprinter, raw)
        found = self._arguments.get(key)
        if found is None:
            written = _written_by_orjson(fingerprinter, raw)
            if written is not None:
                found = fingerprinter.digest_of_form(written[0], arguments=True)
            else:
                found = fingerprinter.arguments(decode_payload(raw)).fingerprint
            if len(self._arguments) >= self._max:
                self._arguments = _newer_half(self._arguments)
            self._arguments[key] = found
        return found

    def result(self, fingerprinter: Fingerprinter, raw: Any) -> tuple[str, bool]:
        """The fingerprint of a call's result as a span recorded it, and whether it is empty."""
        if type(raw) is not str or len(raw) > _MAX_REMEMBERED_CHARS or not self._max:
            value = decode_payload(raw)
            return fingerprinter.result(value), is_empty(value)
        if self._epoch != key_epoch():
            self._forget()
        key = (fingerprinter, raw)
        found = self._results.get(key)
        if found is None:
            written = _written_by_orjson(fingerprinter, raw)
            if written is not None:
                found = (fingerprinter.digest_of_form(written[0], arguments=False), is_empty(written[1]))
            else:
                value = decode_payload(raw)
                found = (fingerprinter.result(value), is_empty(value))
            if len(self._results) >= self._max:
                self._results = _newer_half(self._results)
            self._results[key] = found
        return found

    def _forget(self) -> None:
        """The key changed: what was remembered was made with the old one."""
        self._arguments = {}
        self._results = {}
        self._epoch = key_epoch()


def _written_by_orjson(fingerprinter: Fingerprinter, raw: str) -> tuple[bytes, Any] | None:
    """The canonical form orjson writes for a JSON object or array text (and its value), if it can."""
    if raw[:1] not in _JSON_CONTAINER_START or not _json_text_form.available():
        return None
    return _json_text_form.form_of_json_text(raw, fingerprinter.special_keys)


def _newer_half(entries: dict[Any, Any]) -> dict[Any, Any]:
    # Dicts keep insertion order: the second half is the newer one. (Copying, not deleting
    # from the front, whose holes make every later scan from the front slower.)
    try:
        return dict(islice(entries.items(), len(entries) // 2, None))
    except RuntimeError:  # another thread added one meanwhile: start afresh
        return {}


#: Fingerprints every text afresh (steps derived from model spans, hand-built steps).
NO_MEMORY = PayloadFingerprints(max_entries=0)
