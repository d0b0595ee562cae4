"""The compiled keyed hash (``_plain_check.keyed_digest``) gives hashlib's keyed BLAKE2b-128 of the
seed's prefix and the message, for any key, prefix and message length around the block size; and
a fingerprinter's seeds give its own fingerprints."""

from __future__ import annotations

import hashlib

import pytest
from compiled_modules import skip_unless_built
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_agentguard import fingerprint
from otel_agentguard.fingerprint import Fingerprinter

try:
    from otel_agentguard._plain_check import keyed_digest
except ImportError:  # built without a C compiler: hashlib hashes every fingerprint
    keyed_digest = None  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def _built() -> None:
    skip_unless_built(keyed_digest is not None, "otel_agentguard._plain_check", "hashlib hashes every fingerprint")


around_blocks = st.integers(0, 3).flatmap(lambda blocks: st.integers(max(blocks * 128 - 2, 0), blocks * 128 + 2))


@settings(max_examples=400, deadline=None)
@given(key=st.binary(max_size=64), prefix_length=around_blocks, message_length=around_blocks, data=st.data())
def test_digests_are_hashlibs(key: bytes, prefix_length: int, message_length: int, data: st.DataObject) -> None:
    prefix = data.draw(st.binary(min_size=prefix_length, max_size=prefix_length))
    message = data.draw(st.binary(min_size=max(message_length, 1), max_size=max(message_length, 1)))
    seed = bytes((len(key),)) + key + prefix
    assert keyed_digest(seed, message) == hashlib.blake2b(prefix + message, key=key, digest_size=16).hexdigest()
    assert keyed_digest(seed, message) == keyed_digest(bytes(seed), message)  # a new seed object, the same state


def test_a_fingerprinters_seeds_give_its_fingerprints() -> None:
    form = b'{"order_id":"A-1","page":2}'
    for tool in (Fingerprinter("search"), Fingerprinter("search", key=b"its own"), Fingerprinter("x" * 200)):
        for arguments in (True, False):
            seed = tool.hash_seed(arguments=arguments)
            assert keyed_digest(seed, form) == tool.digest_of_form(form, arguments=arguments)
    try:  # a new process key: new seeds
        tool = Fingerprinter("search")
        before = tool.hash_seed(arguments=True)
        fingerprint.set_fingerprint_key("rotated")
        assert tool.hash_seed(arguments=True) != before
        assert keyed_digest(tool.hash_seed(arguments=True), form) == tool.digest_of_form(form, arguments=True)
    finally:
        fingerprint.set_fingerprint_key(None)


@pytest.mark.parametrize("seed", [b"", b"\x41", b"\x05abc"])
def test_a_seed_of_another_layout_is_refused(seed: bytes) -> None:
    with pytest.raises(ValueError, match="seed"):
        keyed_digest(seed, b"{}")
