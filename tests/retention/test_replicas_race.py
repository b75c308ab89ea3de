"""Retention applied by two replicas over one PostgreSQL database at once, while both capture
successful runs of the patterns it removes: a removal is decided again on the pattern's
counters under its lock, which is an advisory lock of the database, so a pattern is removed
only if the successes acknowledged into it so far still leave it failing, and only once
(docs/ranking.md, Retention)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from pml_server.domain.model import CaptureOutcome
from pml_server.retention import RetentionConfig
from pml_server.retention.policy import removal_holds
from pml_server.service import Engine
from tests.support import Clock, make_record, open_engine

pytestmark = pytest.mark.postgres

PATTERNS = 24
RETENTION = RetentionConfig(auto_remove=True)


@pytest.fixture
def two(postgres_dsn: str, tmp_path: Path) -> Iterator[tuple[Engine, Engine]]:
    clock = Clock()
    a = open_engine(tmp_path / "a", clock, store=postgres_dsn, retention=RETENTION)
    b = open_engine(tmp_path / "b", clock, store=postgres_dsn, retention=RETENTION)
    yield a, b
    a.close()
    b.close()


def _tools(n: int) -> list[str]:
    return [f"upload{n}"]


def test_two_replicas_applying_retention_under_captures_never_drop_an_acknowledged_success(
    two: tuple[Engine, Engine],
) -> None:
    a, b = two
    ids = {}
    for n in range(PATTERNS):
        ids[n] = a.record("t", make_record(f"s{n}", f"Flaky upload {n}", _tools(n))).pattern_id
        for i in range(11):
            failed = make_record(f"f{n}-{i}", f"Flaky upload {n}", _tools(n), failed={f"upload{n}"})
            a.record("t", failed)
    dry = {e.pattern_id for e in b.run_retention("t", apply=False).entries}
    assert dry == set(ids.values())

    counted: Counter[str] = Counter()  # successes acknowledged into each pattern id
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def capture(engine: Engine, name: str) -> None:
        try:
            start.wait()
            for round_ in range(3):
                for n in range(PATTERNS):
                    record = make_record(f"{name}-{round_}-{n}", f"Flaky upload {n}", _tools(n))
                    result = engine.record("t", record)
                    if result.outcome is CaptureOutcome.COUNTED:
                        with lock:
                            counted[result.pattern_id] += 1
        except BaseException as err:
            errors.append(err)

    reports = []

    def retain(engine: Engine) -> None:
        try:
            start.wait()
            reports.append(engine.run_retention("t", apply=True))
        except BaseException as err:
            errors.append(err)

    threads = [
        threading.Thread(target=capture, args=(a, "ca")),
        threading.Thread(target=capture, args=(b, "cb")),
        threading.Thread(target=retain, args=(a,)),
        threading.Thread(target=retain, args=(b,)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert errors == []
    deleted = Counter(
        e["pattern_id"]
        for e in a.admin.audit_log("t")
        if e.get("action") == "deleted" and e.get("reason") == "retention"
    )
    assert all(times == 1 for times in deleted.values()), deleted
    for pattern_id in deleted:
        # its 1 success and 11 failures, and the successes acknowledged into it before the
        # removal: the removal held on those counters, or it was acknowledged then dropped
        assert removal_holds(1 + counted[pattern_id], 11, RETENTION), (
            pattern_id,
            counted[pattern_id],
        )
    removed = {
        e.pattern_id for report in reports for e in report.entries if e.action.name == "REMOVED"
    }
    assert removed == set(deleted)
    for pattern_id in set(ids.values()) - set(deleted):
        assert a.get_pattern("t", pattern_id).success_count == 1 + counted[pattern_id]
