"""What the open's re-keying of an older build's patterns of tools named in an argument costs
(docs/storage.md, Migrations: Tool names read from arguments) over N stored patterns on
RocksDB: the open, from the call to ready, with the marker written (nothing runs), with no
marker and none to move, and with all N to move.

    python -m benches.profile.tool_name_rekey 10000
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from pml_server.domain.records import ParamSpec
from pml_server.service import Engine
from pml_server.storage.keys import CF_META
from pml_server.storage.repo._meta import _TOOL_NAMES_KEY
from pml_server.storage.seam import Op
from testing.engine import make_record, open_engine

T = "t"
BATCH = 64  # record_many's bound


def _reopen(engine: Engine, where: Path) -> tuple[Engine, float]:
    engine.close()
    started = time.perf_counter()
    engine = open_engine(where)  # returns once ready: the re-keying runs before
    return engine, time.perf_counter() - started


def _moved(engine: Engine) -> int:
    return sum(e["action"] == "rekeyed" for e in engine.admin.audit_log(T))


def main(n: int) -> None:
    where = Path(tempfile.mkdtemp()) / "e"
    engine = open_engine(where)
    ids: list[str] = []
    for start in range(0, n, BATCH):
        batch = [
            make_record(
                f"r{i}",
                f"query number {i} of the orders",
                [f"tool_{i}"],
                code=f'const r = await client.callTool({{name: "tool_{i}", arguments: {{n: 1}}}});',
            )
            for i in range(start, min(n, start + BATCH))
        ]
        ids += [r.pattern_id for r in engine.record_many(T, batch) if not isinstance(r, Exception)]
    engine, seconds = _reopen(engine, where)
    print(f"{n} patterns, marked: open in {seconds:.2f} s")
    engine._state.store.write([(CF_META, _TOOL_NAMES_KEY, None)])
    engine, seconds = _reopen(engine, where)
    print(f"{n} patterns, none to move: open in {seconds:.2f} s ({_moved(engine)} moved)")
    repo = engine._state.repo
    ops: list[Op] = [(CF_META, _TOOL_NAMES_KEY, None)]
    for i, pattern_id in enumerate(ids):  # as an older build keyed them
        p = repo.patterns.pattern(T, pattern_id)
        assert p is not None
        old_hash = f"{i:064x}"
        ops += [
            repo.patterns.put_pattern(
                T,
                replace(
                    p,
                    code_hash=old_hash,
                    template=p.template.replace(f'"tool_{i}"', "$NAME"),
                    params=(ParamSpec("$NAME", "string", False), *p.params),
                ),
            ),
            repo.patterns.delete_hash(T, p.code_hash),
            repo.patterns.put_hash(T, old_hash, pattern_id),
        ]
    engine._state.store.write(ops)
    engine, seconds = _reopen(engine, where)
    print(f"{n} patterns, all to move: open in {seconds:.2f} s ({_moved(engine)} moved)")
    engine.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
