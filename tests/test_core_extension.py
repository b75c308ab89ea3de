"""The Rust extension loads and computes real results."""

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml_server import _core
from pml_server.domain.errors import FieldViolation, InvalidArgumentError, PmlError


def test_sha256_known_vector() -> None:
    assert _core.sha256_tagged(b"abc") == (
        "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@given(st.binary(max_size=4096))
def test_sha256_matches_hashlib(data: bytes) -> None:
    assert _core.sha256_tagged(data) == "sha256:" + hashlib.sha256(data).hexdigest()


def test_exception_tree() -> None:
    for exc in (_core.CoreArgumentError, _core.CorruptDataError, _core.InputTooLargeError):
        assert issubclass(exc, _core.CoreError)


def test_core_errors_are_domain_errors_with_their_field() -> None:
    assert issubclass(_core.CoreError, PmlError)
    assert issubclass(_core.CoreArgumentError, InvalidArgumentError)
    assert issubclass(_core.InputTooLargeError, InvalidArgumentError)
    with pytest.raises(_core.CoreArgumentError) as bad:
        _core.HnswIndex(-1)
    assert bad.value.field == "dim"
    assert bad.value.violations == [FieldViolation("dim", bad.value.reason)]
    with pytest.raises(_core.InputTooLargeError) as large:
        _core.normalize("a" * (_core.NORMALIZE_MAX_INPUT_BYTES + 1), "javascript")
    assert large.value.field == "code"
    assert [v.field for v in large.value.violations] == ["code"]
    with pytest.raises(_core.CorruptDataError) as corrupt:
        _core.HnswIndex.from_bytes(b"not an index")
    assert "corrupt data" in str(corrupt.value)
