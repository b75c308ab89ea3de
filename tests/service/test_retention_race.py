"""Retention with auto-removal deletes a pattern only if the removal rule still holds at the
moment of deletion, under the pattern's lock: a success captured after retention evaluated the
tenant keeps the pattern (docs/ranking.md, Retention). On the embedded RocksDB store and on the
shared PostgreSQL store (whose pattern locks are advisory locks of the write transaction)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pml_server.domain.model import RetentionAction, SuggestQuery
from pml_server.retention import RetentionConfig
from pml_server.service import Engine, _curation
from tests.support import Clock, make_record, open_engine

AUTO = RetentionConfig(auto_remove=True)
TOOLS = ["flaky_tool"]


@pytest.fixture(params=["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine_of(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Engine]]:
    opened: list[Engine] = []

    def make(retention: RetentionConfig = AUTO) -> Engine:
        store: dict[str, Any] = {}
        if request.param == "postgresql":
            store["store"] = request.getfixturevalue("postgres_dsn")
        engine = open_engine(tmp_path / f"e{len(opened)}", retention=retention, **store)
        opened.append(engine)
        return engine

    yield make
    for engine in opened:
        engine.close()


def _at_the_edge(engine: Engine, tenant: str, name: str) -> str:
    """A pattern at 2 successes of 11 tries (18% < 20%): a removal candidate."""
    first = engine.record(tenant, make_record(f"{name}-0", f"run {name}", TOOLS, code=f"{name}()"))
    for i in range(1, 11):
        failed = {TOOLS[0]} if i > 1 else None
        record = make_record(f"{name}-{i}", f"run {name}", TOOLS, code=f"{name}()", failed=failed)
        engine.record(tenant, record)
    pattern = engine.get_pattern(tenant, first.pattern_id)
    assert (pattern.success_count, pattern.failure_count) == (2, 9)
    return first.pattern_id


def _succeed_after_the_evaluation(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next retention run's evaluation is followed at once by a success of pattern `a`."""
    evaluated = _curation.views_by_capability

    def evaluate_then_capture(*args: Any) -> Any:
        views = evaluated(*args)
        engine.record("t", make_record("a-late", "run a", TOOLS, code="a()"))
        return views

    monkeypatch.setattr(_curation, "views_by_capability", evaluate_then_capture)


