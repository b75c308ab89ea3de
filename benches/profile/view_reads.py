"""What the tables' Bloom filters save a Suggest at a realistic store layout (issue 20): two stores
of the service bench's workload filled the bench's way (`service_server.populate`), one with the
filters (`rocks.BLOOM_BITS_PER_KEY`) and one without, then the three view multi-gets of a Suggest
(`ViewReads.view_rows`: 10 random patterns, their records, counters and intents) timed on each
as filled, the read cache off, in alternating rounds:

    python -m benches.profile.view_reads [SIZE] [ROUNDS] [QUERIES]

Defaults: 300000 intents (two fills of about 2 minutes each), 4 rounds, 3000 queries. Prints each
family's tables per level, then each round's wall and CPU milliseconds a query. A fully
compacted store (one table a family) would show no difference: the filters skip the sorted runs
that do not hold a key.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from benches.harness import service_server
from pml_server.storage import rocks
from pml_server.storage.keys import CF_INTENTS, COLUMN_FAMILIES, split_tenant
from pml_server.storage.repo import Repository

Query = list[tuple[str, str, list[int]]]  # (tenant, pattern id, its intent ids) x 10


def _open(path: Path, bits: int) -> rocks.Store:
    rocks.BLOOM_BITS_PER_KEY = bits  # the options a store is opened with
    return rocks.Store(path, "fast")


def _queries(store: rocks.Store, count: int) -> list[Query]:
    intents: dict[tuple[str, str], list[int]] = {}
    for key, _ in store._cf[CF_INTENTS].items():
        assert isinstance(key, bytes)  # the store opens its families in raw mode
        tenant, rest = split_tenant(key)
        pattern = rest.split(b"\x00", 1)[0].decode()
        intents.setdefault((tenant, pattern), []).append(int.from_bytes(rest[-8:], "big"))
    keys = sorted(intents)
    rng = random.Random(7)
    return [[(t, p, intents[(t, p)]) for t, p in rng.sample(keys, 10)] for _ in range(count)]


def _levels(store: rocks.Store) -> str:
    out = []
    for name in COLUMN_FAMILIES:
        files = [store._cf[name].property_value(f"rocksdb.num-files-at-level{n}") for n in range(7)]
        out.append(f"{name} {'/'.join(str(f) for f in files)}")
    return ", ".join(out)


def _time(store: rocks.Store, queries: list[Query]) -> tuple[float, float]:
    repo = Repository(store)
    wall, cpu = time.perf_counter(), time.thread_time()
    for query in queries:
        patterns = [p for _, p, _ in query]
        rows = repo.views.view_rows(query[0][0], patterns)
        if rows is None or any(r is None for r in rows.patterns):
            raise RuntimeError("a pattern of the store was not found")
    return time.perf_counter() - wall, time.thread_time() - cpu


def main(argv: list[str]) -> None:
    size = int(argv[0]) if argv else 300_000
    rounds = int(argv[1]) if len(argv) > 1 else 4
    count = int(argv[2]) if len(argv) > 2 else 3000
    default_cached, default_bits = rocks.READ_CACHED, rocks.BLOOM_BITS_PER_KEY
    rocks.READ_CACHED = frozenset()  # every read goes to RocksDB
    try:
        with tempfile.TemporaryDirectory(prefix="pml-view-reads-") as tmp:
            paths, queries = {}, {}
            for bits in (0, default_bits):
                rocks.BLOOM_BITS_PER_KEY = bits
                paths[bits] = Path(tmp) / f"bloom-{bits}"
                service_server.populate(paths[bits], size, "minilm", True)
                store = _open(paths[bits], bits)
                queries[bits] = _queries(store, count)  # ids are random: each store its own
                print(f"bloom {bits}: {_levels(store)}", flush=True)
                store.close()
            for n in range(rounds):
                for bits in (0, default_bits) if n % 2 == 0 else (default_bits, 0):
                    store = _open(paths[bits], bits)
                    wall, cpu = _time(store, queries[bits])
                    store.close()
                    print(
                        f"round {n} bloom {bits}: {1e3 * wall / count:.3f} ms wall, "
                        f"{1e3 * cpu / count:.3f} ms CPU a query",
                        flush=True,
                    )
    finally:
        rocks.READ_CACHED, rocks.BLOOM_BITS_PER_KEY = default_cached, default_bits


if __name__ == "__main__":
    main(sys.argv[1:])
