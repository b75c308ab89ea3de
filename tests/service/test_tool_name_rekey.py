"""An older build read a tool named in an argument (`client.callTool({name: "get_weather",
...})`, `session.call_tool("get_weather", ...)`) as a parameter, so runs of two tools shared a
pattern (docs/normalization.md, Tool calls). Opening such a store moves every such pattern to
today's hash once, before the server is ready, so that the next run of its code finds it and a
run of another tool starts its own pattern; on the embedded RocksDB store and on the shared
PostgreSQL store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pml_server.domain import json_form
from pml_server.domain.model import ExecutionRecord, PageRequest, SuggestQuery
from pml_server.domain.records import ParamSpec
from pml_server.service import Engine
from pml_server.storage import Store
from pml_server.storage.keys import CF_FAILURES, CF_META, tenant_prefix
from pml_server.storage.repo._meta import _TOOL_NAMES_KEY as TOOL_NAMES_KEY
from tests.support import make_record, open_engine

T = "t"
CODE = 'const r = await client.callTool({name: "get_weather", arguments: {city: "Paris"}});'
OTHER = 'const r = await client.callTool({name: "get_news", arguments: {city: "Paris"}});'
INTENT = "what is the weather like in Paris today"
OLD_HASH = "0" * 64  # what the older build keyed the pattern by
OLD_TEMPLATE = "const r = await client.callTool({name: $NAME, arguments: {city: $CITY}});"


def _plant_old_build(engine: Engine, pattern_id: str) -> str:
    """Rewrite the stored pattern as the older build wrote it: keyed by another hash, with the
    tool's name a parameter (and no marker). Returns today's hash."""
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    counters = repo.patterns.counters(T, pattern_id)
    assert pattern is not None
    assert counters is not None
    assert pattern.template == CODE.replace('"Paris"', "$CITY")  # today: the name is code
    old = replace(
        pattern,
        code_hash=OLD_HASH,
        template=OLD_TEMPLATE,
        params=(ParamSpec("$NAME", "string", False), *pattern.params),
    )
    recent = {"$NAME": ['"get_weather"'], **counters.recent_values}
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            repo.patterns.put_counters(T, pattern_id, replace(counters, recent_values=recent)),
            repo.patterns.delete_hash(T, pattern.code_hash),
            repo.patterns.put_hash(T, OLD_HASH, pattern_id),
            (CF_META, TOOL_NAMES_KEY, None),
        ]
    )
    return pattern.code_hash


def _rekeyed(engine: Engine) -> list[str]:
    return [e["pattern_id"] for e in engine.admin.audit_log(T) if e["action"] == "rekeyed"]


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_an_older_builds_patterns_of_named_tools_move_to_todays_hash_once(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dsn = request.getfixturevalue("postgres_dsn") if store == "postgresql" else None
    overrides = {"store": dsn} if dsn else {}
    engine = open_engine(tmp_path / "e", **overrides)
    first = engine.record(T, make_record("r1", INTENT, ["get_weather"], code=CODE))
    assert first.new_pattern
    other = engine.record(T, make_record("r2", "latest news", ["get_news"], code=OTHER))
    assert other.pattern_id != first.pattern_id  # today: two tools, two patterns
    today = _plant_old_build(engine, first.pattern_id)
    assert engine._state.repo.patterns.pattern_id_for_hash(T, today) is None
    engine.close()

    engine = open_engine(tmp_path / "e", **overrides)
    try:
        assert _rekeyed(engine) == [first.pattern_id]  # the other pattern was already today's
        view = engine.get_pattern(T, first.pattern_id)
        assert view.code_hash == today
        assert view.template == OLD_TEMPLATE.replace("$NAME", '"get_weather"')
        assert [p.name for p in view.params] == ["$CITY"]
        assert [s.tool for s in view.steps] == ["get_weather"]
        repo = engine._state.repo
        assert repo.patterns.pattern_id_for_hash(T, OLD_HASH) is None
        counters = repo.patterns.counters(T, first.pattern_id)
        assert counters is not None
        assert "$NAME" not in counters.recent_values
        again = engine.record(T, make_record("r3", INTENT, ["get_weather"], code=CODE))
        assert (again.pattern_id, again.new_pattern) == (first.pattern_id, False)
        found = engine.suggest(T, SuggestQuery(intent=INTENT))
        assert found.suggestions[0].pattern.id == first.pattern_id
    finally:
        engine.close()

    engine = open_engine(tmp_path / "e", **overrides)  # the marker: nothing runs again
    try:
        assert engine._state.repo.meta.tool_names_read()
        assert _rekeyed(engine) == [first.pattern_id]
    finally:
        engine.close()


FSTRING_A = 'data = read_file(f"ledger_a.json")'
FSTRING_B = 'data = read_file(f"ledger_b.json")'
LEDGER = "read the ledger file"
OLD_LEDGER = "load the old ledger"


def _run(request_id: str, intent: str, code: str, failed: bool = False) -> ExecutionRecord:
    record = make_record(
        request_id, intent, ["read_file"], code=code, failed={"read_file"} if failed else None
    )
    return replace(record, language="python")


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_pattern_an_older_build_duplicated_merges_into_todays(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """docs/storage.md, Migrations: an older build read an f-string without a field as code, so
    each value was a pattern of its own. Today both values hash alike: the open moves the first
    to today's hash, and the second, finding it held, merges into it (it was left apart with
    its runs, and the next run of its code counted in the other). Counts are summed, the
    intents are the union of both (the same text's hits added), the duplicate leaves its
    capability, and its hash row goes."""
    dsn = request.getfixturevalue("postgres_dsn") if store == "postgresql" else None
    overrides = {"store": dsn} if dsn else {}
    engine = open_engine(tmp_path / "e", **overrides)
    older = engine.record(T, _run("r1", OLD_LEDGER, FSTRING_B))
    engine.record(T, _run("r11", LEDGER, FSTRING_B))
    engine.record(T, _run("r12", LEDGER, FSTRING_B, failed=True))
    engine.record(T, _run("r13", LEDGER, FSTRING_B))
    repo = engine._state.repo
    duplicate = repo.patterns.pattern(T, older.pattern_id)
    assert duplicate is not None
    today = duplicate.code_hash
    # the older build's rows: keyed by a hash of its own (its f-string was code), no marker
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, replace(duplicate, code_hash=OLD_HASH)),
            repo.patterns.delete_hash(T, today),
            repo.patterns.put_hash(T, OLD_HASH, duplicate.id),
            (CF_META, TOOL_NAMES_KEY, None),
        ]
    )
    kept = engine.record(T, _run("r2", LEDGER, FSTRING_A))
    assert kept.new_pattern  # today's hash was free: the older build's second pattern
    engine.record(T, _run("r3", LEDGER, FSTRING_A))
    before = engine.stats(T)
    assert before.patterns == 2
    engine.close()

    engine = open_engine(tmp_path / "e", **overrides)
    try:
        repo = engine._state.repo
        assert repo.patterns.pattern(T, duplicate.id) is None
        assert repo.patterns.pattern_id_for_hash(T, OLD_HASH) is None
        assert repo.patterns.pattern_id_for_hash(T, today) == kept.pattern_id
        view = engine.get_pattern(T, kept.pattern_id)
        assert (view.usage_count, view.success_count, view.failure_count) == (6, 5, 1)
        hits = {i.text: i.hit_count for i in repo.intents.of_pattern(T, kept.pattern_id)}
        assert hits == {LEDGER: 4, OLD_LEDGER: 1}
        stats = engine.stats(T)
        assert (stats.patterns, stats.intents, stats.executions) == (1, 2, before.executions)
        assert stats.capabilities == 1
        merged = [e for e in engine.admin.audit_log(T) if e["action"] == "merged"]
        assert [(e["pattern_id"], e["into"]) for e in merged] == [(duplicate.id, kept.pattern_id)]
        again = engine.record(T, _run("r4", OLD_LEDGER, FSTRING_B))
        assert (again.pattern_id, again.new_pattern) == (kept.pattern_id, False)
        found = engine.suggest(T, SuggestQuery(intent=OLD_LEDGER))
        assert [s.pattern.id for s in found.suggestions] == [kept.pattern_id]
    finally:
        engine.close()


def test_a_merged_duplicates_plans_move_to_the_survivors_capability(tmp_path: Path) -> None:
    """docs/storage.md, Migrations: the duplicate was alone in its capability, which goes with
    the merge; the transitions into it and a session's last step on it name the survivor's
    capability instead (they named a capability that no longer existed)."""
    engine = open_engine(tmp_path / "e")
    first = engine.record(T, replace(_run("r0", "open the mailbox", "mail()"), session_id="s1"))
    older = engine.record(T, replace(_run("r1", OLD_LEDGER, FSTRING_B), session_id="s1"))
    repo = engine._state.repo
    duplicate = repo.patterns.pattern(T, older.pattern_id)
    assert duplicate is not None
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, replace(duplicate, code_hash=OLD_HASH)),
            repo.patterns.delete_hash(T, duplicate.code_hash),
            repo.patterns.put_hash(T, OLD_HASH, duplicate.id),
            (CF_META, TOOL_NAMES_KEY, None),
        ]
    )
    kept = engine.record(T, _run("r2", "zq unrelated words xv", FSTRING_A))
    engine.record(T, replace(_run("r3", "open the mailbox", "mail()"), session_id="s2"))
    engine.record(T, replace(_run("r4", "zq unrelated words xv", FSTRING_A), session_id="s2"))
    assert kept.capability_id != older.capability_id  # two capabilities
    sessions = repo.sessions
    assert sessions.transition(T, first.capability_id, older.capability_id) is not None
    engine.close()

    engine = open_engine(tmp_path / "e")
    try:
        sessions = engine._state.repo.sessions
        assert engine._state.repo.capabilities.capability(T, older.capability_id) is None
        assert sessions.transition(T, first.capability_id, older.capability_id) is None
        found = sessions.transition(T, first.capability_id, kept.capability_id)
        assert found is not None
        assert found[0] == 2  # one of each
        step = sessions.session_step(T, "s1")
        assert step is not None
        assert step[0] == kept.capability_id
    finally:
        engine.close()


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_merged_duplicates_answers_and_failures_name_the_survivor(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """docs/storage.md, Migrations: the stored answers of the duplicate's runs and the failure
    log's entries of its runs (and of its code's rejected first tries, under the hash the older
    build gave it) name the survivor after the merge: a resent request id is answered with a
    pattern that exists, and deleting the survivor erases every entry of the runs it holds."""
    dsn = request.getfixturevalue("postgres_dsn") if store == "postgresql" else None
    overrides = {"store": dsn} if dsn else {}
    engine = open_engine(tmp_path / "e", **overrides)
    rejected = engine.record(T, _run("r0", OLD_LEDGER, FSTRING_B, failed=True))
    assert not rejected.pattern_id  # a failed first try stores no pattern
    older = engine.record(T, _run("r1", OLD_LEDGER, FSTRING_B))
    engine.record(T, _run("r12", LEDGER, FSTRING_B, failed=True))
    repo = engine._state.repo
    duplicate = repo.patterns.pattern(T, older.pattern_id)
    assert duplicate is not None
    today = duplicate.code_hash
    # the older build's rows: the pattern and its failure log entries under its own hash
    logged = engine._state.store.scan(CF_FAILURES, tenant_prefix(T))
    assert len(logged) == 2
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, replace(duplicate, code_hash=OLD_HASH)),
            repo.patterns.delete_hash(T, today),
            repo.patterns.put_hash(T, OLD_HASH, duplicate.id),
            (CF_META, TOOL_NAMES_KEY, None),
            *(
                (CF_FAILURES, key, json_form.dumps({**json_form.loads(raw), "code_hash": OLD_HASH}))
                for key, raw in logged
            ),
        ]
    )
    kept = engine.record(T, _run("r2", LEDGER, FSTRING_A))
    assert kept.new_pattern
    engine.close()

    engine = open_engine(tmp_path / "e", **overrides)
    try:
        assert engine._state.repo.patterns.pattern(T, duplicate.id) is None
        for request_id, failed in (("r1", False), ("r12", True)):
            again = engine.record(
                T, _run(request_id, LEDGER if failed else OLD_LEDGER, FSTRING_B, failed)
            )
            assert again.replayed
            assert (again.pattern_id, again.capability_id) == (kept.pattern_id, kept.capability_id)
            assert engine.get_pattern(T, again.pattern_id).id == kept.pattern_id
        failures = engine.list_failures(T, PageRequest()).items
        assert {(f.request_id, f.pattern_id, f.code_hash) for f in failures} == {
            ("r0", "", today),
            ("r12", kept.pattern_id, today),
        }
        engine.delete_pattern(T, kept.pattern_id)
        assert engine.list_failures(T, PageRequest()).items == ()
        again = engine.record(T, _run("r12", LEDGER, FSTRING_B, failed=True))
        assert (again.replayed, again.pattern_id, again.tool_failures) == (True, "", ())
    finally:
        engine.close()


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_rekeyed_patterns_failures_and_rejected_first_tries_move_to_its_new_hash(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """docs/storage.md, Migrations: a pattern moved to today's hash (no other holds it) takes
    the failure log's entries of its code's rejected first tries along, which name no pattern,
    only the hash the older build gave it: a listing names its hash, and deleting the pattern
    erases them (they stayed on disk under the older hash) and the answers stored for them."""
    dsn = request.getfixturevalue("postgres_dsn") if store == "postgresql" else None
    overrides = {"store": dsn} if dsn else {}
    engine = open_engine(tmp_path / "e", **overrides)
    rejected = engine.record(T, _run("r0", OLD_LEDGER, FSTRING_B, failed=True))
    assert not rejected.pattern_id  # a failed first try stores no pattern
    older = engine.record(T, _run("r1", OLD_LEDGER, FSTRING_B))
    engine.record(T, _run("r12", LEDGER, FSTRING_B, failed=True))
    engine.record(T, _run("s0", "zq unrelated words xv", "mail()", failed=True))  # another code
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, older.pattern_id)
    assert pattern is not None
    today = pattern.code_hash
    logged = engine._state.store.scan(CF_FAILURES, tenant_prefix(T))
    assert len(logged) == 3
    ours = [(k, raw) for k, raw in logged if json_form.loads(raw)["code_hash"] == today]
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, replace(pattern, code_hash=OLD_HASH)),
            repo.patterns.delete_hash(T, today),
            repo.patterns.put_hash(T, OLD_HASH, pattern.id),
            (CF_META, TOOL_NAMES_KEY, None),
            *(
                (CF_FAILURES, key, json_form.dumps({**json_form.loads(raw), "code_hash": OLD_HASH}))
                for key, raw in ours
            ),
        ]
    )
    engine.close()

    engine = open_engine(tmp_path / "e", **overrides)
    try:
        assert _rekeyed(engine) == [pattern.id]
        assert engine.get_pattern(T, pattern.id).code_hash == today
        failures = engine.list_failures(T, PageRequest()).items
        assert {(f.request_id, f.pattern_id, f.code_hash) for f in failures} >= {
            ("r0", "", today),
            ("r12", pattern.id, today),
        }
        engine.delete_pattern(T, pattern.id)
        left = engine.list_failures(T, PageRequest()).items
        assert [f.request_id for f in left] == ["s0"]  # another code's stays
        again = engine.record(T, _run("r0", OLD_LEDGER, FSTRING_B, failed=True))
        assert (again.replayed, again.pattern_id, again.tool_failures) == (True, "", ())
    finally:
        engine.close()


def test_the_failure_log_is_read_once_per_tenant_however_many_patterns_move(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, Migrations: the entries each merge moves come from one read of the
    tenant's failure log per pass, not one read per pattern merged (each read is the whole
    log, up to `failure_log_size` entries of up to 20 KiB)."""
    engine = open_engine(tmp_path / "e")
    repo = engine._state.repo
    planted = []
    for i, code in enumerate(['f"ledger_b.json"', 'f"ledger_c.json"', 'f"ledger_d.json"']):
        run = _run(f"r{i}", OLD_LEDGER, f"data = read_file({code})")
        pattern = repo.patterns.pattern(T, engine.record(T, run).pattern_id)
        assert pattern is not None
        engine.record(T, _run(f"f{i}", LEDGER, f"data = read_file({code})", failed=True))
        old = str(i) * 64
        engine._state.store.write(
            [
                repo.patterns.put_pattern(T, replace(pattern, code_hash=old)),
                repo.patterns.delete_hash(T, pattern.code_hash),
                repo.patterns.put_hash(T, old, pattern.id),
            ]
        )
        planted.append(pattern.id)
    kept = engine.record(T, _run("k", LEDGER, FSTRING_A))
    engine._state.store.write([(CF_META, TOOL_NAMES_KEY, None)])
    engine.close()

    reads: list[str] = []
    scan = Store.scan

    def counted(self: Store, cf: str, prefix: bytes, **kwargs: Any) -> Any:
        if cf == CF_FAILURES:
            reads.append(cf)
        return scan(self, cf, prefix, **kwargs)

    monkeypatch.setattr(Store, "scan", counted)
    engine = open_engine(tmp_path / "e")
    try:
        merged = [e["pattern_id"] for e in engine.admin.audit_log(T) if e["action"] == "merged"]
        assert sorted(merged) == sorted(planted)
        assert len(reads) == 1
        failures = engine.list_failures(T, PageRequest()).items
        assert sorted((f.request_id, f.pattern_id) for f in failures) == [
            (f"f{i}", kept.pattern_id) for i in range(3)
        ]
    finally:
        engine.close()
