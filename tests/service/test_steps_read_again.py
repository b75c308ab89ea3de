"""Steps stored without them or under other `STEPS_RULES` were read from the pattern's code at
every first view after a start: opening the store stores them again, once per rules, each
under the pattern's lock (docs/normalization.md, Steps; docs/storage.md, Migrations and the
model id check), on the embedded RocksDB store and on the shared PostgreSQL store; a pass
interrupted by a failure resumes at the next open."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pml_server.capture.steps import STEPS_RULES, stored_steps, stored_under_today
from pml_server.domain.errors import UnavailableError
from pml_server.service import Engine, _older_builds
from pml_server.storage.keys import CF_META
from pml_server.storage.repo._meta import _STEPS_READ_KEY
from tests.support import code_for, make_record, open_engine

T = "t"
TOOLS = ["read_file", "list_dir", "write_file"]


def _plant_older_steps(engine: Engine, pattern_ids: list[str]) -> None:
    """Store the patterns' steps as older builds left them (none, or under the rules
    before), and no marker."""
    repo = engine._state.repo
    ops: list[Any] = [(CF_META, _STEPS_READ_KEY + str(STEPS_RULES).encode(), None)]
    for n, pattern_id in enumerate(pattern_ids):
        record = repo.patterns.pattern(T, pattern_id)
        assert record is not None
        older = "" if n % 2 == 0 else f"[{STEPS_RULES - 1},[]]"
        ops.append(repo.patterns.put_pattern(T, replace(record, steps_json=older)))
    engine._state.store.write(ops)


def _stored(engine: Engine, pattern_id: str) -> str:
    record = engine._state.repo.patterns.pattern(T, pattern_id)
    assert record is not None
    return record.steps_json


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_steps_stored_under_other_rules_are_stored_again_once_at_open(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides: dict[str, Any] = {"retention_in_background": False}
    if store == "postgresql":
        overrides["store"] = request.getfixturevalue("postgres_dsn")
    engine = open_engine(tmp_path / "e", **overrides)
    try:
        assert engine.admin.wait_steps_read(60) == 0  # a new store: nothing to write
        ids = [
            engine.record(
                T, make_record(f"e{n}", f"intent {n}", [tool], code=code_for([tool], "a.json"))
            ).pattern_id
            for n, tool in enumerate(TOOLS)
        ]
        today = {i: _stored(engine, i) for i in ids}
        assert all(stored_under_today(s) for s in today.values())
        _plant_older_steps(engine, ids)
    finally:
        engine.close()

    # A failure after the first rewrite: the pass stops, no marker is written.
    commit = _older_builds.commit
    commits = [0]

    def failing_after_one(*args: Any) -> Any:
        commits[0] += 1
        if commits[0] > 1:
            raise UnavailableError("the store went away")
        return commit(*args)

    monkeypatch.setattr(_older_builds, "commit", failing_after_one)
    engine = open_engine(tmp_path / "e", **overrides)
    try:
        with pytest.raises(UnavailableError):
            engine.admin.wait_steps_read(60)
        assert not engine._state.repo.meta.steps_read(STEPS_RULES)
        assert sum(stored_under_today(_stored(engine, i)) for i in ids) == 1
    finally:
        engine.close()
    monkeypatch.setattr(_older_builds, "commit", commit)

    engine = open_engine(tmp_path / "e", **overrides)  # resumes: the two left
    try:
        assert engine.admin.wait_steps_read(60) == 2
        assert engine._state.repo.meta.steps_read(STEPS_RULES)
        for pattern_id in ids:
            stored = _stored(engine, pattern_id)
            assert stored == today[pattern_id]
            record = engine._state.repo.patterns.pattern(T, pattern_id)
            assert record is not None
            assert stored == stored_steps(record.original_code, record.language)
        assert engine.admin.audit_log(T) == []  # what a pattern shows did not change
    finally:
        engine.close()

    engine = open_engine(tmp_path / "e", **overrides)  # the marker: nothing runs again
    try:
        assert engine.admin.wait_steps_read(60) == 0
    finally:
        engine.close()
