"""What an applied retention run costs when it removes N patterns on RocksDB (docs/ranking.md,
Retention): the run's time, the write batches it submits, and the longest a capture of another
pattern of the tenant waited meanwhile (a thread capturing one after another).

    python -m benches.profile.retention_removal 100000
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from pml_server.retention import RetentionConfig
from testing.engine import make_record, open_engine

T = "t"
BATCH = 64  # record_many's bound
# every pattern with a failed run is removed
REMOVE_ALL_FAILING = RetentionConfig(min_tries=1, min_success_rate=1.0, auto_remove=True)


def main(n: int) -> None:
    where = Path(tempfile.mkdtemp()) / "e"
    engine = open_engine(where, durability="fast", retention=REMOVE_ALL_FAILING)
    for start in range(0, n, BATCH):
        for failed in (set(), {"sum_rows"}):
            batch = [
                make_record(
                    f"r{i}-{bool(failed)}",
                    f"read ledger number {i} of the orders and sum its rows",
                    [f"tool_{i % 50}", "sum_rows"],
                    code=f"const r = await mcp.tool_{i % 50}({{path: 'a{i}', n{i}: 1}});",
                    failed=failed,
                )
                for i in range(start, min(n, start + BATCH))
            ]
            engine.record_many(T, batch)
    engine.close()
    engine = open_engine(where, durability="sync", retention=REMOVE_ALL_FAILING)
    store = engine._state.store
    submits = 0
    submit = store.submit

    def counted(ops):  # type: ignore[no-untyped-def]
        nonlocal submits
        submits += 1
        return submit(ops)

    store.submit = counted  # type: ignore[method-assign]
    waits: list[float] = []
    long_waits: list[tuple[float, float]] = []  # (seconds into the run, wait) over 1 s
    done = threading.Event()
    began = time.perf_counter()

    def capture() -> None:
        i = 0
        while not done.is_set():
            started = time.perf_counter()
            engine.record(T, make_record(f"c{i}", "send the weekly report", ["mail_send"]))
            waits.append(time.perf_counter() - started)
            if waits[-1] > 1.0:
                long_waits.append((started - began, waits[-1]))
            i += 1

    capturing = threading.Thread(target=capture)
    capturing.start()
    started = began = time.perf_counter()
    report = engine.run_retention(T, apply=True)
    took = time.perf_counter() - started
    done.set()
    capturing.join()
    removed = sum(1 for e in report.entries if e.action.value == "removed")
    left = engine.stats(T).patterns
    engine.close()
    waits.sort()
    print(
        f"{n} patterns, {removed} removed in {took:.1f} s, {submits} write batches; "
        f"{len(waits)} captures meanwhile: median {waits[len(waits) // 2] * 1e3:.1f} ms, "
        f"max {waits[-1] * 1e3:.1f} ms; patterns left {left}; over 1 s (at, wait): "
        f"{[(round(a, 1), round(w, 1)) for a, w in long_waits]}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
