"""Where one core-ranked Suggest's time goes as the tenant grows (issue 20): the in-memory state
of a tenant (vector index, lexical index, ranking table) built in this process as the service
bench's client-vector store holds it, without the store, and each part of one
`TenantSearchIndex.rank` call timed on the service bench's Suggest queries:

    python -m benches.profile.rank_scale [--sizes 10000,100000] [--queries 300] [--cache DIR]

Same intents, tool names and vectors as `benches.harness.service_workload` (execution i: one
pattern, one capability, one intent, counters of one success); pattern and capability ids are drawn
as the engine draws them (`pat_` / `cap_` + 16 hex digits), from a fixed seed. Per size it prints
the build time (vector inserts, lexical `add_terms` per intent), the resident memory the state
added per intent, then each part's median and p90 in ms over `--queries` queries, the parts
run one after the other for each query so a neighbour's burst hits all of them:

- `hnsw`: the vector search for the fetch limit (`HnswIndex.search`, k=40);
- `bm25`: the lexical search for the same limit on the query's terms (`LexicalIndex.search`);
- `exact cosines`: the allow-list scan of the lexical hits' intents the vector search missed;
- `core rank`: the whole core call (`rank_query`: both searches, the exact cosines, the table,
  the formula, filters, grouping, top k);
- `merge + table`: core rank less the three above;
- `python rank`: `TenantSearchIndex.rank` (tokenizing, the core call, the answer's tuples);
- `python around`: python rank less core rank.

The parts run first on each query's data, the core call after them finds it in cache: `merge +
table` is the least reliable figure (it can come out below zero), and a served Suggest's core
call, its caches cooled by the request handling between queries, takes longer than `core rank`
here (at 100k intents 1.19 ms wall in `benches.profile.suggest_profile` against 0.3-0.45 ms here).

`--cache DIR` keeps each size's vector index as bytes there (a 1M index takes long to build);
a later run with the same size loads it instead of inserting. The lexical index and table are
always built (seconds). A quick smoke run: `--sizes 2000 --queries 20`.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

from benches.harness import service_workload as work
from benches.harness.service_harness import rss_bytes
from pml_server import _core
from pml_server.domain.model import SuggestQuery
from pml_server.domain.records import IntentRecord
from pml_server.ranking import RankingConfig, RankRequest, resolve_settings
from pml_server.ranking.lexical import query_terms
from pml_server.ranking.table import core_params
from pml_server.search import TenantSearchIndex, restore_index

K = 5  # the load client's page_size
CHUNK = 2048  # vectors per insert call, as the bulk fill (benches/harness/fill.py)
INSERT_THREADS = 2
NOW_MS = 1_700_000_000_000


def build(size: int, cache: Path | None) -> tuple[TenantSearchIndex, dict[str, float]]:
    """The tenant's state for executions 0..size, and how long its parts took (s)."""
    draw = random.Random(20)
    patterns = [f"pat_{draw.getrandbits(64):016x}" for _ in range(size)]
    capabilities = [f"cap_{draw.getrandbits(64):016x}" for _ in range(size)]
    cached = None if cache is None else cache / f"hnsw-{size}.bin"
    times: dict[str, float] = {}
    start = time.perf_counter()
    if cached is not None and cached.exists():
        index = restore_index("hnsw", work.DIM, cached.read_bytes())
        times["vectors loaded"] = time.perf_counter() - start
    else:
        index = TenantSearchIndex("hnsw", work.DIM)
        for first in range(0, size, CHUNK):
            n = min(CHUNK, size - first)
            rows = work.stored_vectors(n, first)
            ids = np.arange(first + 1, first + n + 1, dtype=np.uint64)  # the engine's intent ids
            index.ann.add(ids, rows, INSERT_THREADS)
        times["vectors inserted"] = time.perf_counter() - start
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_bytes(index.ann.to_bytes())
    # the lexical document and links as `TenantSearchIndex.add` makes them (its vector is in)
    dummy = np.zeros(work.DIM, np.float32)
    start = time.perf_counter()
    for i in range(size):
        intent = IntentRecord(i + 1, patterns[i], work.intent_text(i), 1, NOW_MS, "client", dummy)
        index.add(intent, work.tools_for(i))
    times["lexical + links"] = time.perf_counter() - start
    start = time.perf_counter()
    for i in range(size):
        index.ranks.set_pattern(patterns[i], capabilities[i], work.tools_for(i), False, False)
        index.ranks.set_counters(patterns[i], 1, 0, 1, NOW_MS, [])
    times["table rows"] = time.perf_counter() - start
    return index, times


