"""The `Embedder` interface and the checks every vector passes, whoever computed it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.model import EmbeddingUsage
from pml_server.domain.vectors import CheckedVector, Matrix, Vector


class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors (so a dot product is the cosine)."""

    @property
    def model_id(self) -> str:
        """Identifies the model and its settings; stored with every vector."""

    @property
    def family(self) -> str:
        """Key of the similarity thresholds calibrated for this kind of model."""

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """One row per text, shape (len(texts), dim)."""


class EmbedderWrapper:
    """Base of the wrappers that add behaviour around an Embedder (caching, coalescing): the
    wrapped model's identity passes through unchanged."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner

    @property
    def model_id(self) -> str:
        return self._inner.model_id

    @property
    def family(self) -> str:
        return self._inner.family

    @property
    def dim(self) -> int:
        return self._inner.dim

    def usage(self) -> EmbeddingUsage:
        """The model's usage, from the `MeteredEmbedder` inside (zeros if there is none)."""
        inner = self._inner
        return inner.usage() if isinstance(inner, EmbedderWrapper) else EmbeddingUsage()


def l2_normalize(matrix: Matrix) -> Matrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalized: Matrix = (matrix / norms).astype(np.float32)
    return normalized


def check_client_vector(values: Sequence[float] | CheckedVector, dim: int, field: str) -> Vector:
    """A client-supplied vector: right dimension, finite, not all zeros; returned normalized
    (a `CheckedVector` from the API edge already is: only its dimension is checked)."""
    if isinstance(values, CheckedVector) and len(values) == dim:
        return values.array
    if len(values) != dim:
        raise InvalidArgumentError(
            FieldViolation(field, f"has {len(values)} values; this server's model needs {dim}")
        )
    raw = values.array if isinstance(values, CheckedVector) else values
    exact = np.asarray(raw, dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(exact))
    if len(bad):
        raise InvalidArgumentError(
            FieldViolation(field, f"value [{bad[0]}] is not a finite number")
        )
    # The norm in float64: squared float32 values such as 1e20 overflow float32's range.
    norm = float(np.linalg.norm(exact))
    if norm == 0.0:
        raise InvalidArgumentError(FieldViolation(field, "must not be the zero vector"))
    if not math.isfinite(norm):
        raise InvalidArgumentError(FieldViolation(field, "its norm is not a finite number"))
    vector = (exact / norm).astype(np.float32)
    if not vector.any():  # every value underflowed float32 once divided
        raise InvalidArgumentError(FieldViolation(field, "must not be the zero vector"))
    return vector
