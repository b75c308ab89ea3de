"""Sessions (docs/ranking.md, Sessions): successful captures of a session teach which
capability follows which, and a Suggest with a context uses it, on the embedded RocksDB store
and on the shared PostgreSQL store (whose counts must stay exact across concurrent captures)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pml_server.domain import json_form
from pml_server.domain.errors import InvalidArgumentError
from pml_server.domain.model import SuggestContext, SuggestQuery
from pml_server.service import Engine, _sessions
from pml_server.storage.keys import CF_SESSIONS, tenant_key
from pml_server.storage.repo._sessions import session_key
from testing.ranking_oracle import path as oracle
from tests.support import Clock, make_record, open_engine

T = "t"
# Three capabilities: listing a folder, reading a file, counting its lines.
STEPS = {
    "ls": ("list the files in the project folder", ["list_dir"]),
    "read": ("show the content of the config file", ["read_file"]),
    "tail": ("show the last lines of the log file", ["tail_file"]),
}

EngineOf = Callable[..., Engine]


@pytest.fixture(params=["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine_of(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EngineOf]:
    opened: list[Engine] = []

    def make(clock: Clock | None = None, **overrides: Any) -> Engine:
        if request.param == "postgresql":
            overrides["store"] = request.getfixturevalue("postgres_dsn")
        engine = open_engine(tmp_path / f"e{len(opened)}", clock, **overrides)
        opened.append(engine)
        return engine

    yield make
    for engine in opened:
        engine.close()


def _step(engine: Engine, session: str, step: str, n: int, *, failed: bool = False) -> str:
    intent, tools = STEPS[step]
    record = make_record(
        f"{session}-{step}-{n}", intent, tools, failed=set(tools) if failed else None
    )
    result = engine.record(T, replace(record, session_id=session))
    return result.capability_id


def _capabilities(engine: Engine) -> dict[str, str]:
    """step -> capability id (each step recorded once outside any session)."""
    return {step: _step(engine, "", step, 0) for step in STEPS}


def test_a_session_counts_each_transition_once(engine_of: EngineOf) -> None:
    engine = engine_of()
    cap = _capabilities(engine)
    for s in range(3):
        for n, step in enumerate(("ls", "read", "tail")):
            _step(engine, f"s{s}", step, n)
    repo = engine._state.repo
    assert repo.sessions.transition(T, cap["ls"], cap["read"])[0] == 3  # type: ignore[index]
    assert repo.sessions.transition(T, cap["read"], cap["tail"])[0] == 3  # type: ignore[index]
    assert repo.sessions.transition(T, cap["ls"], cap["tail"]) is None
    assert repo.sessions.session_step(T, "s2")[0] == cap["tail"]  # type: ignore[index]
    # a replayed request id teaches nothing twice
    _step(engine, "s0", "tail", 2)
    assert repo.sessions.transition(T, cap["read"], cap["tail"])[0] == 3  # type: ignore[index]


def test_only_successful_steps_count(engine_of: EngineOf) -> None:
    engine = engine_of()
    cap = _capabilities(engine)
    _step(engine, "s", "ls", 1)
    _step(engine, "s", "read", 2, failed=True)  # a failed try of a known pattern
    repo = engine._state.repo
    assert repo.sessions.transition(T, cap["ls"], cap["read"]) is None
    assert repo.sessions.session_step(T, "s")[0] == cap["ls"]  # type: ignore[index]
    _step(engine, "s", "read", 3)
    assert repo.sessions.transition(T, cap["ls"], cap["read"])[0] == 1  # type: ignore[index]


def test_an_idle_session_is_over(engine_of: EngineOf) -> None:
    clock = Clock()
    engine = engine_of(clock, session_idle_seconds=60.0)
    cap = _capabilities(engine)
    _step(engine, "s", "ls", 1)
    clock.now_ms += 61_000
    _step(engine, "s", "read", 2)
    repo = engine._state.repo
    assert repo.sessions.transition(T, cap["ls"], cap["read"]) is None
    clock.now_ms += 30_000
    _step(engine, "s", "tail", 3)
    assert repo.sessions.transition(T, cap["read"], cap["tail"])[0] == 1  # type: ignore[index]


def test_a_tenant_keeps_a_bounded_number_of_sessions(engine_of: EngineOf) -> None:
    clock = Clock()
    engine = engine_of(clock, max_sessions=8)
    _capabilities(engine)
    for s in range(40):
        clock.now_ms += 1
        _step(engine, f"s{s:02d}", "ls", 1)
        kept = engine._state.repo.sessions.session_rows(T)
        assert len(kept) <= 8 + 8 // 8
    newest = {key for key, _, _ in engine._state.repo.sessions.session_rows(T)}
    assert session_key(T, "s39") in newest
    assert session_key(T, "s00") not in newest


def test_concurrent_sessions_count_exactly(engine_of: EngineOf) -> None:
    engine = engine_of()
    cap = _capabilities(engine)
    errors: list[BaseException] = []

    def session(s: int) -> None:
        try:
            _step(engine, f"c{s}", "ls", 1)
            _step(engine, f"c{s}", "read", 2)
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=session, args=(s,)) for s in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert engine._state.repo.sessions.transition(T, cap["ls"], cap["read"])[0] == 24  # type: ignore[index]


def test_what_usually_comes_next(engine_of: EngineOf) -> None:
    engine = engine_of()
    cap = _capabilities(engine)
    for s in range(3):
        _step(engine, f"a{s}", "ls", 1)
        _step(engine, f"a{s}", "read", 2)
    _step(engine, "b", "ls", 1)
    _step(engine, "b", "tail", 2)
    _step(engine, "now", "ls", 1)
    for context in (
        SuggestContext(session_id="now"),
        SuggestContext(previous_tools=("list_dir",)),
        SuggestContext(previous_patterns=(engine.get_capability(T, cap["ls"]).best_pattern_id,)),
    ):
        for explain in (False, True):
            query = SuggestQuery("", context=context, explain=explain)
            result = engine.suggest(T, query)
            # ranked in the core as the oracle's Python path ranks it, filtered ones too
            assert result == oracle.rank_suggestions(engine._state, T, query)
            got = [(s.capability_id, round(s.score.transition, 6)) for s in result.suggestions]
            assert got == [(cap["read"], round(3 / 5, 6)), (cap["tail"], round(1 / 5, 6))]
            assert all(s.score.match == 0.0 for s in result.suggestions)
    # the usual filters apply
    only_tail = SuggestQuery("", context=SuggestContext(session_id="now"), available_tools=())
    assert engine.suggest(T, only_tail).suggestions == ()
    explained = engine.suggest(T, replace(only_tail, explain=True))
    # the filters removed both next steps: a second ranking without them counts them
    # (docs/ranking.md, Filters, "What the filters removed")
    assert (explained.removed_by_filters, explained.missing_tools) == (
        2,
        ("read_file", "tail_file"),
    )
    ranked = replace(explained, removed_by_filters=0, missing_tools=())
    assert ranked == oracle.rank_suggestions(engine._state, T, replace(only_tail, explain=True))
    assert {f.rule for f in explained.filtered} == {"available_tools"}
    # nothing ever followed `tail`, and an unknown session has no previous step
    assert (
        engine.suggest(T, SuggestQuery("", context=SuggestContext(session_id="b"))).suggestions
        == ()
    )
    with pytest.raises(InvalidArgumentError, match="intent"):
        engine.suggest(T, SuggestQuery("", context=SuggestContext()))


def test_a_deleted_next_step_no_longer_weighs_on_the_others(engine_of: EngineOf) -> None:
    """w(c) is relative to the most likely next step (docs/ranking.md, Sessions): once the
    capability that usually followed is deleted, the step that follows now is weighed against
    the steps that still exist. Its transitions' rows stayed the scale: `tail`, seen once
    after `ls`, kept w = 1/(6 + 2) instead of 1/(1 + 2) until the deleted step's counts aged
    away (90 days and more)."""
    engine = engine_of()
    cap = _capabilities(engine)
    for s in range(6):
        _step(engine, f"a{s}", "ls", 1)
        _step(engine, f"a{s}", "read", 2)
    engine.delete_capability(T, cap["read"])
    _step(engine, "b", "ls", 1)
    _step(engine, "b", "tail", 2)
    query = SuggestQuery("", context=SuggestContext(previous_tools=("list_dir",)))
    result = engine.suggest(T, query)
    assert result == oracle.rank_suggestions(engine._state, T, query)
    got = [(s.capability_id, round(s.score.transition, 6)) for s in result.suggestions]
    assert got == [(cap["tail"], round(1 / 3, 6))]


def test_the_transition_lifts_the_usual_next_step_on_both_paths(engine_of: EngineOf) -> None:
    engine = engine_of()
    cap = _capabilities(engine)
    for s in range(4):
        _step(engine, f"a{s}", "ls", 1)
        _step(engine, f"a{s}", "tail", 2)
    query = SuggestQuery("show the file", min_match=0.0)
    with_context = replace(query, context=SuggestContext(previous_tools=("list_dir",)))
    plain = engine.suggest(T, query).suggestions
    assert all(s.score.transition == 1.0 for s in plain)
    core = engine.suggest(T, with_context).suggestions
    python = oracle.rank_suggestions(
        engine._state, T, replace(with_context, explain=True)
    ).suggestions
    assert [(s.capability_id, s.score) for s in core] == [
        (s.capability_id, s.score) for s in python
    ]
    lifted = {s.capability_id: s.score for s in core}[cap["tail"]]
    weight = 4 / (4 + 2)
    assert lifted.transition == 1.0 + 0.25 * weight
    before = {s.capability_id: s.score for s in plain}[cap["tail"]]
    assert lifted.total == before.total * lifted.transition
    # every other capability is scored exactly as without the context
    for s in core:
        if s.capability_id != cap["tail"]:
            assert s.score == {p.capability_id: p.score for p in plain}[s.capability_id]


def test_bad_session_ids_are_refused_naming_the_field(engine_of: EngineOf) -> None:
    engine = engine_of()
    record = make_record("r", "list the files", ["list_dir"])
    for bad in ("x" * 129, "   ", "a\x00b", "a\u200bb", "a\u202eb", "a\u2028b"):
        with pytest.raises(InvalidArgumentError) as raised:
            engine.record(T, replace(record, session_id=bad))
        assert [v.field for v in raised.value.violations] == ["session_id"]
        context = SuggestContext(session_id=bad)
        with pytest.raises(InvalidArgumentError) as raised:
            engine.suggest(T, SuggestQuery("list files", context=context))
        assert [v.field for v in raised.value.violations] == ["context.session_id"]


def test_sweep_drops_idle_sessions(engine_of: EngineOf) -> None:
    clock = Clock()
    engine = engine_of(clock, session_idle_seconds=60.0)
    _capabilities(engine)
    _step(engine, "old", "ls", 1)
    clock.now_ms += 61_000
    _step(engine, "new", "ls", 1)
    assert _sessions.sweep(engine._state, T) == 1
    assert [k for k, _, _ in engine._state.repo.sessions.session_rows(T)] == [session_key(T, "new")]


def test_idle_sessions_are_swept_whatever_max_sessions(engine_of: EngineOf) -> None:
    """A bound of a billion sessions still sweeps every `SWEEP_EVERY_AT_MOST` new sessions
    (docs/ranking.md, Sessions): sessions idle longer than `session_idle_seconds` are deleted
    from the store, not only passed over when their next step is recorded."""
    clock = Clock()
    engine = engine_of(clock, session_idle_seconds=60.0, max_sessions=10**9)
    _capabilities(engine)
    intent, tools = STEPS["ls"]

    def start(names: list[str]) -> None:
        engine.record_many(T, [replace(make_record(n, intent, tools), session_id=n) for n in names])

    start([f"old{i}" for i in range(64)])
    clock.now_ms += 61_000
    new = [f"new{i}" for i in range(_sessions.SWEEP_EVERY_AT_MOST)]
    for at in range(0, len(new), 64):  # record_many takes at most 64 records a call
        start(new[at : at + 64])
    kept = {key for key, _, _ in engine._state.repo.sessions.session_rows(T)}
    assert kept == {session_key(T, n) for n in new}


def test_the_sweep_keeps_a_session_a_capture_refreshed_after_its_scan(
    engine_of: EngineOf, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session idle when the sweep scans, then refreshed by a capture before its delete: the
    capture's step is kept, so the session's next step follows it."""
    clock = Clock()
    engine = engine_of(clock, session_idle_seconds=60.0)
    cap = _capabilities(engine)
    _step(engine, "s", "ls", 1)
    clock.now_ms += 61_000  # idle when the sweep scans
    sessions = engine._state.repo.sessions
    scan = sessions.session_rows

    def scan_then_capture(tenant: str) -> list[tuple[bytes, int, bytes]]:
        rows = scan(tenant)
        _step(engine, "s", "read", 2)  # between the scan and the delete
        return rows

    monkeypatch.setattr(sessions, "session_rows", scan_then_capture)
    assert _sessions.sweep(engine._state, T) == 0
    monkeypatch.undo()
    clock.now_ms += 1_000
    _step(engine, "s", "tail", 3)
    assert sessions.transition(T, cap["read"], cap["tail"]) is not None
    assert sessions.transition(T, cap["ls"], cap["read"]) is None  # idle: followed nothing


