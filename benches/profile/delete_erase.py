"""What a user's deletion costs now that it rewrites the files holding the deleted rows
(docs/storage.md, Data left on disk), over N stored patterns on RocksDB: the median time of a
DeletePattern's engine call, against the same deletion without the files' rewrite, alternated
in one process on one store (each deletion takes another pattern).

    python -m benches.profile.delete_erase 10000
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from pml_server.service import _curation
from testing.engine import make_record, open_engine

T = "t"
BATCH = 64  # record_many's bound
ROUNDS = 20


def main(n: int) -> None:
    where = Path(tempfile.mkdtemp()) / "e"
    engine = open_engine(where, durability="sync")
    ids: list[str] = []
    for start in range(0, n, BATCH):
        batch = [
            make_record(
                f"r{i}",
                f"read ledger number {i} of the orders and sum its rows",
                [f"tool_{i % 50}", "sum_rows"],
                code=f"const r = await mcp.tool_{i % 50}({{path: 'a{i}', n{i}: 1}});",
            )
            for i in range(start, min(n, start + BATCH))
        ]
        ids += [r.pattern_id for r in engine.record_many(T, batch) if not isinstance(r, Exception)]
    engine.close()  # the rows flushed and compacted as a store written long ago
    engine = open_engine(where, durability="sync")
    state = engine._state
    erased: list[float] = []
    kept: list[float] = []
    for i in range(ROUNDS):
        started = time.perf_counter()
        engine.delete_pattern(T, ids[2 * i])
        erased.append(time.perf_counter() - started)
        started = time.perf_counter()
        _curation.delete_pattern(state, T, ids[2 * i + 1], "manual")
        kept.append(time.perf_counter() - started)
    size = sum(p.stat().st_size for p in where.rglob("*") if p.is_file())
    engine.close()
    a, b = statistics.median(erased), statistics.median(kept)
    print(
        f"{n} patterns ({size / 1e6:.0f} MB on disk): DeletePattern median {a * 1e3:.1f} ms "
        f"with the files' rewrite, {b * 1e3:.1f} ms without ({a / b:.1f}x), {ROUNDS} each"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
