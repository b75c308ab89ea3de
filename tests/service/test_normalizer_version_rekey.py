"""Every `code_hash` holds the normalizer version (docs/normalization.md, Versioning and
vectors). The builds before 2026-12-01 hashed under version 1, so on a store they wrote every
pattern is keyed by a hash today's normalizer never gives, whatever its code: the first run of
the same code after an upgrade made a second pattern beside it (the same template, its counts
split), and each later run counted there. Opening such a store moves every pattern to today's
hash once, not only those whose code holds the words of the rules read since; and a store a
build of the earlier pass already served, holding such a second pattern, merges it into the
older one. On the embedded RocksDB store and on the shared PostgreSQL store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pml_server.domain.model import ExecutionRecord, PageRequest
from pml_server.service import Engine
from pml_server.storage.keys import CF_META
from pml_server.storage.repo._meta import _TOOL_NAMES_KEY as TOOL_NAMES_KEY
from tests.support import make_record, open_engine

T = "t"
# As the build of 2026-11-29 (normalizer version 1) stored it: the code holds none of the words
# the re-key looked for (`tool`, `call`, ...), and its hash, that build's, of this very code.
CODE = 'const d = await mcp.read_file({path: "a.json"}); return await mcp.parse_json(d)'
V1_HASH = "sha256:b68ef4f1af4302b21bc7163475aad88b3f9de459350ef00ca5edfdf2cf542bb2"
TOOLS = ["read_file", "parse_json"]


def _run(request_id: str, path: str = "a.json") -> ExecutionRecord:
    record = make_record(request_id, "Read the JSON file", TOOLS, code=CODE)
    return replace(record, language="typescript", code=CODE.replace("a.json", path))


def _plant_version_1(engine: Engine, pattern_id: str) -> str:
    """Key the stored pattern by its version 1 hash, no re-key marker; today's hash."""
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    assert pattern is not None
    assert pattern.code_hash != V1_HASH
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, replace(pattern, code_hash=V1_HASH)),
            repo.patterns.delete_hash(T, pattern.code_hash),
            repo.patterns.put_hash(T, V1_HASH, pattern_id),
            (CF_META, TOOL_NAMES_KEY, None),
        ]
    )
    return pattern.code_hash


@pytest.fixture(params=["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The engine's settings for each store: the embedded one, or a real PostgreSQL."""
    if request.param == "postgresql":
        return {"store": request.getfixturevalue("postgres_dsn")}
    return {}


def _open(tmp_path: Path, overrides: dict[str, Any]) -> Engine:
    return open_engine(tmp_path / "e", **overrides)


def test_a_version_1_store_moves_every_pattern_to_todays_hash(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    engine = _open(tmp_path, overrides)
    first = engine.record(T, _run("r1"))
    today = _plant_version_1(engine, first.pattern_id)
    engine.close()

    engine = _open(tmp_path, overrides)
    try:
        repo = engine._state.repo
        assert repo.patterns.pattern_id_for_hash(T, today) == first.pattern_id
        assert repo.patterns.pattern_id_for_hash(T, V1_HASH) is None
        moved = [e["pattern_id"] for e in engine.admin.audit_log(T) if e["action"] == "rekeyed"]
        assert moved == [first.pattern_id]
        again = engine.record(T, _run("r2", "b.json"))
        assert (again.pattern_id, again.new_pattern) == (first.pattern_id, False)
        assert engine.get_pattern(T, first.pattern_id).usage_count == 2
        assert len(engine.list_patterns(T, PageRequest()).items) == 1
    finally:
        engine.close()


def test_a_second_pattern_made_after_an_earlier_upgrade_merges_into_the_first(
    tmp_path: Path, overrides: dict[str, Any]
) -> None:
    engine = _open(tmp_path, overrides)
    first = engine.record(T, _run("r1"))
    today = _plant_version_1(engine, first.pattern_id)
    # then served by a build whose re-key read only the rules' words: the pattern left under
    # its version 1 hash, the store marked, and the next runs made a second pattern
    second = engine.record(T, _run("r2", "b.json"))
    assert (second.new_pattern, second.pattern_id != first.pattern_id) == (True, True)
    assert engine.record(T, _run("r3", "c.json")).pattern_id == second.pattern_id
    engine._state.store.write([(CF_META, b"tool_names_read/3", b"1")])
    engine.close()

    engine = _open(tmp_path, overrides)
    try:
        repo = engine._state.repo
        survivor = repo.patterns.pattern_id_for_hash(T, today)
        assert survivor in (first.pattern_id, second.pattern_id)
        assert repo.patterns.pattern_id_for_hash(T, V1_HASH) is None
        assert len(engine.list_patterns(T, PageRequest()).items) == 1
        assert engine.get_pattern(T, survivor).usage_count == 3
        assert engine.record(T, _run("r4", "d.json")).pattern_id == survivor
    finally:
        engine.close()