def test_a_success_after_the_evaluation_keeps_the_pattern(
    engine_of: Callable[[], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic: a success of pattern `a` (3 of 12, 25%) lands between retention's
    evaluation and its deletions; `a` is kept and not reported removed, `b` (unchanged) goes."""
    engine = engine_of()
    a = _at_the_edge(engine, "t", "a")
    b = _at_the_edge(engine, "t", "b")
    _succeed_after_the_evaluation(engine, monkeypatch)
    report = engine.run_retention("t", apply=True)
    removed = {e.pattern_id for e in report.entries if e.action is RetentionAction.REMOVED}
    assert removed == {b}
    kept = engine.get_pattern("t", a)
    assert (kept.success_count, kept.failure_count) == (3, 9)


def test_a_success_after_the_evaluation_keeps_the_pattern_unflagged(
    engine_of: Callable[..., Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without auto-removal the same race would flag `a`, hiding a pattern that had recovered
    from every Suggest until the next run: the flag is decided again under the pattern's lock,
    as a removal is (docs/ranking.md, Retention). `a` stays unflagged and is not reported a
    removal candidate; `b` (unchanged) is flagged."""
    engine = engine_of(RetentionConfig())
    a = _at_the_edge(engine, "t", "a")
    b = _at_the_edge(engine, "t", "b")
    _succeed_after_the_evaluation(engine, monkeypatch)
    report = engine.run_retention("t", apply=True)
    candidates = {
        e.pattern_id for e in report.entries if e.action is RetentionAction.REMOVAL_CANDIDATE
    }
    assert candidates == {b}
    assert engine.get_pattern("t", b).flagged_for_removal
    kept = engine.get_pattern("t", a)
    assert (kept.success_count, kept.failure_count, kept.flagged_for_removal) == (3, 9, False)


def test_concurrent_captures_never_lose_a_pattern_that_recovered(
    engine_of: Callable[[], Engine],
) -> None:
    """Threads capture successes of patterns at the edge while retention applies again and
    again. Every pattern deleted must have met the rule with every capture acknowledged for
    it (a capture acknowledged before the deletion counted in it); then the pattern id never
    comes back (the next capture starts a new pattern)."""
    engine = engine_of()
    ids = {name: _at_the_edge(engine, "t", name) for name in (f"p{i}" for i in range(12))}
    acked: dict[str, list[bool]] = {}  # pattern id -> outcome of each acknowledged capture
    lock = threading.Lock()
    stop = threading.Event()

    def capture(name: str) -> None:
        for i in range(6):
            if stop.is_set():
                return
            result = engine.record(
                "t", make_record(f"{name}-s{i}", f"run {name}", TOOLS, code=f"{name}()")
            )
            with lock:
                acked.setdefault(result.pattern_id, []).append(True)

    threads = [threading.Thread(target=capture, args=(n,)) for n in ids]
    for t in threads:
        t.start()
    deletions: list[str] = []
    while any(t.is_alive() for t in threads):
        report = engine.run_retention("t", apply=True)
        deletions += [e.pattern_id for e in report.entries if e.action is RetentionAction.REMOVED]
    for t in threads:
        t.join()
    stop.set()
    wrong = []
    for pattern_id in deletions:
        successes = 2 + len(acked.get(pattern_id, []))
        if successes / (successes + 9) >= AUTO.min_success_rate:
            wrong.append(pattern_id)
    assert wrong == [], (wrong, deletions)


def test_successes_after_the_evaluation_leave_the_pattern_unmarked_superseded(
    engine_of: Callable[..., Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within one capability, `best` (10 of 10) beats `worse` (1 of 3) by 0.92 - 0.40 of
    success estimate: evaluated alone, `worse` is superseded. Ten successes of `worse` land
    between the evaluation and the marks (11 of 13: 0.79, within the 0.15 margin): the mark,
    which lowers `worse` in every Suggest until the next run, is decided again under the
    pattern's lock (docs/ranking.md, Retention), so `worse` stays unmarked and the report does
    not list it superseded."""
    engine = engine_of(RetentionConfig())
    tools = ["deploy_tool"]

    def capture(name: str, i: int, failed: bool = False) -> str:
        record = make_record(
            f"{name}-{i}",
            "deploy the service",
            tools,
            code=f"{name}()",
            failed=set(tools) if failed else None,
        )
        return engine.record("t", record).pattern_id

    best, *_ = [capture("best", i) for i in range(10)]
    worse, *_ = [capture("worse", i, failed=i > 0) for i in range(3)]
    assert (
        engine.get_pattern("t", worse).capability_id == engine.get_pattern("t", best).capability_id
    )
    assert [
        e.superseded_by
        for e in engine.run_retention("t", apply=False).entries
        if e.action is RetentionAction.SUPERSEDED
    ] == [best]
    evaluated = _curation.views_by_capability

    def evaluate_then_capture(*args: Any) -> Any:
        views = evaluated(*args)
        for i in range(3, 13):
            capture("worse", i)
        return views

    monkeypatch.setattr(_curation, "views_by_capability", evaluate_then_capture)
    report = engine.run_retention("t", apply=True)
    assert [e for e in report.entries if e.action is RetentionAction.SUPERSEDED] == []
    marked = engine.get_pattern("t", worse)
    assert (marked.success_count, marked.failure_count, marked.superseded_by) == (11, 2, "")


def test_an_applied_run_writes_its_removals_a_page_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/ranking.md, Retention: a run removing 130 patterns wrote each removal as a group of
    its own (one fsync each: 12 ms a pattern here, 20 minutes for 100k); each removal still
    commits under its own locks, and a page of a capture batch's size (64) reaches the disk
    together, so the run writes a few groups. Every pattern goes, and the counts stay exact."""
    fail_once = RetentionConfig(min_tries=1, min_success_rate=1.0, auto_remove=True)
    engine = open_engine(tmp_path / "e", retention=fail_once, durability="sync")
    try:
        for failed in (set(), {"flaky_tool"}):
            for at in range(0, 130, 64):
                engine.record_many(
                    "t",
                    [
                        make_record(
                            f"r{i}-{len(failed)}", f"p{i}", TOOLS, code=f"p{i}()", failed=failed
                        )
                        for i in range(at, min(130, at + 64))
                    ],
                )
        assert engine.stats("t").patterns == 130
        groups: list[int] = []
        writer = engine._state.store._writer  # type: ignore[attr-defined]
        build = writer._batch

        def counted(ops: Any) -> Any:
            listed = list(ops)
            groups.append(len(listed))
            return build(listed)

        monkeypatch.setattr(writer, "_batch", counted)
        report = engine.run_retention("t", apply=True)
        removed = [e for e in report.entries if e.action is RetentionAction.REMOVED]
        assert len(removed) == 130
        assert len(groups) <= 8  # 3 pages, and what the rest of the run writes
        stats = engine.stats("t")
        assert (stats.patterns, stats.capabilities, stats.intents) == (0, 0, 0)
    finally:
        engine.close()


class _WatchedIndex:
    """The tenant's real vector index, each removal and compaction noted with whether the
    index's write lock or any pattern, capability or tenant lock was held at the call."""

    def __init__(self, engine: Engine, real: Any) -> None:
        self._engine, self._real = engine, real
        self.calls: list[tuple[str, bool, bool]] = []  # (call, compacts, a lock was held)

    def _held(self) -> bool:
        state = self._engine._state
        index = state.indexes.for_tenant("t")
        stripes = [
            *state.locks.pattern._locks,  # type: ignore[attr-defined]
            *state.locks.group._locks,  # type: ignore[attr-defined]
            *state.locks.tenant._locks,  # type: ignore[attr-defined]
        ]
        return index._write_lock.locked() or any(s._is_owned() for s in stripes)

    def remove(self, ids: Any, *, compact: bool = True) -> int:
        self.calls.append(("remove", compact, self._held()))
        return int(self._real.remove(ids, compact=compact))

    def compact_if_worn(self) -> bool:
        compacted = bool(self._real.compact_if_worn())
        self.calls.append(("compact_if_worn", compacted, self._held()))
        return compacted

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_a_run_compacts_the_vector_index_with_no_lock_held(tmp_path: Path) -> None:
    """docs/ranking.md, Retention: removing a third of the tenant's intents compacts its vector
    index (seconds for 20k intents). It ran inside a removal, under the index's write lock and
    the pattern's and capability's locks, so a capture waiting on any of them (a search of the
    index, a capture of that capability) waited 2 to 8 s. Now a removal leaves tombstones under
    the locks, and the compaction runs once they are released, on a copy."""
    fail_once = RetentionConfig(min_tries=1, min_success_rate=1.0, auto_remove=True)
    engine = open_engine(tmp_path / "e", retention=fail_once)
    try:
        for failed in (set(), {"flaky_tool"}):
            records = [
                make_record(f"r{i}-{len(failed)}", f"p{i}", TOOLS, code=f"p{i}()", failed=failed)
                for i in range(60)
            ]
            engine.record_many("t", records)
        engine.record("t", make_record("kept", "send the report", ["mail"], code="mail()"))
        index = engine._state.indexes.for_tenant("t")
        watched = _WatchedIndex(engine, index.ann)
        index.ann = watched  # type: ignore[assignment]
        report = engine.run_retention("t", apply=True)
        assert sum(e.action is RetentionAction.REMOVED for e in report.entries) == 60
        removals = [c for c in watched.calls if c[0] == "remove"]
        assert len(removals) == 60
        assert not any(compacts for _, compacts, _ in removals)  # tombstones only
        compactions = [c for c in watched.calls if c[0] == "compact_if_worn" and c[1]]
        assert compactions  # 60 of 61 intents gone: worn at the 16th removal at the latest
        assert not any(c[2] for c in watched.calls if c[0] == "compact_if_worn")
        index.ann = watched._real  # the ranking's core call takes the index itself
        found = engine.suggest("t", SuggestQuery(intent="send the report"))
        assert [s.pattern.original_code for s in found.suggestions][:1] == ["mail()"]
    finally:
        engine.close()


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_a_deletions_rewrite_puts_back_no_answer_pruned_meanwhile(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic: a user's deletion reads the stored answers of the pattern's runs (to
    erase what they hold), then retention prunes one of them (expired), then the deletion
    commits its rewrites: the pruned answer stays gone (its request id is answered as new),
    the one still there is erased (docs/storage.md, Data left on disk)."""
    clock = Clock()
    dsn = {"store": request.getfixturevalue("postgres_dsn")} if store == "postgresql" else {}
    engine = open_engine(tmp_path / "e", clock, request_id_ttl_days=1.0, **dsn)
    try:
        old = engine.record("t", make_record("old", "run a", TOOLS, code="a()"))
        clock.advance_days(1.5)
        recent = engine.record("t", make_record("recent", "run a", TOOLS, code="a()"))
        assert recent.pattern_id == old.pattern_id
        read = _curation.erase_answers
        pruned: list[int] = []

        def read_then_prune(*args: Any) -> Any:
            rewrites = read(*args)
            assert len(rewrites) == 2  # both answers read, as they were
            pruned.append(engine.admin.prune_request_ids("t"))  # no lock of the pattern
            return rewrites

        monkeypatch.setattr(_curation, "erase_answers", read_then_prune)
        engine.delete_pattern("t", old.pattern_id)
        assert pruned == [1]
        requests = engine._state.repo.requests
        assert requests.request_result("t", "old") is None  # not put back
        kept = requests.request_result("t", "recent")
        assert kept is not None
        assert old.pattern_id.encode() not in kept  # erased
        again = engine.record("t", make_record("old", "run a", TOOLS, code="a()"))
        assert not again.replayed
    finally:
        engine.close()


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_two_prunes_at_once_never_forget_an_answer_stored_between_them(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Deterministic: a prune (replica a's retention) reads an expired answer, then another
    prune (replica b's; one engine twice on RocksDB) forgets it, and its request id, sent
    again, is captured anew and acknowledged; then the first prune deletes what it read. The
    new answer stays (a prune deletes only answers still as it read them, docs/capture.md,
    Idempotency): the id sent a third time is replayed, the run counted twice, not three
    times."""
    clock = Clock()
    dsn = {"store": request.getfixturevalue("postgres_dsn")} if store == "postgresql" else {}
    a = open_engine(tmp_path / "a", clock, request_id_ttl_days=1.0, **dsn)
    b = open_engine(tmp_path / "b", clock, request_id_ttl_days=1.0, **dsn) if dsn else a
    try:
        first = a.record("t", make_record("r1", "run a", TOOLS, code="a()"))
        clock.advance_days(1.5)
        requests = a._state.repo.requests
        read = requests.request_rows
        between: list[Any] = []

        def read_then_prune_and_capture(*args: Any, **kwargs: Any) -> Any:
            rows = read(*args, **kwargs)
            if not between:
                between.append("reading")  # the other prune (the same engine) reads too
                between.append(b.admin.prune_request_ids("t"))
                between.append(b.record("t", make_record("r1", "run a", TOOLS, code="a()")))
            return rows

        requests.request_rows = read_then_prune_and_capture  # type: ignore[method-assign]
        a.admin.prune_request_ids("t")
        requests.request_rows = read  # type: ignore[method-assign]
        _, pruned, again = between
        assert pruned == 1
        assert not again.replayed  # expired and forgotten: a new execution, acknowledged
        third = b.record("t", make_record("r1", "run a", TOOLS, code="a()"))
        assert third.replayed
        assert a.get_pattern("t", first.pattern_id).usage_count == 2
    finally:
        a.close()
        if b is not a:
            b.close()
