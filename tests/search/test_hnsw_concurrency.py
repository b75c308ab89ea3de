"""Concurrent use of one HnswIndex from Python threads: searches run while another thread adds
and removes, with the GIL released inside every call. Results stay correct throughout."""

from __future__ import annotations

import threading

import numpy as np

from pml_server._core import HnswIndex
from tests.search.index_data import dataset, exact_top_k

DIM = 32
BASE = 2000  # ids 0..1999 stay put; the writer churns ids from 1_000_000 up


def test_searches_stay_correct_during_writes() -> None:
    vectors, queries = dataset(BASE + 1000, 40, DIM, seed=21)
    base_ids = np.arange(BASE, dtype=np.uint64)
    index = HnswIndex(DIM)
    index.add(base_ids, vectors[:BASE])
    # A small allowed subset of the stable ids is searched exactly, so the answer is known.
    allow_rows = np.arange(0, BASE, 7)
    allow = base_ids[allow_rows]
    expected = allow[exact_top_k(allow, vectors[allow_rows], queries, 5)]
    churn = vectors[BASE:]
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            for round_ in range(10):
                ids = np.arange(1_000_000 + round_ * 100, 1_000_000 + (round_ + 1) * 100)
                index.add(ids.astype(np.uint64), churn[round_ * 100 : (round_ + 1) * 100])
                index.remove(ids[::2].astype(np.uint64))
        except BaseException as exc:
            errors.append(exc)
        finally:
            stop.set()

    def reader() -> None:
        try:
            while not stop.is_set():
                for query, want in zip(queries, expected, strict=True):
                    got, _ = index.search(query, 5, allow=allow)
                    assert got.tolist() == want.tolist()
                    anything, _ = index.search(query, 10)
                    assert all(i < BASE or i >= 1_000_000 for i in anything.tolist())
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert len(index) == BASE + 10 * 50
    removed = np.arange(1_000_000, 1_001_000, 2, dtype=np.uint64)
    assert not any(index.contains(int(i)) for i in removed)


def test_batch_search_threads_agree_with_serial() -> None:
    vectors, queries = dataset(3000, 64, DIM, seed=22)
    index = HnswIndex(DIM)
    index.add(np.arange(3000, dtype=np.uint64), vectors)
    serial = index.search_batch(queries, 10)
    parallel = index.search_batch(queries, 10, num_threads=4)
    assert [r[0].tolist() for r in serial] == [r[0].tolist() for r in parallel]


def test_searches_release_the_gil() -> None:
    # A background thread counts while this thread runs one long batch search. Between reading
    # `before` and `after` this thread holds the GIL except inside the call, so the counter can
    # only move if the call released it.
    vectors, _ = dataset(3000, 0, DIM, seed=23)
    index = HnswIndex(DIM)
    index.add(np.arange(3000, dtype=np.uint64), vectors)
    many = np.repeat(vectors[:50], 40, axis=0)
    ticks = [0]
    running = threading.Event()
    stop = threading.Event()

    def count() -> None:
        running.set()
        while not stop.is_set():
            ticks[0] += 1

    t = threading.Thread(target=count)
    t.start()
    running.wait()
    before = ticks[0]
    index.search_batch(many, 10, ef=200)
    after = ticks[0]
    stop.set()
    t.join()
    assert after - before > 100
