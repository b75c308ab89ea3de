"""How long a backup pauses the server's Python threads: `Store.checkpoint` runs inside
rocksdict with the GIL held (flushing the memtable, linking the SST files), so every thread of
the server waits that long. A ticker thread sleeping 1 ms at a time measures the longest gap
while backups are taken of a store holding KEYS fresh keys of 600 random bytes.

    python -m benches.profile.backup_pause [KEYS]
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from pml_server.storage import Store
from pml_server.storage.keys import CF_PATTERNS


def measure(keys: int, backups: int = 3) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as scratch:
        store = Store(Path(scratch) / "db", "fast")
        value = os.urandom(600)
        for start in range(0, keys, 500):
            store.write(
                [(CF_PATTERNS, f"k{i:09d}".encode(), value) for i in range(start, start + 500)]
            )
        gaps: list[float] = []
        stop = threading.Event()

        def tick() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                time.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        ticker = threading.Thread(target=tick)
        ticker.start()
        time.sleep(0.2)
        quiet = max(gaps)
        took: list[float] = []
        for n in range(backups):
            began = time.perf_counter()
            store.checkpoint(Path(scratch) / f"backup-{n}")
            took.append(time.perf_counter() - began)
            store.write([(CF_PATTERNS, f"after-{n}".encode(), value)])
        time.sleep(0.1)
        stop.set()
        ticker.join()
        store.close()
    return {
        "keys": keys,
        "first_backup_ms": round(took[0] * 1000, 1),
        "later_backups_ms": round(max(took[1:]) * 1000, 1),
        "longest_pause_ms": round(max(gaps) * 1000, 1),
        "longest_gap_without_backup_ms": round(quiet * 1000, 1),
    }


if __name__ == "__main__":
    for count in [int(a) for a in sys.argv[1:]] or [10_000, 200_000]:
        print(measure(count), flush=True)
