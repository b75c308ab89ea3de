"""An older build read a Python f-string without a replacement field (`f"a.json"`) as code, and
a password given to a command's short flag (`mysql -pSECRET`, `sshpass -p SECRET`) in shell
code as code too: each run with another value was another pattern, and the password was
stored (docs/normalization.md, Parameters and Secrets). Opening such a store moves each such
pattern to today's hash once, so the next run of its code finds it, and the rename pass takes
the password out of every stored form; on the embedded RocksDB store and on the shared
PostgreSQL store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pml_server.domain.model import ExecutionRecord
from pml_server.service import Engine
from pml_server.storage.keys import CF_META
from pml_server.storage.repo._meta import _PLACEHOLDERS_KEY as PLACEHOLDERS_KEY
from pml_server.storage.repo._meta import _TOOL_NAMES_KEY as TOOL_NAMES_KEY
from tests.service.test_placeholder_names import _stored_rows_holding
from tests.support import make_record, open_engine

T = "t"
SECRET = "S3CRET-HORSE-42"
OLD_HASH = "1" * 64  # what the older build keyed the pattern by

# (language, the code a run records, the same code with another value)
CASES = {
    "fstring": (
        "python",
        "data = await mcp.read_file(path=f'a.json')\n",
        "data = await mcp.read_file(path=f'b.json')\n",
    ),
    "mysql": (
        "bash",
        f"mysql -h db -u root -p{SECRET.lower()} shop < dump.sql",
        "mysql -h db -u root -panother-one shop < dump.sql",
    ),
    "sshpass": (
        "bash",
        f"sshpass -p {SECRET.lower()} ssh deploy@h uptime",
        "sshpass -p another-one ssh deploy@h uptime",
    ),
}


def _record(request_id: str, language: str, code: str) -> ExecutionRecord:
    record = make_record(request_id, "load the file into the database", ["read_file"], code=code)
    return replace(record, language=language)


def _plant_old_build(engine: Engine, pattern_id: str, code: str) -> str:
    """Rewrite the stored pattern as the older build wrote it: keyed by another hash, its code
    as run (no parameter, nothing redacted), no marker of either pass. Returns today's hash."""
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    counters = repo.patterns.counters(T, pattern_id)
    assert pattern is not None
    assert counters is not None
    assert pattern.template != code  # today: the literal is a parameter
    old = replace(pattern, code_hash=OLD_HASH, template=code, original_code=code, params=())
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            repo.patterns.put_counters(T, pattern_id, replace(counters, recent_values={})),
            repo.patterns.delete_hash(T, pattern.code_hash),
            repo.patterns.put_hash(T, OLD_HASH, pattern_id),
            (CF_META, TOOL_NAMES_KEY, None),
            (CF_META, PLACEHOLDERS_KEY, None),
            # the markers of the passes as that build ran them
            (CF_META, b"tool_names_read", b"1"),
            (CF_META, b"placeholders_renamed/3", b"1"),
        ]
    )
    return pattern.code_hash


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_an_older_builds_literal_read_as_code_moves_to_todays_hash_once(
    store: str, case: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    language, code, other = CASES[case]
    dsn = request.getfixturevalue("postgres_dsn") if store == "postgresql" else None
    overrides = {"store": dsn} if dsn else {}
    engine = open_engine(tmp_path / "e", **overrides)
    first = engine.record(T, _record("r1", language, code))
    assert first.new_pattern
    today = _plant_old_build(engine, first.pattern_id, code)
    if case != "fstring":
        assert _stored_rows_holding(engine, SECRET, dsn)  # the older build's store
    engine.close()

    engine = open_engine(tmp_path / "e", **overrides)
    try:
        repo = engine._state.repo
        assert repo.patterns.pattern_id_for_hash(T, today) == first.pattern_id
        assert repo.patterns.pattern_id_for_hash(T, OLD_HASH) is None
        moved = [e["pattern_id"] for e in engine.admin.audit_log(T) if e["action"] == "rekeyed"]
        assert moved == [first.pattern_id]
        engine.admin.wait_placeholders_renamed(60)
        assert _stored_rows_holding(engine, SECRET, dsn) == []
        view = engine.get_pattern(T, first.pattern_id)
        assert view.code_hash == today
        assert [p.name for p in view.params] == ["$PATH" if case == "fstring" else "$PASSWORD"]
        again = engine.record(T, _record("r2", language, other))
        assert (again.pattern_id, again.new_pattern) == (first.pattern_id, False)
    finally:
        engine.close()


# Code the parser rejects (the call is not closed) whose string nests in an interpolation: an
# older build's lexer ended the outer string at the inner one's quote, so the inner literal was
# read as code and hashed with it (docs/normalization.md, Fallback).
NESTED = {
    "template": (
        "javascript",
        'const r = await mcp.get({q: `${ a ? `x` : "y" }`, n: 1}',
        'const r = await mcp.get({q: `${ a ? `x` : "y" }`, n: 2}',
    ),
    "fstring": (
        "python",
        "r = await mcp.get(q=f\"{d['k']} and {d[\"j\"]}\", path='a.json'",
        "r = await mcp.get(q=f\"{d['k']} and {d[\"j\"]}\", path='b.json'",
    ),
}


@pytest.mark.parametrize("renamed_before", [False, True], ids=["as-written", "renamed-before"])
@pytest.mark.parametrize("case", sorted(NESTED))
def test_rejected_code_with_a_string_nested_in_an_interpolation_moves_to_todays_hash(
    case: str, renamed_before: bool, tmp_path: Path
) -> None:
    """The older build's pattern of such code is keyed by another hash; with
    `renamed_before`, an earlier build's rename pass already wrote today's template under that
    hash (its runs then made a second pattern). Opening the store moves it to today's hash, so
    the next run of its code counts on it."""
    language, code, other = NESTED[case]
    engine = open_engine(tmp_path / "e")
    first = engine.record(T, _record("r1", language, code))
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, first.pattern_id)
    assert pattern is not None
    today = pattern.code_hash
    older = pattern if renamed_before else replace(pattern, template=code, params=())
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, replace(older, code_hash=OLD_HASH)),
            repo.patterns.delete_hash(T, today),
            repo.patterns.put_hash(T, OLD_HASH, first.pattern_id),
            (CF_META, TOOL_NAMES_KEY, None),
            (CF_META, b"tool_names_read/2", b"1"),
            *([] if renamed_before else [(CF_META, PLACEHOLDERS_KEY, None)]),
        ]
    )
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        engine.admin.wait_placeholders_renamed(60)
        repo = engine._state.repo
        assert repo.patterns.pattern_id_for_hash(T, today) == first.pattern_id
        assert repo.patterns.pattern_id_for_hash(T, OLD_HASH) is None
        again = engine.record(T, _record("r2", language, other))
        assert (again.pattern_id, again.new_pattern) == (first.pattern_id, False)
        assert engine.get_pattern(T, first.pattern_id).usage_count == 2
    finally:
        engine.close()


