"""Does the HNSW index at the engine's default settings cover what `vector_index = "exact"` is
for? Both kinds are the core's `HnswIndex` (`pml_server.search.vectors.new_index`; "exact" is
its exact-scan mode, every search scoring every vector), so the only question is recall and
cost: for each store size, the share of the exact top k the graph walk returns (k = 40, the
fetch limit of a k=5 Suggest at the default overfetch, and k = 10), and the median wall time of
one search of each kind:

    python -m benches.profile.exact_recall [--sizes 1000,10000,50000] [--queries 300]

Vectors: the index bench's embedding-like set (`benches.bench_index._embedding_like`, 384-d,
fixed seed). Results in benches/results/exact_recall.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benches.bench_index import _embedding_like
from pml_server.search.vectors import new_index


def measure(size: int, queries: int) -> dict[str, float]:
    data, probes = _embedding_like(size, seed=size)
    ids = np.arange(1, size + 1, dtype=np.uint64)
    graph, exact = new_index("hnsw", data.shape[1]), new_index("exact", data.shape[1])
    graph.add(ids, data)
    exact.add(ids, data)
    out: dict[str, float] = {}
    for k in (10, 40):
        found = 0
        graph_ms, exact_ms = [], []
        for query in probes[:queries]:
            start = time.perf_counter()
            truth, _ = exact.search(query, k)
            exact_ms.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            got, _ = graph.search(query, k)
            graph_ms.append((time.perf_counter() - start) * 1000)
            found += len(set(truth.tolist()) & set(got.tolist()))
        out[f"recall@{k}"] = found / (k * min(queries, len(probes)))
        out[f"hnsw ms@{k}"] = statistics.median(graph_ms)
        out[f"exact ms@{k}"] = statistics.median(exact_ms)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    print("| intents | recall@10 | recall@40 | hnsw ms (k=40) | exact ms (k=40) |")
    print("| --- | --- | --- | --- | --- |")
    for size in (int(s) for s in args.sizes.split(",")):
        m = measure(size, args.queries)
        print(
            f"| {size} | {m['recall@10']:.4f} | {m['recall@40']:.4f} | "
            f"{m['hnsw ms@40']:.3f} | {m['exact ms@40']:.3f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
