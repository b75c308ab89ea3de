"""What the open's redacting of an older build's free texts costs (docs/storage.md,
Migrations: Free texts redacted again) over N stored intents (one pattern each) on RocksDB:
with none to rewrite, with all N rewritten (each intent holding a password in prose, which
an older build kept), and once the marker is written. Each figure is the time from ready to
done, the files' rewrite included.

    python -m benches.profile.free_text_redaction 10000
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from benches.profile._open_passes import reopen_and_wait
from pml_server.domain.records import decode_intent
from pml_server.service import Engine
from pml_server.service._free_text import MARKER
from pml_server.storage.keys import CF_INTENTS, CF_META
from pml_server.storage.seam import Op
from testing.engine import make_record, open_engine

T = "t"
BATCH = 64  # record_many's bound


def _reopen(engine: Engine, where: Path) -> tuple[Engine, int, float]:
    return reopen_and_wait(engine, where, lambda e: e.admin.wait_free_text_redacted(3600))


def main(n: int) -> None:
    where = Path(tempfile.mkdtemp()) / "e"
    engine = open_engine(where)
    for start in range(0, n, BATCH):
        batch = [
            make_record(f"r{i}", f"log in to shop number {i}", [f"tool_{i}"])
            for i in range(start, min(n, start + BATCH))
        ]
        engine.record_many(T, batch)
    engine._state.store.write([(CF_META, MARKER, None)])
    engine, redacted, seconds = _reopen(engine, where)
    print(f"{n} intents, none to redact: {redacted} rewritten in {seconds:.2f} s")
    repo = engine._state.repo
    ops: list[Op] = [(CF_META, MARKER, None)]
    for n_row, (_, raw) in enumerate(engine._state.store.scan(CF_INTENTS, b"")):
        intent = decode_intent(raw)  # as an older build stored it
        text = f"{intent.text}, my password is Pw{n_row}x9"
        ops.append(repo.intents.put_intent(T, replace(intent, text=text)))
    engine._state.store.write(ops)
    engine, redacted, seconds = _reopen(engine, where)
    print(f"{n} intents, all to redact: {redacted} rewritten in {seconds:.2f} s")
    engine, redacted, seconds = _reopen(engine, where)
    print(f"{n} intents, marked: {redacted} rewritten in {seconds:.5f} s")
    engine.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