def test_a_sweep_deletes_its_sessions_a_chunk_to_a_write(
    engine_of: EngineOf, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture that sweeps a tenant pays one store write per `SWEEP_CHUNK` sessions dropped,
    not one per session: 2,000 idle sessions and 1,000 recent ones over a bound of 100 drop
    2,900 (the idle, then the least recently used) in 3 writes, and keep the 100 newest."""
    clock = Clock()
    engine = engine_of(clock, session_idle_seconds=60.0, max_sessions=100)
    store = engine._state.store
    now = clock.now_ms

    def row(ms: int) -> bytes:
        return json_form.dumps({"capability": "c", "ms": ms})

    store.write([(CF_SESSIONS, session_key(T, f"idle{i}"), row(now - 61_000)) for i in range(2000)])
    store.write([(CF_SESSIONS, session_key(T, f"s{i}"), row(now - i)) for i in range(1000)])
    writes: list[str] = []
    for name in ("write", "submit", "delete_unchanged"):
        method = getattr(store, name)

        def counted(*args: Any, _name: str = name, _method: Any = method) -> Any:
            # the sweep's own writes: the engine's jobs may write meanwhile on their threads
            if threading.current_thread() is sweeping:
                writes.append(_name)
            return _method(*args)

        monkeypatch.setattr(store, name, counted)
    sweeping = threading.current_thread()
    assert _sessions.sweep(engine._state, T) == 2900
    assert writes == ["delete_unchanged"] * 3
    monkeypatch.undo()
    kept = {key for key, _, _ in engine._state.repo.sessions.session_rows(T)}
    assert kept == {session_key(T, f"s{i}") for i in range(100)}


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_rows_an_older_build_keyed_by_the_raw_id_are_dropped_at_open(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """An older build keyed a session's row by its id, which may hold a password: opening the
    store deletes those rows and keeps the ones keyed by a digest."""
    overrides = {"store": request.getfixturevalue("postgres_dsn")} if store == "postgresql" else {}
    engine = open_engine(tmp_path / "e", **overrides)
    _capabilities(engine)
    _step(engine, "kept", "ls", 1)
    raw = "postgresql://admin:hunter2@db.internal/prod"
    row = json_form.dumps({"capability": "c", "ms": 1})
    engine._state.store.write([(CF_SESSIONS, tenant_key(T, raw), row)])
    engine._state.store.write([(CF_SESSIONS, tenant_key("other", "0" * 31), row)])
    engine.close()
    engine = open_engine(tmp_path / "e", **overrides)
    try:
        stored = engine._state.repo.store.scan(CF_SESSIONS, b"")
        assert [key for key, _ in stored] == [session_key(T, "kept")]
    finally:
        engine.close()


def test_stored_workflows_teach_what_follows_a_step(engine_of: EngineOf) -> None:
    """No session recorded: the workflows captured whole (one execution running several
    tools) teach what follows their steps (docs/ranking.md, Sessions, "Workflows")."""
    engine = engine_of()
    cap = _capabilities(engine)
    for n in range(3):
        engine.record(T, make_record(f"w-read-{n}", "list then read", ["list_dir", "read_file"]))
    engine.record(T, make_record("w-tail", "list then tail the log", ["list_dir", "tail_file"]))
    now = _step(engine, "now", "ls", 1)
    assert now == cap["ls"]
    for context in (
        SuggestContext(session_id="now"),
        SuggestContext(previous_tools=("list_dir",)),
        SuggestContext(previous_tools=("read_file", "list_dir")),
        SuggestContext(previous_patterns=(engine.get_capability(T, cap["ls"]).best_pattern_id,)),
    ):
        query = SuggestQuery("", context=context)
        result = engine.suggest(T, query)
        assert result == oracle.rank_suggestions(engine._state, T, query)
        got = [(s.capability_id, round(s.score.transition, 6)) for s in result.suggestions]
        # three runs of list > read, one of list > tail: 3 / (3 + 2) and 1 / (3 + 2)
        assert got == [(cap["read"], 0.6), (cap["tail"], 0.2)]
    # the step a workflow ends with has no follower; sessions and workflows add up
    after_read = SuggestQuery("", context=SuggestContext(previous_tools=("read_file",)))
    assert engine.suggest(T, after_read).suggestions == ()
    for s in range(2):
        _step(engine, f"s{s}", "ls", 1)
        _step(engine, f"s{s}", "tail", 2)
    lifted = engine.suggest(T, SuggestQuery("show the log", min_match=0.0, context=context))
    weights = {s.capability_id: s.score.transition for s in lifted.suggestions}
    assert weights[cap["tail"]] == 1.0 + 0.25 * 3 / (3 + 2)
    assert weights[cap["read"]] == 1.0 + 0.25 * 3 / (3 + 2)


@pytest.mark.postgres
def test_a_sweep_that_fails_never_fails_the_capture_that_ran_it(
    postgres_dsn: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The sweep is housekeeping after a committed capture (docs/ranking.md, Sessions): when
    PostgreSQL refuses its delete (here a trigger raising on every delete of a session row),
    the capture still answers its result, the failure is logged, and later captures go on."""
    clock = Clock()
    engine = open_engine(tmp_path / "e", clock, store=postgres_dsn, max_sessions=8)
    try:
        cap = _capabilities(engine)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION pml_test_refuse() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'sessions are not to be deleted'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER pml_test_refuse BEFORE DELETE ON pml_sessions"
                " FOR EACH ROW EXECUTE FUNCTION pml_test_refuse()"
            )
        for s in range(12):  # every new session is due a sweep (max_sessions / 8 = 1)
            clock.now_ms += 1
            assert _step(engine, f"s{s:02d}", "ls", 1) == cap["ls"]
        repo = engine._state.repo
        assert len(repo.sessions.session_rows(T)) == 12  # the sweeps deleted nothing
        assert repo.sessions.session_step(T, "s11")[0] == cap["ls"]  # type: ignore[index]
        assert "session sweep" in caplog.text
        assert "sessions are not to be deleted" in caplog.text
    finally:
        engine.close()
