"""The one array alias of embedding vectors, shared by every package that holds them."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

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
