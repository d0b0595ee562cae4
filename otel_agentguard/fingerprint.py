"""Keyed fingerprints of tool arguments and results: the public API.

``set_fingerprint_key`` rotates the key (``OTEL_AGENTGUARD_FINGERPRINT_KEY`` sets it at start);
:class:`Fingerprinter` gives the fingerprint a tool's arguments or result get. The canonical form
and how it is written live in :mod:`otel_agentguard.judge.fingerprints`.
"""

from otel_agentguard.judge.fingerprints.canonical import (
    DEFAULT_NOISE_KEYS,
    ArgumentsFingerprint,
    Fingerprinter,
    is_empty,
    keyed_hash,
    set_fingerprint_key,
)

__all__ = ["DEFAULT_NOISE_KEYS", "ArgumentsFingerprint", "Fingerprinter", "is_empty", "keyed_hash",
           "set_fingerprint_key"]
