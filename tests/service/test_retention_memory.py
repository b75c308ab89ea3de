"""What a retention run holds while the policy evaluates a tenant: a light row of each pattern
(its id, capability and the counters the policy reads), not its record with its code
(docs/ranking.md, Retention). On the embedded RocksDB store and on the shared PostgreSQL store."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pml_server.domain.model import RetentionAction
from pml_server.service import _curation
from pml_server.storage.repo._patterns import RETENTION_PAGE
from testing.engine import Clock, make_record, open_engine
from testing.memory import memory_held

PATTERNS = 200
CODE_BYTES = 64 * 1024


def _code(n: int) -> str:
    # a distinct pattern of CODE_BYTES of code each
    call = f'const r = await mcp.tool{n}({{path: "a.json"}});\n'
    return call + "// " + "x" * (CODE_BYTES - len(call) - 4) + "\n"


@pytest.fixture(params=["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_of(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "postgresql":
        yield {"store": request.getfixturevalue("postgres_dsn")}
    else:
        yield {}


def test_retention_holds_a_light_row_of_each_pattern_not_its_code(
    tmp_path: Path, store_of: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 patterns of 64 KiB of code (13 MB): what is held when the policy starts, over what
    was held before the run, stays under 2 KiB a pattern, and the run never holds much more
    than a page of records. Before: every record was decoded and a view of each held, code and
    all (26 MB with the template, at evaluation and at the peak)."""
    clock = Clock()
    engine = open_engine(tmp_path, clock, **store_of)
    try:
        ids = [
            engine.record("t", make_record(f"r{n}", f"run tool {n}", [f"tool{n}"], code=_code(n)))
            for n in range(PATTERNS)
        ]
        assert len({c.pattern_id for c in ids}) == PATTERNS
        clock.advance_days(120)  # every pattern is stale: each one is in the report
        evaluate = _curation.evaluate
        at_evaluation: list[int] = []

        def measured(*args: Any) -> Any:
            at_evaluation.append(tracemalloc.get_traced_memory()[0])
            return evaluate(*args)

        monkeypatch.setattr(_curation, "evaluate", measured)
        with memory_held():
            before = tracemalloc.get_traced_memory()[0]
            report = engine.run_retention("t", apply=False)
            peak = tracemalloc.get_traced_memory()[1] - before
        held = at_evaluation[0] - before
        assert held < PATTERNS * 2048, f"{held} bytes held for {PATTERNS} patterns"
        # a page of records (template and original code each) at a time, which a store's read
        # may copy once (PostgreSQL's rows into bytes)
        page = RETENTION_PAGE * 2 * CODE_BYTES
        assert peak < 2 * page + 2**20, f"{peak} bytes at the peak; a page holds {page}"
        stale = [e for e in report.entries if e.action is RetentionAction.STALE]
        expected = sorted((c.capability_id, c.pattern_id) for c in ids)
        by_id = {c.pattern_id: c.capability_id for c in ids}
        assert [(by_id[e.pattern_id], e.pattern_id) for e in stale] == expected
    finally:
        engine.close()
