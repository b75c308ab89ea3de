"""What the open's renaming of an older build's placeholder names costs (docs/storage.md,
Migrations: Placeholder names) over N stored patterns on RocksDB: with none to rewrite, with all
N rewritten, and once the marker is written. Each figure is the time from ready to done.

    python -m benches.profile.placeholder_rename 10000
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from benches.profile._open_passes import reopen_and_wait
from pml_server.service import Engine
from pml_server.storage.keys import CF_META
from pml_server.storage.repo._meta import _PLACEHOLDERS_KEY
from pml_server.storage.seam import Op
from testing.engine import make_record, open_engine

T = "t"
BATCH = 64  # record_many's bound


def _reopen(engine: Engine, where: Path) -> tuple[Engine, int, float]:
    return reopen_and_wait(engine, where, lambda e: e.admin.wait_placeholders_renamed(3600))


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
                code=f'const r = await mcp.tool_{i}({{"https://admin:pw{i}x@db": 1, path: "a"}});',
            )
            for i in range(start, min(n, start + BATCH))
        ]
        ids += [r.pattern_id for r in engine.record_many(T, batch) if not isinstance(r, Exception)]
    engine._state.store.write([(CF_META, _PLACEHOLDERS_KEY, None)])
    engine, renamed, seconds = _reopen(engine, where)
    print(f"{n} patterns, none stale: {renamed} rewritten in {seconds:.2f} s")
    repo = engine._state.repo
    ops: list[Op] = [(CF_META, _PLACEHOLDERS_KEY, None)]
    for pattern_id in ids:  # as an older build named them
        p = repo.patterns.pattern(T, pattern_id)
        assert p is not None
        new = p.params[0].name
        old = new.replace("REDACTED", "ADMIN_PWX")
        ops.append(
            repo.patterns.put_pattern(
                T,
                replace(
                    p,
                    template=p.template.replace(new, old),
                    params=(replace(p.params[0], name=old), *p.params[1:]),
                    parameter_schema_json=p.parameter_schema_json.replace(new, old),
                ),
            )
        )
    engine._state.store.write(ops)
    engine, renamed, seconds = _reopen(engine, where)
    print(f"{n} patterns, all stale: {renamed} rewritten in {seconds:.2f} s")
    engine, renamed, seconds = _reopen(engine, where)
    print(f"{n} patterns, marked: {renamed} rewritten in {seconds:.5f} s")
    engine.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)
