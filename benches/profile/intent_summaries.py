"""What the open-time summary of an older build's counters costs (docs/capture.md, The intents a
view shows; service/_older_builds.py `summarize_intents`) over N stored patterns on RocksDB,
each of a few intents: with every counters row as an older build wrote it (no intent count, no
shown intents), and once the marker is written. Each figure is the time from the open's return
to the pass's end (it runs while the server serves).

    python -m benches.profile.intent_summaries 10000
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benches.profile._open_passes import reopen_and_wait
from pml_server.service import Engine
from pml_server.storage.keys import CF_COUNTERS, CF_META, tenant_key
from pml_server.storage.repo._meta import _INTENTS_SUMMARIZED_KEY
from pml_server.storage.seam import Op
from testing.engine import make_record, open_engine

T = "t"
BATCH = 64  # record_many's bound
INTENTS = 3  # a pattern's distinct intents


def _reopen(engine: Engine, where: Path) -> tuple[Engine, int, float]:
    return reopen_and_wait(engine, where, lambda e: e.admin.wait_intents_summarized(3600))


def main(n: int) -> None:
    where = Path(tempfile.mkdtemp()) / "e"
    engine = open_engine(where)
    ids: set[str] = set()
    for start in range(0, n * INTENTS, BATCH):
        batch = [
            make_record(
                f"r{i}",
                f"query {i % n} of the orders, asked the {i // n}th way w{i}",
                [f"tool_{i % n}"],
            )
            for i in range(start, min(n * INTENTS, start + BATCH))
        ]
        ids |= {r.pattern_id for r in engine.record_many(T, batch) if not isinstance(r, Exception)}
    repo = engine._state.repo
    ops: list[Op] = [(CF_META, _INTENTS_SUMMARIZED_KEY, None)]
    for pattern_id in sorted(ids):  # as an older build wrote them
        counters = repo.patterns.counters(T, pattern_id)
        assert counters is not None
        raw = counters.to_json()
        older = raw.replace(b',"intent_count":', b',"x":').split(b',"x":')[0] + b"}"
        ops.append((CF_COUNTERS, tenant_key(T, pattern_id), older))
    engine._state.store.write(ops)
    engine, summarized, seconds = _reopen(engine, where)
    print(f"{len(ids)} patterns, all older: {summarized} summarized in {seconds:.2f} s")
    engine, summarized, seconds = _reopen(engine, where)
    print(f"{len(ids)} patterns, marked: {summarized} summarized in {seconds:.5f} s")
    engine.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
