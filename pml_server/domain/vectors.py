"""The one array alias of embedding vectors, shared by every package that holds them, and the one
check of a vector a client supplies."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
import numpy.typing as npt

from pml_server.domain.errors import FieldViolation, InvalidArgumentError

# One L2-normalized float32 embedding (a dot product of two is their cosine).
Vector = npt.NDArray[np.float32]
# Rows of vectors, one per text or intent.
Matrix = npt.NDArray[np.float32]


class CheckedVector:
    """A client-supplied vector the API edge has already checked (dimension, finite values,
    not all zeros) and L2-normalized, kept as the float32 array the engine indexes. A record
    arriving over gRPC would otherwise turn its 384 values into a tuple of Python floats and
    the engine back into an array (about a tenth of a streamed capture's CPU)."""

    __slots__ = ("array",)

    def __init__(self, array: Vector) -> None:
        array.flags.writeable = False  # shared by the record and the index; never changed
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __iter__(self) -> Iterator[float]:
        return iter(self.array.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CheckedVector):
            return self.array.tobytes() == other.array.tobytes()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.array.tobytes())

    def __repr__(self) -> str:
        return f"CheckedVector(dim={len(self.array)})"


def check_vector(
    values: Sequence[float], dim: int, field: str
) -> tuple[Vector | None, list[FieldViolation]]:
    """The one check of a client-supplied vector (API edge and engine alike): `dim` values
    (the embedder's dimension), all finite, not the zero vector, a finite norm. Returns it
    L2-normalized, or None with what is wrong (empty `values`: None and nothing wrong). A protobuf
    repeated field is read once, through numpy: iterating it value by value costs several times
    more."""
    if not len(values):
        return None, []
    exact = np.asarray(values, dtype=np.float64)
    if len(exact) == dim:
        # The common case in one dot product: a finite, non-zero sum of squares means every
        # value is finite (a NaN or an infinity makes it NaN or infinite) and not all are
        # zero; the vector is the same one the checks below make (`np.linalg.norm` of a
        # float64 vector is this square root), and once divided its largest value is at
        # least 1/sqrt(dim), so it cannot underflow to zero. Anything else goes the long way
        # for its exact complaint. (About a sixth of the API layer's work per streamed
        # capture with client vectors was these checks, one numpy call at a time.)
        squares = float(exact.dot(exact))
        if 0.0 < squares < math.inf:
            fast: Vector = (exact / math.sqrt(squares)).astype(np.float32)
            return fast, []
    problems: list[FieldViolation] = []
    if len(exact) != dim:
        problems.append(
            FieldViolation(
                field, f"has {len(exact)} values; this server's embedding dimension is {dim}"
            )
        )
    bad = np.flatnonzero(~np.isfinite(exact))
    if len(bad):
        description = f"value [{bad[0]}] is not a finite number (no NaN or infinity)"
        return None, [*problems, FieldViolation(f"{field}[{bad[0]}]", description)]
    # The norm in float64: squared float32 values such as 1e20 overflow float32's range.
    norm = float(np.linalg.norm(exact))
    zero = FieldViolation(
        field, "must not be the zero vector (cosine similarity needs a direction)"
    )
    if norm == 0.0:
        return None, [*problems, zero]
    if not math.isfinite(norm):
        return None, [*problems, FieldViolation(field, "its norm is not a finite number")]
    vector: Vector = (exact / norm).astype(np.float32)
    if not vector.any():  # every value underflowed float32 once divided
        return None, [*problems, zero]
    return (None if problems else vector), problems


def client_vector(values: Sequence[float] | CheckedVector, dim: int, field: str) -> Vector:
    """`check_vector`'s normalized vector; InvalidArgumentError naming `field` otherwise. A
    `CheckedVector` from the API edge already is checked and normalized: only its dimension is
    compared with this server's."""
    if isinstance(values, CheckedVector):
        if len(values) == dim:
            return values.array
        raise InvalidArgumentError(_wrong_dimension(field, len(values), dim))
    vector, problems = check_vector(values, dim, field)
    if problems or vector is None:
        raise InvalidArgumentError(
            problems
            or FieldViolation(field, f"has 0 values; this server's embedding dimension is {dim}")
        )
    return vector


def _wrong_dimension(field: str, size: int, dim: int) -> FieldViolation:
    return FieldViolation(field, f"has {size} values; this server's embedding dimension is {dim}")
