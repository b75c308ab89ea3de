"""Property tests of the HNSW index: random add / remove / search / reload sequences against a
plain dict model. Invariants: removed ids never come back, `allow` is always respected (and
exact, since these sets are small), results are sorted cosine scores of live ids, and a bytes
round trip gives identical answers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pml_server._core import HNSW_SCORE_ERROR, CorruptDataError, HnswIndex
from tests.search.index_data import exact_scores

DIM = 8
ID_SPACE = 60  # small, so re-adds and removals of present ids happen often

ids_strategy = st.lists(st.integers(0, ID_SPACE - 1), min_size=1, max_size=12)


def vectors_for(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)


class IndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Small m and ef so graph paths (not just exhaustive walks) are exercised.
        self.index = HnswIndex(DIM, m=4, ef_construction=16, ef_search=8)
        self.model: dict[int, np.ndarray] = {}
        self.removed: set[int] = set()

    @rule(ids=ids_strategy, seed=st.integers(0, 2**32 - 1))
    def add(self, ids: list[int], seed: int) -> None:
        vectors = vectors_for(seed, len(ids))
        self.index.add(np.array(ids, dtype=np.uint64), vectors)
        for i, v in zip(ids, vectors, strict=True):
            self.model[i] = v  # the last row of a repeated id wins
            self.removed.discard(i)

    @rule(ids=ids_strategy)
    def remove(self, ids: list[int]) -> None:
        present = {i for i in ids if i in self.model}
        assert self.index.remove(np.array(ids, dtype=np.uint64)) == len(present)
        for i in present:
            del self.model[i]
        self.removed |= present

    @rule()
    def compact(self) -> None:
        self.index.compact()

    @rule(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 15), ef=st.sampled_from([None, 1, 50]))
    def search(self, seed: int, k: int, ef: int | None) -> None:
        query = vectors_for(seed, 1)[0]
        got, scores = self.index.search(query, k, ef=ef)
        assert len(got) <= min(k, len(self.model))
        assert len(set(got.tolist())) == len(got)
        assert not set(got.tolist()) & self.removed
        self.check_scores(query, got, scores)

    @rule(
        seed=st.integers(0, 2**32 - 1),
        k=st.integers(1, 15),
        allow=st.lists(st.integers(0, ID_SPACE + 5), max_size=30),
    )
    def search_allowed(self, seed: int, k: int, allow: list[int]) -> None:
        query = vectors_for(seed, 1)[0]
        got, scores = self.index.search(query, k, allow=np.array(allow, dtype=np.uint64))
        live_allowed = [i for i in set(allow) if i in self.model]
        assert set(got.tolist()) <= set(live_allowed)
        self.check_scores(query, got, scores)
        # Small allowed sets are searched exactly: the scores are the true top-k scores.
        if live_allowed:
            ids = np.array(live_allowed, dtype=np.uint64)
            truth = exact_scores(ids, np.stack([self.model[i] for i in live_allowed]), query)
            want = sorted(truth.values(), reverse=True)[:k]
            np.testing.assert_allclose(scores, want, atol=HNSW_SCORE_ERROR)
        else:
            assert len(got) == 0

    @precondition(lambda self: len(self.model) > 0)
    @rule(seed=st.integers(0, 2**32 - 1))
    def reload(self, seed: int) -> None:
        data = self.index.to_bytes()
        copy = HnswIndex.from_bytes(data)
        query = vectors_for(seed, 1)[0]
        a = self.index.search(query, 10)
        b = copy.search(query, 10)
        assert a[0].tolist() == b[0].tolist()
        assert np.array_equal(a[1], b[1])
        self.index = copy

    def check_scores(self, query: np.ndarray, got: np.ndarray, scores: np.ndarray) -> None:
        assert list(scores) == sorted(scores, reverse=True)
        if len(got):
            ids = np.array(list(self.model), dtype=np.uint64)
            truth = exact_scores(ids, np.stack(list(self.model.values())), query)
            for i, s in zip(got.tolist(), scores.tolist(), strict=True):
                assert abs(truth[i] - s) < HNSW_SCORE_ERROR

    @invariant()
    def membership_matches_model(self) -> None:
        assert len(self.index) == len(self.model)
        for i in range(ID_SPACE):
            assert self.index.contains(i) == (i in self.model)


TestIndexMachine = IndexMachine.TestCase
TestIndexMachine.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _small_index_bytes() -> bytes:
    index = HnswIndex(DIM, m=4)
    index.add(np.arange(40, dtype=np.uint64), vectors_for(1, 40))
    index.remove(np.array([3, 4], dtype=np.uint64))
    return index.to_bytes()


SMALL_BYTES = _small_index_bytes()


@settings(max_examples=300, deadline=None)
@given(position=st.integers(0, len(SMALL_BYTES) - 1), mask=st.integers(1, 255))
def test_any_flipped_byte_is_detected(position: int, mask: int) -> None:
    damaged = bytearray(SMALL_BYTES)
    damaged[position] ^= mask
    with pytest.raises(CorruptDataError):
        HnswIndex.from_bytes(bytes(damaged))


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(0, len(SMALL_BYTES) - 1))
def test_any_truncation_is_detected(cut: int) -> None:
    with pytest.raises(CorruptDataError):
        HnswIndex.from_bytes(SMALL_BYTES[:cut])


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_are_rejected(data: bytes) -> None:
    with pytest.raises(CorruptDataError):
        HnswIndex.from_bytes(data)
