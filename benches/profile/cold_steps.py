"""What showing a pattern's steps costs the first time a server shows it (after a restart, or
past the steps cache), with the steps stored when the pattern was made against read again from
its code (docs/normalization.md, Steps): N patterns of a long chain of tool calls, each read
once by GetPattern on a reopened store, then the same with the stored steps removed.

    python -m benches.profile.cold_steps 20 4000
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from pml_server.capture import steps
from pml_server.service import Engine
from testing.engine import make_record, open_engine

T = "t"


def _chain(calls: int, salt: int) -> str:
    lines = [f"const v0 = await mcp.tool{salt}_0({{}});"]
    lines += [
        f"const v{i} = await mcp.tool{salt}_{i % 50}({{a: v{i - 1}.items[0].id}});"
        for i in range(1, calls)
    ]
    return "\n".join(lines)


def _cold_reads(where: Path, ids: list[str]) -> list[float]:
    engine = open_engine(where)  # a new process's caches are empty: a fresh engine's are too
    seconds = []
    for pattern_id in ids:
        start = time.perf_counter()
        engine.get_pattern(T, pattern_id)
        seconds.append(time.perf_counter() - start)
    engine.close()
    return seconds


def _unstore(engine: Engine, ids: list[str]) -> None:
    repo = engine._state.repo
    ops = []
    for pattern_id in ids:
        record = repo.patterns.pattern(T, pattern_id)
        assert record is not None
        ops.append(repo.patterns.put_pattern(T, replace(record, steps_json="")))
    engine._state.store.write(ops)


def main(n: int, calls: int) -> None:
    where = Path(tempfile.mkdtemp()) / "e"
    engine = open_engine(where)
    ids = [
        engine.record(
            T, make_record(f"r{k}", f"chain {k}", [f"tool{k}_0"], code=_chain(calls, k))
        ).pattern_id
        for k in range(n)
    ]
    size = len(_chain(calls, 0))
    engine.close()
    steps._cache.clear()  # what a restart empties
    stored = _cold_reads(where, ids)
    steps._cache.clear()
    engine = open_engine(where)
    _unstore(engine, ids)
    engine.close()
    read = _cold_reads(where, ids)
    print(f"{n} patterns of {calls} calls ({size} bytes of code), a first GetPattern each:")
    print(f"  steps stored: median {statistics.median(stored) * 1e3:.2f} ms")
    print(f"  steps read from the code: median {statistics.median(read) * 1e3:.2f} ms")


if __name__ == "__main__":
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 20,
        int(sys.argv[2]) if len(sys.argv) > 2 else 4000,
    )
