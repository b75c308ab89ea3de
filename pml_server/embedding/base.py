"""The `Embedder` interface, its wrappers' base, and L2 normalization."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from pml_server.domain.model import EmbeddingUsage
from pml_server.domain.vectors import Matrix, Vector


class ModelIntegrityError(OSError):
    """A model file does not have the expected sha256 (corrupted or replaced), or its package
    is another version: an OSError, so `pml serve` refuses in one line naming the file (it was
    a RuntimeError, a traceback)."""


class ModelPreparationError(OSError):
    """The model could not be made ready to run (the int8 graph's rewrite failed: its
    temporary files could not be written): `pml serve` refuses to start, one line."""


def verified_bytes(path: Path, expected: str) -> bytes:
    """The file's bytes, ModelIntegrityError unless their sha256 is `expected`."""
    data = path.read_bytes()
    found = hashlib.sha256(data).hexdigest()
    if found != expected:
        raise ModelIntegrityError(
            f"{path}: sha256 {found}, expected {expected} (damaged or replaced: reinstall the "
            "package that ships it)"
        )
    return data


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


@dataclass(frozen=True)
class SpanPools:
    """One model run of a text and the mean of its token states over character spans of it
    (docs/ranking.md, Plans, "Part vectors"): `vector` is the text's embedding, the very one
    `embed([text])` gives; `mean` its token states' mean before normalization; `spans` one row
    per span, the mean of the states of the tokens inside it (not normalized), and
    `found[n]` whether span n held a token (a span past the model's token limit holds none)."""

    vector: Vector
    mean: Vector
    spans: Matrix
    found: tuple[bool, ...]


class EmbedderWrapper:
    """Base of the wrappers that add behaviour around an Embedder (caching, metering): the
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

    def embed_spans(self, text: str, spans: Sequence[tuple[int, int]]) -> SpanPools | None:
        """The wrapped model's `embed_spans`; None when it has none (it only embeds texts)."""
        inner = self._inner
        if isinstance(inner, EmbedderWrapper):
            return inner.embed_spans(text, spans)
        run = getattr(inner, "embed_spans", None)
        if not callable(run):
            return None
        pools = run(text, spans)
        return pools if isinstance(pools, SpanPools) else None

    def usage(self) -> EmbeddingUsage:
        """The model's usage, from the `MeteredEmbedder` inside (zeros if there is none)."""
        inner = self._inner
        return inner.usage() if isinstance(inner, EmbedderWrapper) else EmbeddingUsage()


def l2_normalize(matrix: Matrix) -> Matrix:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    normalized: Matrix = (matrix / norms).astype(np.float32)
    return normalized
