"""Data and reference search shared by the HNSW index tests."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def clustered(
    n: int, dim: int, *, clusters: int = 50, spread: float = 0.5, seed: int = 0
) -> NDArray[np.float32]:
    """`n` float32 vectors around `clusters` random centres with isotropic gaussian `spread`
    (about cosine 0.8 to their centre at 384 dims). Draw stored vectors and queries in one call
    (see `dataset`) so the queries come from the same clusters."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    noise = spread * rng.standard_normal((n, dim))
    return (centres[rng.integers(0, clusters, n)] + noise).astype(np.float32)


def dataset(
    n: int, n_queries: int, dim: int, *, clusters: int = 50, seed: int = 0
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """Stored vectors and queries drawn from the same clusters."""
    both = clustered(n + n_queries, dim, clusters=clusters, seed=seed)
    return both[:n], both[n:]


def unit(x: NDArray[np.float32]) -> NDArray[np.float32]:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def exact_scores(
    ids: NDArray[np.uint64], vectors: NDArray[np.float32], query: NDArray[np.float32]
) -> dict[int, float]:
    """Cosine similarity of `query` to every stored vector, by id (the ground truth)."""
    sims = unit(vectors.astype(np.float64)) @ unit(query.astype(np.float64))
    return {int(i): float(s) for i, s in zip(ids, sims, strict=True)}


def exact_top_k(
    ids: NDArray[np.uint64], vectors: NDArray[np.float32], queries: NDArray[np.float32], k: int
) -> NDArray[np.int64]:
    """Row indexes of the exact top-k for each query (numpy, brute force)."""
    sims = unit(queries) @ unit(vectors).T
    return np.argsort(-sims, axis=1)[:, :k]
