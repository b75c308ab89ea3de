"""Vector indexes over intent vectors, one per tenant, ids are the intents' u64 ids.

`hnsw` is the Rust HNSW index (`_core.HnswIndex`, vectors stored in half precision: its scores
are within `HNSW_SCORE_ERROR` of the exact cosine); `exact` is a brute-force numpy index with the
same interface (exact recall and f32 scores; fine for small stores and as a reference in tests).
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from pml_server.domain.vectors import Matrix, Vector

Ids = npt.NDArray[np.uint64]

# An allow-list of at most this many live ids is scanned exactly, never walked approximately
# (`EXACT_SCAN_MIN` in pml_core_rs/src/index/mod.rs; tests/search/test_tenant_index.py holds the two
# together).
EXACT_SCAN_MIN = 1024

# The HNSW insert's candidate beam (the core's default is 200, what the index suite compares with
# hnswlib at). An insert is most of a streamed capture's engine CPU: 0.18 ms a vector at 200,
# 0.11 at 100 (batches of 16 into 6k vectors). Recall@10 at the search beam the engine uses
# (ef_search 64) is the same within 0.0001 (embedding-like 100k set: 0.9973 against 0.9974);
# only searches with a far narrower beam than the engine's lose (ef=10: 0.930 against 0.946).
HNSW_EF_CONSTRUCTION = 100


class AnnIndex(Protocol):
    def add(self, ids: Ids, vectors: Matrix, threads: int = 1) -> None: ...
    def remove(self, ids: Ids) -> int: ...
    def contains(self, id: int) -> bool: ...
    def search(
        self, query: Vector, k: int, ef: int | None = None, allow: Ids | None = None
    ) -> tuple[Ids, npt.NDArray[np.float32]]: ...
    def to_bytes(self) -> bytes: ...
    def __len__(self) -> int: ...


class ExactIndex:
    """Brute-force cosine search (vectors are normalized: dot product)."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._rows: dict[int, Vector] = {}
        self._matrix: Matrix | None = None
        self._ids: Ids | None = None

    def add(self, ids: Ids, vectors: Matrix, threads: int = 1) -> None:
        """`threads` is accepted for the interface's sake: a numpy row copy needs none."""
        for i, v in zip(ids.tolist(), vectors, strict=True):
            self._rows[int(i)] = np.asarray(v, dtype=np.float32)
        self._matrix = None

    def remove(self, ids: Ids) -> int:
        removed = sum(1 for i in ids.tolist() if self._rows.pop(int(i), None) is not None)
        self._matrix = None
        return removed

    def contains(self, id: int) -> bool:
        return id in self._rows

    def rows_of(self, ids: Sequence[int]) -> tuple[list[int], list[list[float]]]:
        """The ids of `ids` held here and their rows (`ranking.table.VectorRows`)."""
        found = [i for i in ids if i in self._rows]
        return found, [self._rows[i].tolist() for i in found]

    def __len__(self) -> int:
        return len(self._rows)

    def search(
        self, query: Vector, k: int, ef: int | None = None, allow: Ids | None = None
    ) -> tuple[Ids, npt.NDArray[np.float32]]:
        if self._matrix is None:
            keys = sorted(self._rows)
            self._ids = np.array(keys, dtype=np.uint64)
            self._matrix = (
                np.stack([self._rows[i] for i in keys])
                if keys
                else np.zeros((0, self.dim), dtype=np.float32)
            )
        assert self._ids is not None
        ids, matrix = self._ids, self._matrix
        if allow is not None:
            keep = np.isin(ids, allow)
            ids, matrix = ids[keep], matrix[keep]
        scores = matrix @ query.astype(np.float32)
        order = np.argsort(-scores, kind="stable")[:k]
        return ids[order], scores[order].astype(np.float32)

    def to_bytes(self) -> bytes:
        keys = sorted(self._rows)
        buffer = io.BytesIO()
        matrix = np.stack([self._rows[i] for i in keys]) if keys else np.zeros((0, self.dim))
        np.savez(buffer, ids=np.array(keys, dtype=np.uint64), vectors=matrix.astype(np.float32))
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, dim: int) -> ExactIndex:
        """Raises ValueError for anything but an intact snapshot, so the caller rebuilds from
        the store (np.load raises EOFError, BadZipFile (CRC), zlib.error, KeyError...)."""
        try:
            loaded = np.load(io.BytesIO(data))
            ids, vectors = loaded["ids"], loaded["vectors"]
        except (OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile, zlib.error) as err:
            raise ValueError(f"corrupt exact index snapshot: {err!r}") from err
        index = cls(dim)
        index.add(ids.astype(np.uint64), vectors.astype(np.float32))
        return index


def new_index(kind: str, dim: int) -> AnnIndex:
    if kind == "exact":
        return ExactIndex(dim)
    if kind == "hnsw":
        from pml_server import _core

        index: AnnIndex = _core.HnswIndex(dim, ef_construction=HNSW_EF_CONSTRUCTION)
        return index
    raise ValueError(f"unknown vector index {kind!r}; choose hnsw or exact")


def index_from_bytes(kind: str, dim: int, data: bytes) -> AnnIndex:
    if kind == "exact":
        return ExactIndex.from_bytes(data, dim)
    from pml_server import _core

    restored = _core.HnswIndex.from_bytes(data)
    # a snapshot keeps the beam it was built with: new inserts use this engine's
    restored.ef_construction = HNSW_EF_CONSTRUCTION
    index: AnnIndex = restored
    return index
