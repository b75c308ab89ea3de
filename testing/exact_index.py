"""A brute-force numpy index over normalized float32 vectors (dot product): the reference the
tests compare the core's HNSW searches with (exact recall, f32 scores). The service searches
with the core's index alone (`vector_index = "exact"` is its exact-scan mode:
pml_server/search/vectors.py)."""

from __future__ import annotations

import io
import zipfile
import zlib

import numpy as np
import numpy.typing as npt

from pml_server.domain.vectors import Matrix, Vector

Ids = npt.NDArray[np.uint64]


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
