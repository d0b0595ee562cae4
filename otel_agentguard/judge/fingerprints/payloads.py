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

from otel_agentguard.judge.fingerprints import _json_text_form
from otel_agentguard.judge.fingerprints._json_text import decode_payload
from otel_agentguard.judge.fingerprints.canonical import Fingerprinter, is_empty, key_epoch

MAX_ENTRIES = 8192
_MAX_REMEMBERED_CHARS = 1024  # so at most ~8 MiB of remembered text per guard
# orjson writes the form of texts up to this long: far fewer values (each takes two characters
# or more) than the walk's value budget, which the reference form would cut short.
_MAX_WRITTEN_CHARS = 1 << 16
_JSON_CONTAINER_START = ("{", "[")


class PayloadFingerprints:
    """Fingerprints of raw payload texts, remembered per fingerprinter and text.

    Safe from any thread: a lost race costs a second fingerprint, never a wrong one.
    """

    __slots__ = ("_remembered", "_epoch", "_max")

    def __init__(self, max_entries: int = MAX_ENTRIES):
        # (fingerprinter, text, of arguments?) -> (fingerprint, empty result?)
        self._remembered: dict[tuple[Fingerprinter, str, bool], tuple[str, bool]] = {}
        self._epoch = key_epoch()
        self._max = max_entries

    def arguments(self, fingerprinter: Fingerprinter, raw: Any) -> str:
        """The fingerprint of a call's arguments as a span recorded them."""
        return self._fingerprint(fingerprinter, raw, True)[0]

    def result(self, fingerprinter: Fingerprinter, raw: Any) -> tuple[str, bool]:
        """The fingerprint of a call's result as a span recorded it, and whether it is empty."""
        return self._fingerprint(fingerprinter, raw, False)

    def _fingerprint(self, fingerprinter: Fingerprinter, raw: Any, arguments: bool) -> tuple[str, bool]:
        if type(raw) is not str or len(raw) > _MAX_REMEMBERED_CHARS or not self._max:
            return _fingerprint_of(fingerprinter, raw, arguments)
        if self._epoch != key_epoch():  # the key changed: what was remembered was made with the old one
            self._remembered = {}
            self._epoch = key_epoch()
        key = (fingerprinter, raw, arguments)
        found = self._remembered.get(key)
        if found is None:
            found = _fingerprint_of(fingerprinter, raw, arguments)
            if len(self._remembered) >= self._max:
                self._remembered = _newer_half(self._remembered)
            self._remembered[key] = found
        return found


def _fingerprint_of(fingerprinter: Fingerprinter, raw: Any, arguments: bool) -> tuple[str, bool]:
    """A payload's fingerprint (of arguments, else of a result) and whether it is an empty result:
    from the form orjson writes when it can, else through the reference walk."""
    if type(raw) is str and raw[:1] in _JSON_CONTAINER_START:
        written = (_json_text_form.form_of_json_text(raw, fingerprinter.special_keys)
                   if _json_text_form.AVAILABLE and len(raw) <= _MAX_WRITTEN_CHARS else None)
        if written is not None:
            form, value = written
            return fingerprinter.digest_of_form(form, arguments), not arguments and is_empty(value)
    value = decode_payload(raw)
    if arguments:
        return fingerprinter.arguments(value).fingerprint, False
    return fingerprinter.result(value), is_empty(value)


def _newer_half(entries: dict[Any, Any]) -> dict[Any, Any]:
    # Dicts keep insertion order: the second half is the newer one. (Copying, not deleting
    # from the front, whose holes make every later scan from the front slower.)
    try:
        return dict(islice(entries.items(), len(entries) // 2, None))
    except RuntimeError:  # another thread added one meanwhile: start afresh
        return {}


#: Fingerprints every text afresh (steps derived from model spans, hand-built steps).
NO_MEMORY = PayloadFingerprints(max_entries=0)
