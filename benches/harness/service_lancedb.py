r"""LanceDB side of the `lancedb` peer suite, and pml's engine driven in-process, each run as its
own process like our load client (so one side's threads and memory never touch the other's):

    python -m benches.harness.service_lancedb populate PATH COUNT
    python -m benches.harness.service_lancedb memory PATH COUNT
    python -m benches.harness.service_lancedb TARGET OP CONCURRENCY SECONDS MAX_REQUESTS QUERY \
        OFFSET

TARGET is `lancedb:PATH` (a LanceDB table opened in this process, as agent frameworks embed it)
or `engine:PATH` (pml's `Engine` opened on a copy of a filled store, in this process: the
engine-to-engine comparison, no gRPC). OP, for LanceDB: `vector` (top 5 by the query vector),
`fts` (top 5 by BM25 over the text), `hybrid` (both, fused by LanceDB's default reranker, RRF)
or `add` (one record per call); for the engine: `suggest` (Suggest with the query text and its
vector, k=5: pml's own hybrid) or `record` (one execution per call). The records, texts and
vectors are `service_workload`'s, the ones our server gets. Prints the same JSON summary as
`service_load`. `memory` opens a populated table, runs a few hybrid queries and prints its
resident bytes and the interpreter's resident bytes before it opened the table.

How a LanceDB user writes it: one table, a `vector` column (no vector index below 100k rows, as
LanceDB's docs advise: a flat scan is exact), an FTS index on `text` (the intent and the tool
names), queries through `table.search(...)` and `.to_list()`.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benches.harness import service_workload as work
from benches.harness.closed_loop import Load

TABLE = "bench"
K = 5


def _row(i: int, vector: Any) -> dict[str, Any]:
    tools = work.tools_for(i)
    return {
        "id": i,
        "text": f"{work.intent_text(i)} {' '.join(tools)}",
        "tools": ",".join(tools),
        "code": work.code_for(i),
        "vector": vector,
    }


def _fts_index(table: Any) -> None:
    from lancedb.index import FTS

    table.create_index("text", config=FTS(), replace=True)


def populate(path: str, count: int) -> float:
    """A LanceDB table of executions 0..count with its FTS index; returns the seconds taken."""
    import lancedb

    start = time.perf_counter()
    db = lancedb.connect(path)
    vectors = work.stored_vectors(count)
    table = None
    for first in range(0, count, 10_000):
        rows = [_row(i, vectors[i]) for i in range(first, min(count, first + 10_000))]
        if table is None:
            table = db.create_table(TABLE, data=rows)
        else:
            table.add(rows)
    assert table is not None
    _fts_index(table)
    return time.perf_counter() - start


def _lancedb_call(path: str, op: str, offset: int, count: int) -> Callable[[int], None]:
    import lancedb

    table = lancedb.connect(path).open_table(TABLE)
    if op == "add":
        vectors = work.stored_vectors(count, offset)
        return lambda k: table.add([_row(offset + k, vectors[k])])
    vectors = work.query_vectors(count)
    if op == "vector":
        return lambda k: table.search(vectors[k]).limit(K).to_list()
    if op == "fts":
        return lambda k: table.search(work.query_text(k), query_type="fts").limit(K).to_list()
    if op == "hybrid":
        return lambda k: (
            table.search(query_type="hybrid")
            .vector(vectors[k])
            .text(work.query_text(k))
            .limit(K)
            .to_list()
        )
    raise ValueError(f"unknown LanceDB op {op!r}")


def _engine_call(path: str, op: str, offset: int, count: int) -> tuple[Callable[[int], None], Any]:
    from benches.harness.service_server import TENANT, _record
    from pml_server.capture.normalize import normalize
    from pml_server.config import EngineConfig
    from pml_server.domain.model import SuggestQuery
    from pml_server.service import Engine

    copy = Path(tempfile.mkdtemp(prefix="pml-engine-load-")) / "store"
    shutil.copytree(path, copy)
    engine = Engine.open(EngineConfig(data_dir=copy, durability="fast"), normalizer=normalize)
    if not engine.admin.wait_ready(600):
        raise RuntimeError("engine index did not become ready")
    if op == "record":
        vectors = work.stored_vectors(count, offset)
        records = [_record(offset + k, tuple(vectors[k].tolist())) for k in range(count)]
        return (lambda k: engine.record(TENANT, records[k])), engine
    if op != "suggest":
        raise ValueError(f"unknown engine op {op!r}")
    qv = work.query_vectors(count)
    queries = [
        SuggestQuery(intent=work.query_text(k), k=K, intent_embedding=tuple(qv[k].tolist()))
        for k in range(count)
    ]
    return (lambda k: engine.suggest(TENANT, queries[k])), engine


def run(
    target: str, op: str, concurrency: int, seconds: float, max_requests: int, offset: int
) -> dict[str, float]:
    engine = None
    if target.startswith("lancedb:"):
        call = _lancedb_call(target.removeprefix("lancedb:"), op, offset, max_requests)
    elif target.startswith("engine:"):
        call, engine = _engine_call(target.removeprefix("engine:"), op, offset, max_requests)
    else:
        raise ValueError(f"unknown target {target!r}")
    call(0)  # warm: the first query opens files and builds caches on both sides
    load = Load(concurrency, seconds, range(1, max_requests))

    def caller(n: int) -> None:
        # failures counted; the suite raises on zero successes
        while (k := load.take()) is not None:
            load.timed(n, partial(call, k))

    summary = load.run(caller)
    if engine is not None:
        engine.close()
    return summary


def memory(path: str, count: int) -> dict[str, float]:
    """Resident bytes of this process before and after opening the table and answering 200
    hybrid queries (the index and column caches a serving process holds)."""
    import lancedb

    from benches.harness.service_harness import rss_bytes

    vectors = work.query_vectors(200)
    before = rss_bytes(__import__("os").getpid())
    table = lancedb.connect(path).open_table(TABLE)
    for k in range(200):
        table.search(query_type="hybrid").vector(vectors[k]).text(work.query_text(k)).limit(
            K
        ).to_list()
    after = rss_bytes(__import__("os").getpid())
    return {"rows": float(count), "rss_before": float(before), "rss_after": float(after)}


def main(argv: list[str]) -> None:
    if argv[0] == "populate":
        print(json.dumps({"seconds": populate(argv[1], int(argv[2]))}), flush=True)
        return
    if argv[0] == "memory":
        print(json.dumps(memory(argv[1], int(argv[2]))), flush=True)
        return
    target, op, concurrency, seconds, max_requests, _query, offset = argv
    result = run(target, op, int(concurrency), float(seconds), int(max_requests), int(offset))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
