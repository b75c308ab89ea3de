"""HNSW index vs hnswlib 0.8.0 on the same data in the same run.

100k x 384 float32 vectors of the `embedding` set (with `large`: 1M, and the `isotropic` stress
set too; `PML_BENCH_INDEX_N` overrides the size, `PML_BENCH_INDEX_SETS=embedding,isotropic`
the sets; the stress set doubles the suite's time, which `make bench` keeps under 15 minutes),
queries drawn like the data, recall@10 against exact numpy search:
- `embedding`: normalized, embedding-like (see `_embedding_like`), the workload the index is for.
  The earlier bench used only the isotropic set below, which is far harder than embeddings
  (hnswlib recall@10 0.79 at ef=20 there against 0.976 in the issue's orientation figures), so
  its QPS/recall trade-off said little about real use.
- `isotropic`: that earlier set, kept as a stress case and reported in full.
Both indexes use M=16, ef_construction=200 and build on one thread. Search QPS is measured on
batches of 1,000 queries (one call each, so Python overhead is the same for both), interleaving
the two libraries and keeping the best of several rounds. Build time and single-thread QPS use
the calling thread's CPU time (both libraries run a one-thread call inline in the calling
thread): on this shared 2-core machine wall time swings by 2x with the other tenants' load, CPU
time far less. The 2-thread row uses wall time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import hnswlib
import numpy as np
from numpy.typing import NDArray

from benches.common import Row
from pml_server._core import HnswIndex

SUITE = "index"
DIM = 384
K = 10
# Per set, ef values from low recall to >= 0.95 (the bar at default settings).
EF_VALUES = {"embedding": (10, 20, 40, 80), "isotropic": (20, 40, 80, 160)}
N_QUERIES = 1000
ROUNDS = 5
TOPICS = 1000
SPREAD = 0.6


def _embedding_like(n: int, seed: int = 0) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """Normalized vectors shaped like sentence embeddings: 1,000 topics, moderate spread.

    Real embedding sets (MiniLM and the like) have a covariance spectrum that decays roughly as a
    power law, so their intrinsic dimension is a few dozen, not 384. Here every direction i has
    variance proportional to 1/i (participation ratio about 26), for the topic centres and for
    the spread around them alike; the spread (0.6 of a centre's norm) puts a point at cosine
    about 0.86 from its centre and two points of one topic at about 0.74, the range measured for
    paraphrases. Queries are new draws from the same topics. Fixed seed: the same data each run.
    """
    rng = np.random.default_rng(seed)
    scale = (1.0 / np.sqrt(np.arange(1, DIM + 1))).astype(np.float32)
    centres = rng.standard_normal((TOPICS, DIM)).astype(np.float32) * scale

    def draw(count: int) -> NDArray[np.float32]:
        out = np.empty((count, DIM), np.float32)
        for start in range(0, count, 100_000):  # chunks keep the temporaries small
            m = min(100_000, count - start)
            noise = rng.standard_normal((m, DIM), dtype=np.float32) * (SPREAD * scale)
            out[start : start + m] = centres[rng.integers(0, TOPICS, m)] + noise
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    return draw(n), draw(N_QUERIES)


def _isotropic(n: int, seed: int = 0) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """The earlier, much harder set: 100 centres with isotropic N(0, 0.5^2) noise in all 384
    directions. Inside a cluster the neighbours are random 384-d Gaussian points (intrinsic
    dimension 384), which real embeddings are not; kept as a stress case."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((100, DIM)).astype(np.float32)

    def draw(count: int) -> NDArray[np.float32]:
        out = np.empty((count, DIM), np.float32)
        for start in range(0, count, 100_000):  # chunks keep the float64 temporaries small
            m = min(100_000, count - start)
            noise = 0.5 * rng.standard_normal((m, DIM))
            out[start : start + m] = centres[rng.integers(0, 100, m)] + noise
        return out

    return draw(n), draw(N_QUERIES)


def _exact(vectors: NDArray[np.float32], queries: NDArray[np.float32]) -> NDArray[np.int64]:
    vn = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    top = np.empty((len(queries), K), np.int64)
    for start in range(0, len(queries), 100):
        sims = qn[start : start + 100] @ vn.T
        part = np.argpartition(-sims, K, axis=1)[:, :K]
        order = np.take_along_axis(sims, part, axis=1).argsort(axis=1)[:, ::-1]
        top[start : start + 100] = np.take_along_axis(part, order, axis=1)
    return top


def _recall(found: list[list[int]], truth: NDArray[np.int64]) -> float:
    hits = sum(len(set(f) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
    return hits / (K * len(truth))


def _timed(
    fn: Callable[[], object], clock: Callable[[], float] = time.thread_time
) -> tuple[float, object]:
    start = clock()
    out = fn()
    return clock() - start, out


def _interleaved_qps(
    ours: Callable[[], object],
    theirs: Callable[[], object],
    clock: Callable[[], float] = time.thread_time,
) -> tuple[float, float]:
    best_ours = best_theirs = float("inf")
    for _ in range(ROUNDS):
        best_theirs = min(best_theirs, _timed(theirs, clock)[0])
        best_ours = min(best_ours, _timed(ours, clock)[0])
    return N_QUERIES / best_ours, N_QUERIES / best_theirs


def run(large: bool) -> list[Row]:
    default_n = 5_000 if os.environ.get("PML_BENCH_QUICK") else 100_000
    n = int(os.environ.get("PML_BENCH_INDEX_N", 1_000_000 if large else default_n))
    default_sets = "embedding,isotropic" if large else "embedding"
    sets = os.environ.get("PML_BENCH_INDEX_SETS", default_sets).split(",")
    generators = {"embedding": _embedding_like, "isotropic": _isotropic}
    rows: list[Row] = []
    for name in sets:
        vectors, queries = generators[name](n)
        rows.extend(_run_set(name, vectors, queries))
    rows.append(_exact_row(vectors, queries))
    return rows


def _run_set(name: str, vectors: NDArray[np.float32], queries: NDArray[np.float32]) -> list[Row]:
    n = len(vectors)
    truth = _exact(vectors, queries)
    ids = np.arange(n, dtype=np.uint64)
    rows: list[Row] = []
    label = f"{name} {n // 1000}k x {DIM}"

    theirs = hnswlib.Index(space="cosine", dim=DIM)
    theirs.init_index(max_elements=n, M=16, ef_construction=200, random_seed=100)
    t_theirs, _ = _timed(lambda: theirs.add_items(vectors, ids, num_threads=1))
    ours = HnswIndex(DIM, m=16, ef_construction=200)
    t_ours, _ = _timed(lambda: ours.add(ids, vectors))
    rows.append(
        Row(
            SUITE,
            f"build {label}, 1 thread (CPU s)",
            t_ours,
            "s",
            t_theirs,
            "hnswlib",
            1.2,
            True,
            {"kernel": ours.kernel},
        )
    )
    rows.append(
        Row(
            SUITE,
            f"memory {label} (hnswlib: its index_file_size, a lower bound)",
            ours.memory_bytes() / 2**20,
            "MiB",
            theirs.index_file_size() / 2**20,
            "hnswlib",
            None,
            True,
            {"to_bytes_len": len(ours.to_bytes())},
        )
    )

    curve_theirs: list[tuple[float, float]] = []
    points_ours: list[tuple[float, float]] = []
    for ef in EF_VALUES[name]:
        theirs.set_ef(ef)
        ours_fn = lambda ef=ef: ours.search_batch(queries, K, ef=ef)  # noqa: E731
        theirs_fn = lambda: theirs.knn_query(queries, k=K, num_threads=1)  # noqa: E731
        qps_ours, qps_theirs = _interleaved_qps(ours_fn, theirs_fn)
        recall_ours = _recall([r[0].tolist() for r in ours_fn()], truth)
        recall_theirs = _recall(theirs_fn()[0].tolist(), truth)
        curve_theirs.append((recall_theirs, qps_theirs))
        points_ours.append((recall_ours, qps_ours))
        rows.append(
            Row(
                SUITE,
                f"{name} QPS ef={ef}, 1 thread (recall {recall_ours:.3f} vs {recall_theirs:.3f})",
                qps_ours,
                "q/s",
                qps_theirs,
                "hnswlib",
                1.0,
            )
        )
        rows.append(
            Row(
                SUITE,
                f"{name} recall@10 ef={ef}",
                recall_ours,
                "",
                recall_theirs,
                "hnswlib",
                None,
            )
        )

    # The bar: recall@10 >= 0.95 with the index's default ef_search (no `ef` given).
    recall_default = _recall([r[0].tolist() for r in ours.search_batch(queries, K)], truth)
    rows.append(
        Row(
            SUITE,
            f"{name} recall@10 at the default ef_search={ours.ef_search} (bar 0.95)",
            recall_default,
            "",
            None,
            "",
            None,
        )
    )

    # Equal recall: hnswlib's QPS interpolated on its own recall/QPS curve at our recall.
    recalls, qps_curve = zip(*sorted(curve_theirs), strict=True)
    for recall_ours, qps_ours in points_ours:
        if recalls[0] <= recall_ours <= recalls[-1]:
            at_equal = float(np.interp(recall_ours, recalls, qps_curve))
            rows.append(
                Row(
                    SUITE,
                    f"{name} QPS at equal recall {recall_ours:.3f}, 1 thread "
                    "(hnswlib interpolated)",
                    qps_ours,
                    "q/s",
                    at_equal,
                    "hnswlib",
                    1.0,
                )
            )

    theirs.set_ef(20)
    qps2_ours, qps2_theirs = _interleaved_qps(
        lambda: ours.search_batch(queries, K, ef=20, num_threads=2),
        lambda: theirs.knn_query(queries, k=K, num_threads=2),
        time.perf_counter,
    )
    rows.append(
        Row(SUITE, f"{name} QPS ef=20, 2 threads", qps2_ours, "q/s", qps2_theirs, "hnswlib", 1.0)
    )
    return rows


def _exact_row(vectors: NDArray[np.float32], queries: NDArray[np.float32]) -> Row:
    start = time.perf_counter()
    for q in queries[:200]:
        np.argpartition(-(vectors @ q), K)[:K]
    exact_qps = 200 / (time.perf_counter() - start)
    return Row(
        SUITE,
        "QPS exact numpy (the recall reference), 1 query a call",
        exact_qps,
        "q/s",
        None,
        "",
        None,
    )
