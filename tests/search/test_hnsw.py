"""HNSW index (`pml_server._core.HnswIndex`): recall, filters, removal, errors, serialization."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from pml_server._core import HNSW_SCORE_ERROR, CoreArgumentError, CorruptDataError, HnswIndex
from tests.search.index_data import clustered, dataset, exact_scores, exact_top_k, unit

DIM = 384


# (index, stored ids, stored vectors, queries from the same clusters)
Built = tuple[HnswIndex, np.ndarray, np.ndarray, np.ndarray]


@pytest.fixture(scope="module")
def built() -> Built:
    vectors, queries = dataset(4000, 200, DIM, seed=1)
    ids = np.arange(10, 4010, dtype=np.uint64)
    index = HnswIndex(DIM)
    index.add(ids, vectors)
    return index, ids, vectors, queries


def test_defaults_and_parameters() -> None:
    index = HnswIndex(8)
    assert (index.dim, index.m, index.ef_construction, index.ef_search) == (8, 16, 200, 64)
    index.ef_search = 10
    index.ef_construction = 50
    assert (index.ef_search, index.ef_construction) == (10, 50)
    other = HnswIndex(8, m=8, ef_construction=40, ef_search=20)
    assert (other.m, other.ef_construction, other.ef_search) == (8, 40, 20)
    with pytest.raises(AttributeError):
        index.dim = 9  # type: ignore[misc]
    assert len(index) == 0
    assert index.kernel in ("avx2+fma+f16c", "scalar")


def test_recall_at_default_settings(built: Built) -> None:
    index, ids, vectors, queries_all = built
    queries = queries_all
    truth = exact_top_k(ids, vectors, queries, 10)
    hits = 0
    for query, want_rows in zip(queries, truth, strict=True):
        got, scores = index.search(query, 10)
        assert got.dtype == np.uint64
        assert scores.dtype == np.float32
        assert list(scores) == sorted(scores, reverse=True)
        hits += len(set(got.tolist()) & set(ids[want_rows].tolist()))
    recall = hits / (10 * len(queries))
    assert recall >= 0.95, recall


def test_scores_are_cosine_similarities(built: Built) -> None:
    index, ids, vectors, queries_all = built
    query = queries_all[0]
    truth = exact_scores(ids, vectors, query)
    got, scores = index.search(query, 5)
    for i, s in zip(got, scores, strict=True):
        assert s == pytest.approx(truth[int(i)], abs=HNSW_SCORE_ERROR)


def test_batch_matches_single(built: Built) -> None:
    index, _, _, queries_all = built
    queries = queries_all[:20]
    for threads in (1, 2):
        batch = index.search_batch(queries, 7, ef=30, num_threads=threads)
        assert len(batch) == len(queries)
        for query, (b_ids, b_scores) in zip(queries, batch, strict=True):
            s_ids, s_scores = index.search(query, 7, ef=30)
            assert b_ids.tolist() == s_ids.tolist()
            assert np.array_equal(b_scores, s_scores)


def test_allow_small_set_is_exact(built: Built) -> None:
    index, ids, vectors, queries_all = built
    rng = np.random.default_rng(5)
    rows = rng.choice(len(ids), 300, replace=False)
    allow = ids[rows]
    for query in queries_all[:10]:
        got, _ = index.search(query, 10, allow=allow)
        want = exact_top_k(allow, vectors[rows], query[None, :], 10)[0]
        assert got.tolist() == allow[want].tolist()


def test_allow_large_set_is_respected(built: Built) -> None:
    index, ids, _, queries_all = built
    allow = ids[::2]  # 2000 ids: above the exact-scan floor, so the filtered graph walk runs
    allowed = set(allow.tolist())
    for query in queries_all[10:20]:
        got, _ = index.search(query, 10, allow=allow)
        assert len(got) == 10
        assert set(got.tolist()) <= allowed


def test_allow_with_unknown_and_no_ids(built: Built) -> None:
    index, ids, _, queries_all = built
    query = queries_all[1]
    got, _ = index.search(query, 10, allow=np.array([999_999, int(ids[3])], dtype=np.uint64))
    assert got.tolist() == [int(ids[3])]
    got, scores = index.search(query, 10, allow=np.array([], dtype=np.uint64))
    assert len(got) == 0
    assert len(scores) == 0


def test_fewer_results_than_k() -> None:
    index = HnswIndex(4)
    index.add(np.array([1, 2], dtype=np.uint64), np.eye(2, 4, dtype=np.float32))
    got, _ = index.search(np.ones(4, dtype=np.float32), 10)
    assert sorted(got.tolist()) == [1, 2]
    assert index.search(np.ones(4, dtype=np.float32), 0)[0].tolist() == []
    assert HnswIndex(4).search(np.ones(4, dtype=np.float32), 3)[0].tolist() == []


def test_remove_and_readd() -> None:
    vectors = clustered(500, 16, seed=9)
    ids = np.arange(500, dtype=np.uint64)
    index = HnswIndex(16)
    index.add(ids, vectors)
    assert index.remove(np.array([1, 2, 2, 99_999], dtype=np.uint64)) == 2
    assert not index.contains(1)
    assert index.contains(3)
    assert len(index) == 498
    for query in vectors[:20]:
        got, _ = index.search(query, 50)
        assert not {1, 2} & set(got.tolist())
    # Re-adding replaces: id 3 now points where id 1 used to be.
    index.add(np.array([3], dtype=np.uint64), vectors[1:2])
    got, scores = index.search(vectors[1], 1)
    assert got.tolist() == [3]
    assert scores[0] == pytest.approx(1.0, abs=HNSW_SCORE_ERROR)
    assert len(index) == 498


def test_heavy_deletion_recovers_memory_and_recall() -> None:
    vectors, queries = dataset(3000, 100, 64, seed=10)
    ids = np.arange(3000, dtype=np.uint64)
    index = HnswIndex(64)
    index.add(ids, vectors)
    full = index.memory_bytes()
    keep = ids % 4 == 0
    index.remove(ids[~keep])
    index.compact()
    assert index.memory_bytes() < full / 2
    truth = exact_top_k(ids[keep], vectors[keep], queries, 10)
    hits = 0
    for query, want in zip(queries, truth, strict=True):
        got, _ = index.search(query, 10)
        hits += len(set(got.tolist()) & set(ids[keep][want].tolist()))
    assert hits / 1000 >= 0.95


def test_bytes_round_trip(built: Built) -> None:
    index, _, _, queries_all = built
    data = index.to_bytes()
    copy = HnswIndex.from_bytes(data)
    assert (copy.dim, copy.m, copy.ef_construction, copy.ef_search, len(copy)) == (
        index.dim,
        index.m,
        index.ef_construction,
        index.ef_search,
        len(index),
    )
    for query in queries_all[:20]:
        a_ids, a_scores = index.search(query, 10)
        b_ids, b_scores = copy.search(query, 10)
        assert a_ids.tolist() == b_ids.tolist()
        assert np.array_equal(a_scores, b_scores)
    assert copy.to_bytes() == data


@pytest.mark.parametrize("cut", [0, 1, 8, 12, 40, -33, -1])
def test_truncated_bytes_are_rejected(cut: int) -> None:
    index = HnswIndex(8)
    index.add(np.arange(50, dtype=np.uint64), clustered(50, 8, seed=13))
    data = index.to_bytes()
    with pytest.raises(CorruptDataError):
        HnswIndex.from_bytes(data[:cut])


def test_garbage_bytes_are_rejected() -> None:
    with pytest.raises(CorruptDataError):
        HnswIndex.from_bytes(b"not an index at all, just some bytes of text....")
    with pytest.raises(CorruptDataError):
        HnswIndex.from_bytes(b"")


def test_memory_grows_with_content() -> None:
    index = HnswIndex(32)
    empty = index.memory_bytes()
    index.add(np.arange(1000, dtype=np.uint64), clustered(1000, 32, seed=14))
    assert index.memory_bytes() >= empty + 1000 * 32 * 4


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda ix: ix.add(np.array([1], np.uint64), np.ones((1, 7), np.float32)), "vectors"),
        (lambda ix: ix.add(np.array([1], np.uint64), np.zeros((1, 8), np.float32)), "vectors"),
        (
            lambda ix: ix.add(np.array([1], np.uint64), np.full((1, 8), np.nan, np.float32)),
            "vectors",
        ),
        (lambda ix: ix.add(np.array([1, 2], np.uint64), np.ones((1, 8), np.float32)), "vectors"),
        (lambda ix: ix.add(np.array([1], np.uint64), np.ones(8, np.float32)), "vectors"),
        (lambda ix: ix.add(np.ones((2, 2), np.uint64), np.ones((4, 8), np.float32)), "ids"),
        (lambda ix: ix.search(np.ones(7, np.float32), 3), "query"),
        (lambda ix: ix.search(np.zeros(8, np.float32), 3), "query"),
        (lambda ix: ix.search(np.ones(8, np.float32), -1), "k"),
        (lambda ix: ix.search(np.ones(8, np.float32), 3, ef=0), "ef"),
        (lambda ix: ix.search_batch(np.ones((2, 7), np.float32), 3), "queries"),
        (lambda ix: ix.search_batch(np.ones((2, 8), np.float32), 3, num_threads=-2), "num_threads"),
        (lambda ix: setattr(ix, "ef_search", 0), "ef_search"),
        (lambda ix: setattr(ix, "ef_construction", -5), "ef_construction"),
        (lambda ix: HnswIndex(0), "dim"),
        (lambda ix: HnswIndex(8, m=1), "m"),
    ],
)
def test_bad_input_names_the_field(call: object, field: str) -> None:
    index = HnswIndex(8)
    index.add(np.array([42], np.uint64), np.ones((1, 8), np.float32))
    with pytest.raises(CoreArgumentError, match=f"`{field}`"):
        call(index)  # type: ignore[operator]
    # A rejected batch changes nothing.
    assert len(index) == 1
    assert index.contains(42)


def test_list_inputs_are_converted() -> None:
    index = HnswIndex(3)
    index.add([5, 6], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # type: ignore[arg-type]
    got, _ = index.search([0.9, 0.1, 0.0], 1)  # type: ignore[arg-type]
    assert got.tolist() == [5]
    got, _ = index.search(unit(np.array([0.1, 0.9, 0.0], np.float32)), 1, allow=[5])  # type: ignore[arg-type]
    assert got.tolist() == [5]


def test_a_compaction_on_a_copy_keeps_the_writes_made_meanwhile() -> None:
    """docs/ranking.md, Retention: a compaction works on a copy with no lock held, then
    replays on it what was written meanwhile. Removals (each compacting what they wore) race
    adds and re-adds on another thread; afterwards the index holds exactly the ids last added
    and not removed, each under its last vector."""
    vectors, _ = dataset(3000, 1, 32, seed=3)
    index = HnswIndex(32)
    index.add(np.arange(2000, dtype=np.uint64), vectors[:2000])
    done = threading.Event()

    def write() -> None:
        for at in range(2000, 3000, 50):  # new ids, and ids 0..49 re-added each time
            index.add(np.arange(at, at + 50, dtype=np.uint64), vectors[at : at + 50])
            index.add(np.arange(50, dtype=np.uint64), -vectors[at : at + 50])
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    removed = np.arange(100, 1900, dtype=np.uint64)
    compacted = 0
    for chunk in np.array_split(removed, 60):
        index.remove(chunk, compact=False)
        compacted += index.compact_if_worn()
    writer.join()
    assert done.is_set()
    assert compacted
    index.compact()
    live = [i for i in range(3000) if not 100 <= i < 1900]
    assert len(index) == len(live)
    assert all(index.contains(i) for i in live)
    assert not any(index.contains(int(i)) for i in removed)
    last = {i: vectors[i] for i in live}
    last.update({i: -vectors[2950 + i] for i in range(50)})  # the last re-add
    for i in live[::7]:
        got, scores = index.search(last[i], 1)
        assert (int(got[0]), float(scores[0])) == (i, pytest.approx(1.0, abs=HNSW_SCORE_ERROR))
