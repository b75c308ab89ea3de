"""The per-tenant success and usage ceilings Suggest bounds unread candidates with: never below
any stored pattern's counts, whether learned from writes or from the store at first use."""

from __future__ import annotations

import random
from pathlib import Path

from pml_server.capture.records import PatternCounters
from pml_server.storage import Store
from pml_server.storage.repo import Repository


def _stored_maxima(repo: Repository, tenant: str, ids: list[str]) -> tuple[int, int]:
    found = [repo.counters(tenant, i) for i in ids]
    present = [c for c in found if c is not None]
    return max((c.success for c in present), default=0), max((c.usage for c in present), default=0)


def test_ceilings_cover_every_write_and_survive_reopening(tmp_path: Path) -> None:
    rng = random.Random(5)
    store = Store(tmp_path, "fast")
    repo = Repository(store)
    ids = {t: [f"pat_{t}_{i}" for i in range(20)] for t in ("a", "b")}
    repo.store.write([repo.put_counters("a", "pat_a_0", PatternCounters(usage=3, success=2))])
    for step in range(300):
        tenant = rng.choice(("a", "b"))
        pattern_id = rng.choice(ids[tenant])
        usage = rng.randrange(0, 50)
        counters = PatternCounters(usage=usage, success=rng.randrange(0, usage + 1))
        store.write([repo.put_counters(tenant, pattern_id, counters)])
        if step % 25 == 0:
            for t in ("a", "b"):
                ceiling = repo.counter_ceilings(t)
                stored = _stored_maxima(repo, t, ids[t])
                assert ceiling[0] >= stored[0]
                assert ceiling[1] >= stored[1]
    final = {t: _stored_maxima(repo, t, ids[t]) for t in ("a", "b")}
    store.close()
    # a new process learns the ceilings from the stored counters alone: exactly the maxima
    reopened = Repository(Store(tmp_path, "fast"))
    assert {t: reopened.counter_ceilings(t) for t in ("a", "b")} == final
    assert reopened.counter_ceilings("nobody") == (0, 0)
    reopened.store.close()


def test_a_write_built_before_the_first_scan_is_not_missed(tmp_path: Path) -> None:
    store = Store(tmp_path, "sync")
    repo = Repository(store)
    op = repo.put_counters("t", "p1", PatternCounters(usage=40, success=39))  # built, not written
    assert repo.counter_ceilings("t") == (39, 40)  # the scan finds nothing stored yet
    store.write([op])
    assert repo.counter_ceilings("t") == (39, 40)
    store.close()