def test_an_older_builds_shell_command_string_loses_its_password_at_open(tmp_path: Path) -> None:
    """A string holding a command line with a credential (`subprocess.run("sshpass -p ...")`)
    was a plain parameter: its value was kept in the stored code and the recent values. The
    rename pass makes it secret and drops both (docs/storage.md, Migrations)."""
    code = f'subprocess.run("sshpass -p {SECRET.lower()} ssh deploy@h uptime", shell=True)'
    engine = open_engine(tmp_path / "e")
    first = engine.record(T, _record("r1", "python", code))
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, first.pattern_id)
    counters = repo.patterns.counters(T, first.pattern_id)
    assert pattern is not None
    assert counters is not None
    assert [p.secret for p in pattern.params] == [True]
    old = replace(
        pattern,
        original_code=code,
        params=tuple(replace(p, secret=False) for p in pattern.params),
    )
    recent = {pattern.params[0].name: [f'"{code}"']}
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            repo.patterns.put_counters(
                T, first.pattern_id, replace(counters, recent_values=recent)
            ),
            (CF_META, PLACEHOLDERS_KEY, None),
            (CF_META, b"placeholders_renamed/3", b"1"),
        ]
    )
    assert _stored_rows_holding(engine, SECRET, None)
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        engine.admin.wait_placeholders_renamed(60)
        assert _stored_rows_holding(engine, SECRET, None) == []
        view = engine.get_pattern(T, first.pattern_id)
        assert [p.secret for p in view.params] == [True]
    finally:
        engine.close()