def timed(step: Callable[[], object]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def profile(index: TenantSearchIndex, queries: int) -> dict[str, list[float]]:
    """Each part's seconds per query, the parts run back to back for each query."""
    config = RankingConfig()
    settings = resolve_settings(SuggestQuery(intent="", k=K), config)
    limit = config.fetch_limit(K)
    params = core_params(config)
    vectors = work.query_vectors(queries)
    ann, lexical = index.ann, index.lexical.core
    assert isinstance(ann, _core.HnswIndex)
    parts: dict[str, list[float]] = {}
    for j in range(queries):
        text, vector = work.query_text(j), vectors[j]
        terms = query_terms(text)
        semantic_ids, _ = ann.search(vector, limit)
        hits = lexical.search(terms, limit)
        seen = set(semantic_ids.tolist())
        missed = np.array(
            [i for p, _ in hits for i in index.ranks.intents_of(p) if i not in seen],
            dtype=np.uint64,
        )

        def core_rank(terms: list[str] = terms, vector: np.ndarray = vector) -> object:
            return _core.rank_query(
                index.ranks._core,
                ann,
                lexical,
                vector,
                terms,
                limit,
                K,
                params,
                NOW_MS,
                min_match=settings.min_match,
                min_success=settings.min_success,
                include_flagged=False,
                available_tools=None,
                tags=[],
            )

        sample = {
            "hnsw": timed(partial(ann.search, vector, limit)),
            "bm25": timed(partial(lexical.search, terms, limit)),
            "exact cosines": timed(partial(ann.search, vector, len(missed), allow=missed))
            if len(missed)
            else 0.0,
            "core rank": timed(core_rank),
            "python rank": timed(
                partial(index.rank, RankRequest(vector, text, limit, K, settings, config, NOW_MS))
            ),
        }
        sample["merge + table"] = (
            sample["core rank"] - sample["hnsw"] - sample["bm25"] - sample["exact cosines"]
        )
        sample["python around"] = sample["python rank"] - sample["core rank"]
        for name, seconds in sample.items():
            parts.setdefault(name, []).append(seconds)
    return parts


def report(size: int, index: TenantSearchIndex, times: dict[str, float], rss: int) -> None:
    assert isinstance(index.ann, _core.HnswIndex)
    built = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in times.items())
    lexical_us = times["lexical + links"] / size * 1e6
    print(f"{size} intents: {built} ({lexical_us:.1f} us an intent for lexical + links)")
    print(
        f"  resident memory added {rss / size:.0f} B an intent (vector index reports"
        f" {index.ann.memory_bytes() / size:.0f}, table {index.ranks.memory_bytes() / size:.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--cache", type=Path, default=None, help="keep vector indexes here")
    args = parser.parse_args()
    for size in (int(n) for n in args.sizes.split(",") if n):
        before = rss_bytes(os.getpid())
        index, times = build(size, args.cache)
        report(size, index, times, rss_bytes(os.getpid()) - before)
        parts = profile(index, args.queries)
        for name, seconds in parts.items():
            ms = sorted(s * 1e3 for s in seconds)
            p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
            print(f"  {name:14s} p50 {statistics.median(ms):7.3f} ms  p90 {p90:7.3f} ms")
        del index
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")


if __name__ == "__main__":
    main()
