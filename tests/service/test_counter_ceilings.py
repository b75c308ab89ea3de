"""The per-tenant success and usage ceilings Suggest bounds unread candidates with: never below
any stored pattern's counts, whether learned from writes or from the store at first use."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from pml_server.domain.model import SuggestQuery
from pml_server.domain.records import PatternCounters
from pml_server.storage import Store
from pml_server.storage.keys import CF_COUNTERS
from pml_server.storage.repo import Repository
from tests.support import make_record, open_engine


def _stored_maxima(repo: Repository, tenant: str, ids: list[str]) -> tuple[int, int]:
    found = [repo.patterns.counters(tenant, i) for i in ids]
    present = [c for c in found if c is not None]
    return max((c.success for c in present), default=0), max((c.usage for c in present), default=0)


def test_ceilings_cover_every_write_and_survive_reopening(tmp_path: Path) -> None:
    rng = random.Random(5)
    store = Store(tmp_path, "fast")
    repo = Repository(store)
    ids = {t: [f"pat_{t}_{i}" for i in range(20)] for t in ("a", "b")}
    repo.store.write(
        [repo.patterns.put_counters("a", "pat_a_0", PatternCounters(usage=3, success=2))]
    )
    for step in range(300):
        tenant = rng.choice(("a", "b"))
        pattern_id = rng.choice(ids[tenant])
        usage = rng.randrange(0, 50)
        counters = PatternCounters(usage=usage, success=rng.randrange(0, usage + 1))
        store.write([repo.patterns.put_counters(tenant, pattern_id, counters)])
        if step % 25 == 0:
            for t in ("a", "b"):
                ceiling = repo.patterns.counter_ceilings(t)
                stored = _stored_maxima(repo, t, ids[t])
                assert ceiling[0] >= stored[0]
                assert ceiling[1] >= stored[1]
    final = {t: _stored_maxima(repo, t, ids[t]) for t in ("a", "b")}
    store.close()
    # a new process learns the ceilings from the stored counters alone: exactly the maxima
    reopened = Repository(Store(tmp_path, "fast"))
    assert {t: reopened.patterns.counter_ceilings(t) for t in ("a", "b")} == final
    assert reopened.patterns.counter_ceilings("nobody") == (0, 0)
    reopened.store.close()


def test_a_write_built_before_the_first_scan_is_not_missed(tmp_path: Path) -> None:
    store = Store(tmp_path, "sync")
    repo = Repository(store)
    op = repo.patterns.put_counters(
        "t", "p1", PatternCounters(usage=40, success=39)
    )  # built, not written
    assert repo.patterns.counter_ceilings("t") == (39, 40)  # the scan finds nothing stored yet
    store.write([op])
    assert repo.patterns.counter_ceilings("t") == (39, 40)
    store.close()


def test_an_opened_engine_has_read_the_ceilings_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counter scan runs while the engine loads, not inside some tenant's first Suggest:
    once ready, Suggest reads no counters row by row."""
    engine = open_engine(tmp_path)
    for i in range(3):
        engine.record("t", make_record(f"r{i}", f"read file {i}", ["read_file", f"tool_{i}"]))
    engine.close()
    reopened = open_engine(tmp_path)
    scanned: list[str] = []
    original = Store.scan

    def tracking_scan(self: Store, cf: str, prefix: bytes, **kwargs: Any) -> Any:
        scanned.append(cf)
        return original(self, cf, prefix, **kwargs)

    monkeypatch.setattr(Store, "scan", tracking_scan)
    result = reopened.suggest("t", SuggestQuery("read file", k=3))
    assert result.suggestions
    assert CF_COUNTERS not in scanned
    reopened.close()
