"""Fingerprints are keyed: a low-entropy value (an order id, a phone number) cannot be found by
hashing every candidate without the key. And what the key does to correlation: one key, same
fingerprints in every process; a new key (rotation), new fingerprints; no key, a random one
per process.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

import otel_agentguard as ag
from otel_agentguard import attributes as A
from otel_agentguard.environment_variables import OTEL_AGENTGUARD_FINGERPRINT_KEY
from otel_agentguard.judge.fingerprints.canonical import Fingerprinter, set_fingerprint_key
from otel_agentguard.testing import GuardedTracing

SECRET_KEY = "k3y-" + "9f1c2e7a5b3d4c6e8f0a1b2c3d4e5f60"  # what an operator sets; never in a trace
ORDER = "ORD-4711"
PHONE = "+44 7700 900123"
ORDERS = [f"ORD-{n:04d}" for n in range(10_000)]
PHONES = [f"+44 7700 900{n:03d}" for n in range(1000)]
GUESSED_SECRETS = ["", "secret", "agentguard", "agentguard-tests", "changeme", "password", "default", "key", "test"]


def _derived(secret: str) -> bytes:
    # The package's documented derivation: BLAKE2b(secret, person="agentguard.fp"), 32 bytes.
    return hashlib.blake2b(secret.encode(), digest_size=32, person=b"agentguard.fp").digest()


@pytest.fixture
def operator_key() -> Iterator[None]:
    set_fingerprint_key(SECRET_KEY)
    try:
        yield
    finally:
        set_fingerprint_key(None)  # back to the environment's key (tests/conftest.py)


def exported_fingerprints() -> tuple[str, str]:
    """The argument and result fingerprints the guard exports for lookup(order=ORDER) -> {"phone": PHONE}."""
    with GuardedTracing() as tracing:
        @ag.tool(tracer_provider=tracing.tracer_provider)
        def lookup(order: str) -> dict:
            return {"phone": PHONE}

        with tracing.session("keyed"):
            lookup(ORDER)
    (span,) = [s for s in tracing.spans() if s.name == "execute_tool lookup"]
    return span.attributes[A.TOOL_ARGS_FINGERPRINT], span.attributes[A.TOOL_RESULT_FINGERPRINT]


def candidates(fingerprint: str, values: list[str], make, key: bytes | None, prefix: bytes = b"") -> list[str]:
    """The values whose fingerprint, built the package's way with ``key`` (unkeyed when None), matches."""
    canonical = Fingerprinter("lookup")
    found = []
    for value in values:
        data = prefix + canonical.canonical(make(value)).encode("utf-8")
        digest = hashlib.blake2b(data, digest_size=16, **({"key": key} if key is not None else {})).hexdigest()
        if digest == fingerprint:
            found.append(value)
    return found


def test_a_low_entropy_order_id_and_phone_number_cannot_be_found_without_the_key(operator_key):
    args_fp, result_fp = exported_fingerprints()
    prefix = b"6:lookup|"  # the tool name is part of an argument fingerprint
    order_args, phone_result = (lambda v: {"order": v}), (lambda v: {"phone": v})

    # The control: with the key, the enumeration finds exactly the planted values, so the
    # construction below is the package's, and a miss without the key means something.
    assert candidates(args_fp, ORDERS, order_args, _derived(SECRET_KEY), prefix) == [ORDER]
    assert candidates(result_fp, PHONES, phone_result, _derived(SECRET_KEY)) == [PHONE]

    # Without it: unkeyed BLAKE2b of the same canonical form, guessed secrets, plain hashes of the value.
    assert candidates(args_fp, ORDERS, order_args, None, prefix) == []
    assert candidates(result_fp, PHONES, phone_result, None) == []
    for guess in GUESSED_SECRETS:
        assert candidates(args_fp, ORDERS, order_args, _derived(guess), prefix) == [], guess
        assert candidates(result_fp, PHONES, phone_result, _derived(guess)) == [], guess
    for algorithm in ("md5", "sha1", "sha256", "blake2b"):
        hashes = {hashlib.new(algorithm, value.encode()).hexdigest()[:32] for value in ORDERS + PHONES}
        assert args_fp not in hashes and result_fp not in hashes


def test_a_live_session_spanning_a_key_rotation_loses_the_repeat_across_it():
    """Rotation changes every fingerprint at once: a call before and the same call after no longer match."""

    def run(rotate: bool) -> str:
        with GuardedTracing() as tracing:
            @ag.tool(tracer_provider=tracing.tracer_provider)
            def lookup(order: str) -> dict:
                return {"state": "stalled"}

            set_fingerprint_key("old-key")
            try:
                with tracing.session("rotating") as handle:
                    lookup(ORDER)
                    lookup(ORDER)
                    if rotate:
                        set_fingerprint_key("new-key")
                    lookup(ORDER)
                    tracing.record_model_call()
            finally:
                set_fingerprint_key(None)
        return handle.verdict.stop_reason

    assert run(rotate=False) == "tool_loop"
    assert run(rotate=True) == "completed"


_PRINT_FINGERPRINT = (
    "from otel_agentguard.judge.fingerprints.canonical import Fingerprinter;"
    f"print(Fingerprinter('lookup').arguments({{'order': {ORDER!r}}}).fingerprint)"
)


def _in_processes(keys: list[str | None]) -> list[tuple[str, str]]:
    """(fingerprint, stderr) of ORDER computed in a fresh process per key (None: key unset)."""
    running = []
    for key in keys:
        env = {k: v for k, v in os.environ.items() if k != OTEL_AGENTGUARD_FINGERPRINT_KEY}
        if key is not None:
            env[OTEL_AGENTGUARD_FINGERPRINT_KEY] = key
        running.append(subprocess.Popen([sys.executable, "-c", _PRINT_FINGERPRINT], env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    for process in running:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        results.append((out.strip(), err))
    return results


def test_correlation_across_processes_follows_the_key():
    (a1, _), (a2, _), (b, _), (r1, warn1), (r2, _) = _in_processes(["key-A", "key-A", "key-B", None, None])
    assert a1 == a2  # one key: every process agrees (replay, other workers, other hosts)
    assert b != a1  # rotated: the same call no longer matches the old traces
    assert r1 != r2 and a1 not in (r1, r2)  # unset: a random key per process, no correlation at all
    assert OTEL_AGENTGUARD_FINGERPRINT_KEY in warn1  # ...and the process says so
    set_fingerprint_key("key-A")
    try:
        assert Fingerprinter("lookup").arguments({"order": ORDER}).fingerprint == a1
    finally:
        set_fingerprint_key(None)
