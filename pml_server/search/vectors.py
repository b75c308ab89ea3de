"""Vector indexes over intent vectors, one per tenant, ids are the intents' u64 ids.

Both kinds are the Rust HNSW index (`_core.HnswIndex`, vectors stored in half precision: its
scores are within `HNSW_SCORE_ERROR` of the exact cosine), so Suggest has one ranking path
(the core's): `hnsw` walks the graph, `exact` scans every vector (exact recall, a cost linear in
the store; docs/ranking.md, Pipeline).
"""

from __future__ import annotations

from pml_server import _core

# The `vector_index` setting's values.
KINDS = ("hnsw", "exact")

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


def new_index(kind: str, dim: int) -> _core.HnswIndex:
    """The Rust HNSW index; with `exact`, in its exact-scan mode (every search scores every
    vector: exact recall, the same ranking call; docs/ranking.md, Pipeline)."""
    if kind not in KINDS:
        raise ValueError(f"unknown vector index {kind!r}; choose hnsw or exact")
    index = _core.HnswIndex(dim, ef_construction=HNSW_EF_CONSTRUCTION)
    index.exact = kind == "exact"
    return index


def index_from_bytes(kind: str, dim: int, data: bytes) -> _core.HnswIndex:
    """A snapshot's index (`CoreError` for anything but an intact one: the caller rebuilds
    from the store, as for a numpy snapshot an older version wrote)."""
    restored = _core.HnswIndex.from_bytes(data)
    # a snapshot keeps the beam it was built with: new inserts use this engine's
    restored.ef_construction = HNSW_EF_CONSTRUCTION
    restored.exact = kind == "exact"
    return restored
