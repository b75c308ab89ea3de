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
from functools import partial
from typing import Any

from benches.harness import service_workload as work
from benches.harness.closed_loop import Load

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
    load = Load(concurrency, seconds, range(max_requests))

    def send(collection: Any, k: int) -> None:
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

    def caller(n: int) -> None:
        # the summary counts failures; the caller raises on zero successes
        while (k := load.take()) is not None:
            load.timed(n, partial(send, collections[n], k))

    return load.run(caller)


def main(argv: list[str]) -> None:
    if argv[0] == "populate":
        populate(argv[1], int(argv[2]))
        return
    target, op, concurrency, seconds, max_requests, _query, offset = argv
    result = run(target, op, int(concurrency), float(seconds), int(max_requests), int(offset))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
