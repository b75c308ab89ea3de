"""A tenant's in-memory search state: intent <-> pattern maps kept in step with adds and
removals, and exact scores for any set of intents (what Suggest ranks with)."""

from __future__ import annotations

import numpy as np
import pytest

from pml_server import _core
from pml_server._core import HNSW_SCORE_ERROR
from pml_server.domain.records import IntentRecord
from pml_server.search.tenant import TenantSearchIndex
from pml_server.search.vectors import (
    EXACT_SCAN_MIN,
    HNSW_EF_CONSTRUCTION,
    index_from_bytes,
    new_index,
)

DIM = 32


def _intent(intent_id: int, pattern_id: str, vector: np.ndarray) -> IntentRecord:
    return IntentRecord(intent_id, pattern_id, f"intent {intent_id}", 1, 0, "m", vector)


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("kind", ["hnsw", "exact"])
def test_exact_scores_match_numpy_beyond_one_exact_scan(kind: str) -> None:
    rng = np.random.default_rng(7)
    count = 2 * EXACT_SCAN_MIN + 300  # three allow-list chunks
    vectors = _unit(rng.normal(size=(count, DIM)))
    index = TenantSearchIndex(kind, DIM)
    for i in range(count):
        index.add(_intent(i + 1, f"p{i % 50}", vectors[i]), ("read_file",))
    query = _unit(rng.normal(size=(1, DIM)))[0]
    wanted = [*range(1, count + 1), 10**9]  # an id never indexed is simply absent
    scores = index.exact_scores(query, wanted)
    assert sorted(scores) == list(range(1, count + 1))
    expected = vectors @ query
    got = np.array([scores[i + 1] for i in range(count)])
    # both kinds are the Rust index, which stores half precision (`HNSW_SCORE_ERROR`)
    assert np.allclose(got, expected, atol=HNSW_SCORE_ERROR)
    if kind == "exact":  # every search scans every vector: the true nearest, in order
        hits = index.semantic(query, 50)
        assert [i for i, _ in hits] == [scores_rank + 1 for scores_rank in _top(got, 50)]


def _top(scores: np.ndarray, k: int) -> list[int]:
    """Positions of the `k` best scores, best first (ties by position)."""
    return sorted(range(len(scores)), key=lambda n: (-scores[n], n))[:k]


def test_intent_maps_follow_adds_replays_and_removals() -> None:
    rng = np.random.default_rng(3)
    vectors = _unit(rng.normal(size=(4, DIM)))
    index = TenantSearchIndex("hnsw", DIM)
    index.add(_intent(1, "pa", vectors[0]), ())
    index.add(_intent(2, "pa", vectors[1]), ())
    index.add(_intent(3, "pb", vectors[2]), ())
    links = {"pa": [1, 2], "pb": [3]}
    assert {p: index.intents_of(p) for p in ("pa", "pb")} == links
    index.add(_intent(2, "pa", vectors[1]), ())  # replayed: nothing changes
    assert {p: index.intents_of(p) for p in ("pa", "pb")} == links
    index.remove([1, 3])
    assert {p: index.intents_of(p) for p in ("pa", "pb")} == {"pa": [2], "pb": []}
    assert [index.pattern_of(i) for i in (1, 2, 3)] == [None, "pa", None]
    assert index.exact_scores(vectors[0], [1, 2, 3]).keys() == {2}
    assert [p for p, _ in index.lexical_hits("intent", 5)] == ["pa"]


def test_new_and_restored_hnsw_indexes_insert_with_the_engines_beam() -> None:
    """The engine's insert beam, not the core's default, for a new index and for one restored
    from a snapshot written with another beam (its later inserts are the engine's)."""
    assert _core.HnswIndex(DIM).ef_construction != HNSW_EF_CONSTRUCTION
    fresh = new_index("hnsw", DIM)
    assert isinstance(fresh, _core.HnswIndex)
    assert fresh.ef_construction == HNSW_EF_CONSTRUCTION
    rng = np.random.default_rng(3)
    vectors = _unit(rng.normal(size=(50, DIM)))
    written = _core.HnswIndex(DIM, ef_construction=200)
    written.add(np.arange(1, 51, dtype=np.uint64), vectors)
    restored = index_from_bytes("hnsw", DIM, written.to_bytes())
    assert isinstance(restored, _core.HnswIndex)
    assert restored.ef_construction == HNSW_EF_CONSTRUCTION
    assert len(restored) == 50
    ids, _ = restored.search(vectors[7], 1)
    assert ids.tolist() == [8]
