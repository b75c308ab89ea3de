"""The Rust extension loads and computes real results."""

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from pml_server import _core


def test_sha256_known_vector() -> None:
    assert _core.sha256_tagged(b"abc") == (
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@given(st.binary(max_size=4096))
def test_sha256_matches_hashlib(data: bytes) -> None:
    assert _core.sha256_tagged(data) == "sha256:" + hashlib.sha256(data).hexdigest()


def test_exception_tree() -> None:
    for exc in (_core.InvalidArgumentError, _core.CorruptDataError, _core.InputTooLargeError):
        assert issubclass(exc, _core.CoreError)
