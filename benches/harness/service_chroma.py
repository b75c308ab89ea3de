"""Chroma side of the peer benchmark, run as its own process like our load client:

    python -m benches.harness.service_chroma populate PATH COUNT
    python -m benches.harness.service_chroma TARGET OP CONCURRENCY SECONDS MAX_REQUESTS QUERY OFFSET

TARGET is `http://127.0.0.1:PORT` (the `chroma run` server, through chromadb.HttpClient, one
client per caller) or `embedded:PATH` (chromadb.PersistentClient in this process, for
reference). OP is `query` (top 5 by the query vector, like Suggest) or `upsert` (one execution
per call, like RecordExecution). The records and vectors are `service_workload`'s, the same
ones our server gets. Prints the same JSON summary as `service_load`.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import numpy as np

from benches.harness import service_workload as work

COLLECTION = "bench"
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


def _settings() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False)


def _client(target: str) -> Any:
    import chromadb

    if target.startswith("embedded:"):
        return chromadb.PersistentClient(
            path=target.removeprefix("embedded:"), settings=_settings()
        )
    host, port = target.removeprefix("http://").rsplit(":", 1)
    return chromadb.HttpClient(host=host, port=int(port), settings=_settings())


def _metadata(i: int) -> dict[str, str]:
    return {"tools": ",".join(work.tools_for(i)), "code": work.code_for(i)}


def populate(path: str, count: int) -> None:
    client = _client(f"embedded:{path}")
    collection = client.create_collection(
        COLLECTION, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
    )
    vectors = work.stored_vectors(count)
    for start in range(0, count, 1000):
        ids = range(start, min(count, start + 1000))
        collection.add(
            ids=[f"e{i}" for i in ids],
            embeddings=vectors[start : start + len(ids)],
            documents=[work.intent_text(i) for i in ids],
            metadatas=[_metadata(i) for i in ids],
        )


def run(
    target: str, op: str, concurrency: int, seconds: float, max_requests: int, offset: int
) -> dict[str, float]:
    if op == "query":
        vectors = work.query_vectors(max_requests)
    else:
        vectors = work.stored_vectors(max_requests, offset)
    shared = _client(target) if target.startswith("embedded:") else None
    collections = [
        (shared or _client(target)).get_collection(COLLECTION, embedding_function=None)
        for _ in range(concurrency)
    ]
    latencies: list[list[float]] = [[] for _ in range(concurrency)]
    errors = [0] * concurrency
    cursor = iter(range(max_requests))
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def take() -> int | None:
        if time.perf_counter() >= deadline:
            return None
        with lock:
            return next(cursor, None)

    def caller(n: int) -> None:
        collection = collections[n]
        while (k := take()) is not None:
            start = time.perf_counter()
            try:
                if op == "query":
                    collection.query(query_embeddings=vectors[k : k + 1], n_results=5)
                else:
                    i = offset + k
                    collection.upsert(
                        ids=[f"e{i}"],
                        embeddings=vectors[k : k + 1],
                        documents=[work.intent_text(i)],
                        metadatas=[_metadata(i)],
                    )
            except Exception:  # the summary counts failures; the caller raises on zero successes
                errors[n] += 1
                continue
            latencies[n].append(time.perf_counter() - start)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    flat = np.array([x for per in latencies for x in per]) * 1000.0
    count = len(flat)
    return {
        "count": count,
        "errors": sum(errors),
        "elapsed": elapsed,
        "qps": count / elapsed if elapsed > 0 else 0.0,
        "p50_ms": float(np.percentile(flat, 50)) if count else float("nan"),
        "p99_ms": float(np.percentile(flat, 99)) if count else float("nan"),
    }


def main(argv: list[str]) -> None:
    if argv[0] == "populate":
        populate(argv[1], int(argv[2]))
        return
    target, op, concurrency, seconds, max_requests, _query, offset = argv
    result = run(target, op, int(concurrency), float(seconds), int(max_requests), int(offset))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
