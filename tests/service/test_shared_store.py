"""Engines as replicas over one shared PostgreSQL database (real throwaway cluster, hashing
embedder): what one replica writes, another suggests; counts stay exact across replicas; a
request id applies once; tenants stay apart; a replica that was closed catches up."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pml_server.domain.errors import NotFoundError
from pml_server.domain.model import CaptureOutcome, PageRequest, SuggestQuery
from pml_server.domain.records import PatternCounters, PatternRecord
from pml_server.domain.shown_intents import SHOWN_INTENTS
from pml_server.ranking import RankingConfig
from pml_server.service import Engine, _near
from pml_server.storage.keys import CF_COUNTERS, CF_INTENTS, prefix_end, tenant_key, tenant_prefix
from pml_server.storage.postgres import _store
from pml_server.storage.repo import IntentRows
from testing.ranking_oracle import path as oracle
from testing.store_reads import intents_read, rows_read
from tests.support import Clock, code_for, make_record, open_engine

JSON_TOOLS = ["fs.read", "json.parse"]
MAIL_TOOLS = ["mail.compose", "mail.send"]
WAIT_SECONDS = 15.0


def suggested(engine: Engine, tenant: str, intent: str) -> list[str]:
    return [s.pattern.id for s in engine.suggest(tenant, SuggestQuery(intent)).suggestions]


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_a_capture_on_one_replica_is_suggested_by_the_other(
    replicas: Callable[[str], Engine],
) -> None:
    a, b = replicas("a"), replicas("b")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert suggested(a, "t", "Read JSON file") == [saved.pattern_id]  # its own write, at once
    assert eventually(lambda: suggested(b, "t", "Read JSON file") == [saved.pattern_id])
    assert b.get_pattern("t", saved.pattern_id).usage_count == 1
    lag = b.admin.follower_lag()
    assert lag is not None
    assert lag.applied >= 1
    assert lag.behind == 0


def test_a_deletion_on_one_replica_leaves_the_others_suggestions(
    replicas: Callable[[str], Engine],
) -> None:
    a, b = replicas("a"), replicas("b")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert eventually(lambda: suggested(b, "t", "Read JSON file") == [saved.pattern_id])
    b.delete_pattern("t", saved.pattern_id)
    assert suggested(b, "t", "Read JSON file") == []
    assert eventually(lambda: suggested(a, "t", "Read JSON file") == [])


def test_two_replicas_deleting_one_pattern_at_once_delete_it_once(
    replicas: Callable[[str], Engine],
) -> None:
    """Each of 10 patterns deleted by both replicas at the same moment: one deletion applies,
    the other answers NOT_FOUND (never another error), and the tenant's counts drop once."""
    a, b = replicas("a"), replicas("b")
    a.record("t", make_record("kept", "Send the weekly mail", MAIL_TOOLS))
    outcomes: list[str] = []
    for n in range(10):
        tools = [f"t{n}.read", f"t{n}.parse"]
        pattern_id = a.record("t", make_record(f"r{n}", f"Read table {n}", tools)).pattern_id
        barrier = threading.Barrier(2)

        def delete(
            engine: Engine, pattern_id: str = pattern_id, barrier: threading.Barrier = barrier
        ) -> None:
            barrier.wait()
            try:
                engine.delete_pattern("t", pattern_id)
                outcomes.append("deleted")
            except NotFoundError:
                outcomes.append("not found")

        threads = [threading.Thread(target=delete, args=(e,)) for e in (a, b)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert sorted(outcomes) == ["deleted"] * 10 + ["not found"] * 10
    for engine in (a, b):
        stats = engine.stats("t")
        assert (stats.patterns, stats.intents) == (1, 1)


def test_a_follower_behind_reads_the_tools_of_many_new_patterns_in_one_query(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, Replicas: B's follower, paused while A records 40 new patterns,
    applies their op log entries reading the patterns' records (their tools) in one query, not
    one a pattern (40 round trips one after another before); B then suggests each."""
    a, b = replicas("a"), replicas("b")
    catch_up = _paused(b, monkeypatch)
    intents = [f"w{n}x{n * 7}q task" for n in range(40)]
    saved = [
        a.record("t", make_record(f"r{n}", intent, JSON_TOOLS, code=f"f{n}()"))
        for n, intent in enumerate(intents)
    ]
    sent = _queries(b, monkeypatch)
    catch_up()
    assert len(sent) <= 6  # heads, entries, intents, records, changes (44 before)
    for record, intent in zip(saved, intents, strict=True):
        assert suggested(b, "t", intent)[:1] == [record.pattern_id]


def test_a_pattern_deleted_on_one_replica_leaves_the_others_ranking_table(
    replicas: Callable[[str], Engine],
) -> None:
    """docs/storage.md, Replicas: B's follower applies A's deletion of a pattern and takes
    its row out of B's ranking table, as A's own deletion does in A's (it stayed in B's until
    a restart: one row a pattern another replica deleted); the others stay."""
    a, b = replicas("a"), replicas("b")
    saved = [
        a.record("t", make_record(f"r{n}", intent, JSON_TOOLS, code=f"f{n}()"))
        for n, intent in enumerate(["Read JSON file", "Send the weekly mail", "Fetch a page"])
    ]
    ranks = b._state.indexes.for_tenant("t").ranks
    assert eventually(lambda: len(ranks) == 3)
    a.delete_pattern("t", saved[1].pattern_id)
    assert eventually(
        lambda: suggested(b, "t", "Send the weekly mail")[:1] != [saved[1].pattern_id]
    )
    assert eventually(lambda: len(ranks) == 2)
    assert len(a._state.indexes.for_tenant("t").ranks) == 2
    assert suggested(b, "t", "Fetch a page")[:1] == [saved[2].pattern_id]


def test_a_run_counted_on_one_replica_reaches_the_others_suggest(
    replicas: Callable[[str], Engine],
) -> None:
    """The engine keeps no view cache over a shared store (other replicas' writes would never
    reach it); the store's own replica view cache drops a pattern another replica counted
    within the follower lag, so B's Suggest shows the counters the store holds."""
    a, b = replicas("a"), replicas("b")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert eventually(lambda: suggested(b, "t", "Read JSON file") == [saved.pattern_id])
    assert b._state.views is None

    def usage_shown() -> list[int]:
        shown = b.suggest("t", SuggestQuery("Read JSON file")).suggestions
        return [s.pattern.usage_count for s in shown]

    assert usage_shown() == [1]
    a.record("t", make_record("r2", "Read JSON file", JSON_TOOLS))
    assert eventually(lambda: usage_shown() == [2])


def _spread(
    engines: list[Engine], writers: int, each: int, tools_of: Callable[[int], list[str]]
) -> None:
    errors: list[BaseException] = []

    def work(n: int) -> None:
        engine = engines[n % len(engines)]
        try:
            for i in range(each):
                record = make_record(f"{n}-{i}", "Read JSON file", tools_of(n))
                assert engine.record("t", record).outcome is not CaptureOutcome.REJECTED
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_8_writers_over_2_replicas_count_one_pattern_exactly(
    replicas: Callable[[str], Engine],
) -> None:
    a, b = replicas("a"), replicas("b")
    _spread([a, b], writers=8, each=25, tools_of=lambda n: JSON_TOOLS)
    for engine in (a, b):
        [pattern] = engine.list_patterns("t", PageRequest()).items
        assert (pattern.usage_count, pattern.success_count) == (200, 200)
        assert pattern.intents[0].hit_count == 200
        stats = engine.stats("t")
        assert (stats.executions, stats.patterns, stats.capabilities) == (200, 1, 1)


def test_8_writers_over_2_replicas_count_across_patterns_exactly(
    replicas: Callable[[str], Engine],
) -> None:
    a, b = replicas("a"), replicas("b")
    # writers n and n+4 share a pattern but write through different replicas
    _spread([a, b], writers=8, each=20, tools_of=lambda n: [f"fs.read{n % 4}", "json.parse"])
    patterns = b.list_patterns("t", PageRequest()).items
    assert sorted(p.usage_count for p in patterns) == [40, 40, 40, 40]
    assert a.stats("t").executions == 160
    assert a.stats("t").patterns == 4


def test_one_request_id_sent_to_both_replicas_applies_once(
    replicas: Callable[[str], Engine],
) -> None:
    a, b = replicas("a"), replicas("b")
    results = []
    barrier = threading.Barrier(8)

    def send(engine: Engine) -> None:
        barrier.wait()
        results.append(engine.record("t", make_record("same-id", "Read JSON file", JSON_TOOLS)))

    threads = [threading.Thread(target=send, args=([a, b][n % 2],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(not r.replayed for r in results) == 1
    assert len({r.pattern_id for r in results}) == 1
    [pattern] = a.list_patterns("t", PageRequest()).items
    assert pattern.usage_count == 1
    assert b.stats("t").executions == 1


def test_captures_go_on_after_request_ids_resent_to_a_replica(
    replicas: Callable[[str], Engine],
) -> None:
    """A resent request id aborts its transaction's pipeline (UniqueViolation on the request id
    row). Before: once a statement reached psycopg's prepare threshold inside such an aborted
    pipeline, its connection believed it prepared while the server had skipped it, and every
    later use of it on that connection failed with `prepared statement "_pg3_N" does not
    exist` (captures refused as an internal error, the close-time snapshot lost)."""
    a = replicas("a")
    first = a.record("t", make_record("seed", "Read JSON file", JSON_TOOLS))
    for i in range(20):
        code = f"await mcp.tool_{i}()"
        saved = a.record("t", make_record(f"r{i}", f"Run tool {i}", [f"tool_{i}"], code=code))
        assert saved.outcome is CaptureOutcome.SAVED
        again = a.record("t", make_record("seed", "Read JSON file", JSON_TOOLS))
        assert again.replayed
        assert again.pattern_id == first.pattern_id
        counted = a.record("t", make_record(f"c{i}", "Read JSON file", JSON_TOOLS))
        assert counted.outcome is CaptureOutcome.COUNTED
    a.close()  # writes its index snapshot
    b = replicas("b")
    assert b.stats("t").patterns == 21
    assert b.get_pattern("t", first.pattern_id).usage_count == 21


def test_tenants_never_see_each_other_across_replicas(
    replicas: Callable[[str], Engine],
) -> None:
    a, b = replicas("a"), replicas("b")
    alice = a.record("alice", make_record("r1", "Read JSON file", JSON_TOOLS))
    b.record("ali", make_record("r1", "Send an email", MAIL_TOOLS))
    assert eventually(lambda: suggested(b, "alice", "Read JSON file") == [alice.pattern_id])
    for engine in (a, b):
        assert suggested(engine, "bob", "Read JSON file") == []
        assert suggested(engine, "ali", "Read JSON file") == []
        assert engine.list_patterns("bob", PageRequest()).items == ()
        assert [p.id for p in engine.list_patterns("alice", PageRequest()).items] == [
            alice.pattern_id
        ]


def test_a_closed_replica_catches_up_when_it_returns(
    replicas: Callable[[str], Engine],
) -> None:
    a, b = replicas("a"), replicas("b")
    first = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert eventually(lambda: suggested(b, "t", "Read JSON file") == [first.pattern_id])
    b.close()
    mail = a.record("t", make_record("r2", "Send an email", MAIL_TOOLS))
    b_again = replicas("b")
    assert suggested(b_again, "t", "Send an email") == [mail.pattern_id]  # ready = caught up
    assert suggested(b_again, "t", "Read JSON file") == [first.pattern_id]


def test_suggest_never_sees_counts_above_the_ceiling_it_bounds_them_by(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Suggest ranked in Python (the oracle's path) reads the tenant's counter ceilings, then the
    candidates' counters, and stops reading candidates whose match times the ceiling cannot
    reach the k-th score. Another replica counting in between must not show counts above that
    ceiling."""
    a, b = replicas("a"), replicas("b")
    saved = a.record("t", make_record("r0", "Read JSON file", JSON_TOOLS))
    assert eventually(lambda: suggested(b, "t", "Read JSON file") == [saved.pattern_id])
    patterns = b._state.repo.patterns
    read_ceilings = patterns.counter_ceilings
    ceilings: list[tuple[int, int]] = []

    def ceilings_then_captures_elsewhere(tenant: str) -> tuple[int, int]:
        ceiling = read_ceilings(tenant)
        ceilings.append(ceiling)
        for i in range(1, 5):  # replica a counts the pattern 4 more times meanwhile
            a.record("t", make_record(f"r{i}", "Read JSON file", JSON_TOOLS))
        return ceiling

    monkeypatch.setattr(patterns, "counter_ceilings", ceilings_then_captures_elsewhere)
    query = SuggestQuery("Read JSON file", explain=True)
    [suggestion] = oracle.rank_suggestions(b._state, "t", query).suggestions
    assert ceilings == [(1, 1)]
    assert suggestion.pattern.usage_count <= ceilings[0][1]
    monkeypatch.undo()
    assert b.get_pattern("t", saved.pattern_id).usage_count == 5


def test_a_replica_ranks_with_the_counters_another_replica_wrote(
    replicas: Callable[[str], Engine],
) -> None:
    """Suggest ranks in the core over the replica's own ranking table, which follows the other
    replicas' pattern and counters writes: failures counted on a make b rank the other one
    first."""
    a, b = replicas("a"), replicas("b")
    flaky = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    steady = a.record("t", make_record("r2", "Read JSON file", ["fs.read", "yaml.parse"]))
    both = {flaky.pattern_id, steady.pattern_id}
    assert eventually(lambda: set(suggested(b, "t", "Read JSON file")) == both)
    for i in range(4):
        a.record("t", make_record(f"f{i}", "Read JSON file", JSON_TOOLS, failed={"json.parse"}))
    assert suggested(a, "t", "Read JSON file")[0] == steady.pattern_id
    assert eventually(lambda: suggested(b, "t", "Read JSON file")[0] == steady.pattern_id)
    assert b.get_pattern("t", flaky.pattern_id).failure_count == 4


def test_a_pattern_read_after_a_failed_try_shows_what_other_replicas_added(
    replicas: Callable[[str], Engine],
) -> None:
    """A capture reads its pattern's intents with the pattern, for use under the pattern's
    lock; a failed try does not use them, and a later read on the same thread must not
    either (another replica may have added intents since)."""
    a, b = replicas("a"), replicas("b")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    a.record("t", make_record("r2", "Read JSON file", JSON_TOOLS, failed={"json.parse"}))
    b.record("t", make_record("r3", "Fetch the config document", JSON_TOOLS))
    texts = {i.text for i in a.get_pattern("t", saved.pattern_id).intents}
    assert texts == {"Read JSON file", "Fetch the config document"}


def _views(engine: Engine, tenant: str, intent: str) -> list[tuple[str, int, list[int]]]:
    """(pattern id, usage count, intent hit counts) of each suggestion."""
    return [
        (s.pattern.id, s.pattern.usage_count, sorted(i.hit_count for i in s.pattern.intents))
        for s in engine.suggest(tenant, SuggestQuery(intent)).suggestions
    ]


def test_a_replica_suggests_from_its_view_cache_without_a_database_read(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a pattern's view was read, Suggest (ranked in the core) reads nothing from the
    database for it: the read of views is made to fail, and the answer is the same."""
    a = replicas("a")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    first = _views(a, "t", "Read JSON file")
    assert first == [(saved.pattern_id, 1, [1])]

    def no_database(*_: object) -> object:
        raise AssertionError("Suggest read the database")

    kv = a._state.repo.shared_store.kv
    for read in ("get_pairs", "get_many", "scan", "shown_view_rows"):
        monkeypatch.setattr(kv, read, no_database)
    assert _views(a, "t", "Read JSON file") == first


def _queries(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements `engine`'s shared store reads with from now on in this thread (not its
    follower's), one entry a round trip."""
    db = engine._state.store.kv._db
    rows = db.rows
    sent: list[str] = []
    caller = threading.get_ident()

    def counted(query: Any, params: Any = ()) -> Any:
        if threading.get_ident() == caller:
            sent.append(str(query))
        return rows(query, params)

    monkeypatch.setattr(db, "rows", counted)
    return sent


def test_list_patterns_reads_a_page_in_two_round_trips(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ListPatterns over a shared store: the page of records, then their counters and shown
    intents in one joined query (docs/storage.md, The shared store). Three before: the
    counters and the intents they name were two multi-gets. The views are those GetPattern
    shows."""
    a = replicas("a")
    for n in range(5):
        a.record("t", make_record(f"r{n}", f"Read JSON file {n}", JSON_TOOLS, code=f"f{n}()"))
    a.record("t", make_record("r5", "Read the JSON file", JSON_TOOLS, code="f0()"))
    sent = _queries(a, monkeypatch)
    page = a.list_patterns("t", PageRequest(page_size=10))
    assert len(sent) == 2
    assert len(page.items) == 5
    assert list(page.items) == [a.get_pattern("t", p.id) for p in page.items]
    assert sorted(len(p.intents) for p in page.items) == [1, 1, 1, 1, 2]


def test_get_capability_reads_its_patterns_intents_in_one_round_trip(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """GetCapability over a shared store: the capability, its members' counters, the best
    member's record, then the first intents of the patterns it lists in one query (docs/api.md,
    Capabilities). Before: a round trip per listed pattern until the view had its texts (43
    statements here, the patterns' intents nearly all one text). The texts are those the
    reads a pattern at a time give."""
    a = replicas("a")
    for n in range(40):
        a.record("t", make_record(f"r{n}", "Read JSON file", JSON_TOOLS, code=f"f{n}()"))
    a.record("t", make_record("r40", "Open the JSON file", JSON_TOOLS, code="f3()"))
    [capability] = a.list_capabilities("t", PageRequest()).items
    sent = _queries(a, monkeypatch)
    view = a.get_capability("t", capability.id)
    assert len(sent) == 4
    assert view.pattern_count == 40
    repo = a._state.repo
    one_at_a_time = IntentRows.first_of_patterns(repo.intents, "t", view.pattern_ids, 50, 500)
    assert view.intents == tuple(dict.fromkeys(i.text for i in one_at_a_time))
    assert set(view.intents) == {"Read JSON file", "Open the JSON file"}


def test_a_replica_suggests_its_own_writes_at_once_through_its_view_cache(
    replicas: Callable[[str], Engine],
) -> None:
    a = replicas("a")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert _views(a, "t", "Read JSON file") == [(saved.pattern_id, 1, [1])]  # now cached
    a.record("t", make_record("r2", "Read JSON file", JSON_TOOLS))  # a duplicate intent
    assert _views(a, "t", "Read JSON file") == [(saved.pattern_id, 2, [2])]
    a.record("t", make_record("r3", "Fetch the config document", JSON_TOOLS))  # a new one
    assert _views(a, "t", "Read JSON file") == [(saved.pattern_id, 3, [1, 2])]


def _shown_view_reads(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The patterns of each read of views (record, counters, shown intents) from now on."""
    kv = engine._state.store.kv
    read = kv.shown_view_rows
    reads: list[int] = []

    def counted(keys: Any, *args: Any, **kw: Any) -> Any:
        reads.append(len(keys))
        return read(keys, *args, **kw)

    monkeypatch.setattr(kv, "shown_view_rows", counted)
    return reads


def test_the_follower_leaves_the_views_of_the_replicas_own_writes_cached(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, Replicas: a replica's commit drops the views it wrote; its follower,
    meeting those rows in the change feed, leaves the view read since cached (it dropped it a
    second time, so the next Suggest read the pattern again). Another replica's write to the
    same pattern is still dropped."""
    a, b = replicas("a"), replicas("b")
    catch_up = _paused(a, monkeypatch)
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    read = _shown_view_reads(a, monkeypatch)
    assert _views(a, "t", "Read JSON file") == [(saved.pattern_id, 1, [1])]
    assert len(read) == 1  # the commit dropped its view
    catch_up()  # meets a's own write in the change feed
    assert _views(a, "t", "Read JSON file") == [(saved.pattern_id, 1, [1])]
    assert len(read) == 1  # still cached (2 before)
    a.record("t", make_record("r2", "Read JSON file", JSON_TOOLS))
    assert _views(a, "t", "Read JSON file") == [(saved.pattern_id, 2, [2])]
    catch_up()
    assert _views(a, "t", "Read JSON file") == [(saved.pattern_id, 2, [2])]
    assert len(read) == 2  # one read for the second commit, none for the feed
    b.record("t", make_record("r3", "Read JSON file", JSON_TOOLS))  # another replica's
    catch_up()
    assert _views(a, "t", "Read JSON file") == [(saved.pattern_id, 3, [3])]
    assert len(read) == 3


def test_a_count_committed_after_a_later_one_reaches_the_followers(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, Replicas: the change feed is read by transaction snapshot, not by an
    id greater than the last seen. A's count of p is held open after its statements ran (the
    server has its rows, uncommitted), B's count of q (another tenant: no row in common)
    commits, C's follower reads it; then A commits: C's follower reads A's count too (its
    view of p shows it; the ranking table follows the same rows)."""
    a, b, c = replicas("a"), replicas("b"), replicas("c")
    p = a.record("t", make_record("p1", "Read JSON file", JSON_TOOLS))
    q = b.record("u", make_record("q1", "Send the weekly mail", MAIL_TOOLS))
    assert eventually(lambda: _views(c, "t", "Read JSON file") == [(p.pattern_id, 1, [1])])
    assert eventually(lambda: _views(c, "u", "Send the weekly mail") == [(q.pattern_id, 1, [1])])
    statements = _store._apply
    ran, release = threading.Event(), threading.Event()

    def held(conn: Any, ops: Any) -> None:
        statements(conn, ops)
        if threading.current_thread().name == "held":
            with conn.pipeline() as pipeline:
                pipeline.sync()  # the statements ran on the server
            ran.set()
            release.wait(WAIT_SECONDS)

    monkeypatch.setattr(_store, "_apply", held)
    holder = threading.Thread(
        target=lambda: a.record("t", make_record("p2", "Read JSON file", JSON_TOOLS)),
        name="held",
    )
    holder.start()
    try:
        assert ran.wait(WAIT_SECONDS)
        b.record("u", make_record("q2", "Send the weekly mail", MAIL_TOOLS))
        expected_q = [(q.pattern_id, 2, [2])]
        assert eventually(lambda: _views(c, "u", "Send the weekly mail") == expected_q)
        assert _views(c, "t", "Read JSON file") == [(p.pattern_id, 1, [1])]
    finally:
        release.set()
        holder.join()
    assert eventually(lambda: _views(c, "t", "Read JSON file") == [(p.pattern_id, 2, [2])])


def test_a_follower_far_behind_reads_what_changed_meanwhile_a_bounded_page_at_a_time(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, Replicas: B's follower is paused while 300 pattern records and 3,000
    counters rows change (a replica cut off for a while); its catch-up read every one in one
    statement (3,301 rows, each record with its code: unbounded by anything but the time it
    was behind). Now no statement returns more than a page of each family, and every view B
    had cached of those patterns is dropped, those of the last pages too."""
    a, b = replicas("a"), replicas("b")
    catch_up = _paused(b, monkeypatch)
    repo = a._state.repo
    ids = [f"p{n:04}" for n in range(3000)]

    def write(usage: int) -> None:
        ops = [repo.patterns.put_counters("t", p, PatternCounters(usage=usage)) for p in ids]
        for p in ids[:300]:
            record = PatternRecord(
                id=p, code_hash=p, template="f()", original_code="f()", language="python",
                tools_used=("fs.read",), params=(), parameter_schema_json="{}",
                capability_id="cap", first_seen_ms=0,
            )  # fmt: skip
            ops.append(repo.patterns.put_pattern("t", record))
        a._state.store.write(ops)

    write(1)
    catch_up()
    views = b._state.repo.views
    assert all(v is not None for v in views.shown_views("t", ids[:300]))  # now cached
    write(2)
    returned: list[int] = []
    transactions = b._state.store.transactions
    rows = transactions.rows

    def counted(query: Any, params: Any = ()) -> Any:
        found = rows(query, params)
        returned.append(len(found))
        return found

    monkeypatch.setattr(transactions, "rows", counted)
    catch_up()
    assert max(returned) <= 100 + 1000 + 1  # a page of records and of counters, the snapshot
    assert [v.counters.usage for v in views.shown_views("t", ids[:300]) if v] == [2] * 300


def test_another_replicas_writes_reach_the_view_cache_within_the_follower_lag(
    replicas: Callable[[str], Engine],
) -> None:
    """b has the pattern's view cached; a counts it, bumps its intent, adds one, and deletes
    it: b shows each once its follower has read it."""
    a, b = replicas("a"), replicas("b")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert eventually(lambda: _views(b, "t", "Read JSON file") == [(saved.pattern_id, 1, [1])])
    a.record("t", make_record("r2", "Read JSON file", JSON_TOOLS))
    assert eventually(lambda: _views(b, "t", "Read JSON file") == [(saved.pattern_id, 2, [2])])
    a.record("t", make_record("r3", "Fetch the config document", JSON_TOOLS))
    expected = [(saved.pattern_id, 3, [1, 2])]
    assert eventually(lambda: _views(b, "t", "Read JSON file") == expected)
    a.delete_pattern("t", saved.pattern_id)
    assert eventually(lambda: _views(b, "t", "Read JSON file") == [])


def test_a_request_id_resent_after_its_pattern_was_deleted_writes_nothing(
    replicas: Callable[[str], Engine],
) -> None:
    """A capture over the shared store reads no request id ahead: its commit refuses one
    applied before. Resent after its pattern was deleted, it answers the first answer without
    the gone pattern, and neither creates the pattern again nor counts anything."""
    a, b = replicas("a"), replicas("b")
    first = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert first.new_pattern
    again = b.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert (again.replayed, again.pattern_id) == (True, first.pattern_id)
    a.delete_pattern("t", first.pattern_id)
    after = b.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert (after.replayed, after.pattern_id, after.capability_id) == (True, "", "")
    assert a.list_patterns("t", PageRequest()).items == ()
    stats = b.stats("t")
    assert (stats.executions, stats.patterns, stats.intents) == (1, 0, 0)
    assert suggested(b, "t", "Read JSON file") == []


def test_a_deletion_on_one_replica_erases_the_failures_another_logged(
    replicas: Callable[[str], Engine],
) -> None:
    """A user's deletion erases the failure log's entries of the pattern's runs, whichever
    replica logged them; the other entries and the count of failures logged stay."""
    a, b = replicas("a"), replicas("b")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    a.record("t", make_record("r2", "Read JSON file", JSON_TOOLS, failed={"json.parse"}))
    b.record("t", make_record("r3", "Send the mail", MAIL_TOOLS, failed={"mail.send"}))
    assert [f.request_id for f in a.list_failures("t", PageRequest()).items] == ["r3", "r2"]
    b.delete_pattern("t", saved.pattern_id)
    for engine in (a, b):
        listed = engine.list_failures("t", PageRequest(page_size=1))
        assert ([f.request_id for f in listed.items], listed.next_cursor) == (["r3"], "")
    assert a.stats("t").failures_logged == 2


def test_available_tools_retrieve_among_permitted_patterns_across_replicas(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Context filters inside retrieval on the shared store (docs/ranking.md, Context filters):
    a permitted pattern far from the unrestricted shortlist (overfetch 1) is suggested by the
    replica that wrote it and by the other one, which learnt it from the store."""
    clock = Clock()
    tiny = RankingConfig(overfetch=1)
    a = open_engine(tmp_path / "a", clock, store=postgres_dsn, ranking=tiny)
    b = open_engine(tmp_path / "b", clock, store=postgres_dsn, ranking=tiny)
    try:
        for n in range(20):
            a.record("t", make_record(f"i{n}", f"Read JSON file {n}", JSON_TOOLS))
        sent = a.record("t", make_record("m", "Compose and send a mail", MAIL_TOOLS))
        query = SuggestQuery(
            "Read the JSON file", k=1, min_match=0.0, available_tools=tuple(MAIL_TOOLS)
        )
        assert suggested(a, "t", "Read the JSON file") != [sent.pattern_id]

        def found_by(engine: Engine) -> bool:
            answer = engine.suggest("t", query).suggestions
            return [s.pattern.id for s in answer] == [sent.pattern_id]

        assert found_by(a)
        assert eventually(lambda: found_by(b))
    finally:
        a.close()
        b.close()


def test_a_new_pattern_joins_a_crowded_capability_of_another_replica_reading_few_intents(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/capture.md, "Grouping a new pattern when the index settles it", over a shared store.
    A records 100 patterns of one request (code written anew each run: their intents tie)
    while B's follower is held back; B's new pattern still joins their capability (B's index
    is brought up to date from the op log under the group lock), and the next one reads fewer
    than 10 stored intents (every tied intent before: 101)."""
    a, b = replicas("a"), replicas("b")
    follower = b._state.follower
    assert follower is not None
    monkeypatch.setattr(follower, "catch_up", lambda: 0)  # B's follower thread applies nothing

    def run(n: int) -> Any:
        return make_record(f"r{n}", "Read JSON file", JSON_TOOLS, code=f"f{n}()")

    crowded = {a.record("t", run(n)).capability_id for n in range(100)}
    assert len(crowded) == 1
    assert b.record("t", run(100)).capability_id in crowded
    store = b._state.store
    read = intents_read(store, monkeypatch)
    assert b.record("t", run(101)).capability_id in crowded
    assert sum(read) < 10


def test_a_new_pattern_finds_its_capability_among_many_another_replica_wrote_just_before(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over 64 capabilities of one tool signature the grouping asks the vector index for the
    nearest intents: B's index is brought up to date first, so with B's follower held back
    B's new pattern still joins the capability A just made for the same request."""
    a, b = replicas("a"), replicas("b")
    follower = b._state.follower
    assert follower is not None
    monkeypatch.setattr(follower, "catch_up", lambda: 0)  # B's follower thread applies nothing

    def run(n: int, intent: str) -> Any:
        return make_record(f"r{n}", intent, JSON_TOOLS, code=f"f{n}()")

    made = [a.record("t", run(n, f"job{n} q{n * 7} z{n * 13}")).capability_id for n in range(70)]
    assert len(set(made)) == 70
    assert b.record("t", run(70, "job69 q483 z897")).capability_id == made[69]


def test_a_near_duplicate_of_another_replicas_intent_is_found_reading_few_intents(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/capture.md, rule 5's near-duplicate, over a shared store. A gives one pattern 60
    distinct intents while B's follower is held back; B's run of that pattern with one of A's
    intents bumps A's mapping (B's index is brought up to date from the op log under the
    pattern lock), reading fewer than 30 stored intents (all 60 before)."""
    a, b = replicas("a"), replicas("b")
    follower = b._state.follower
    assert follower is not None
    monkeypatch.setattr(follower, "catch_up", lambda: 0)  # B's follower thread applies nothing
    words = [f"w{n}x{n * 7}q" for n in range(60)]
    for n, word in enumerate(words):
        a.record("t", make_record(f"a{n}", f"{word} {word}z {word}y", JSON_TOOLS))
    [pattern] = a.list_patterns("t", PageRequest()).items
    assert pattern.intent_count == 60
    store = b._state.store
    read = intents_read(store, monkeypatch)
    with_pattern = store.kv.pattern_for_hash

    def counted_with_pattern(*args: Any) -> Any:
        found = with_pattern(*args)
        read.append(len(found[2]))
        return found

    monkeypatch.setattr(store.kv, "pattern_for_hash", counted_with_pattern)
    word = words[30]
    assert b.record("t", make_record("b1", f"{word} {word}z {word}y", JSON_TOOLS)).pattern_id == (
        pattern.id
    )
    assert sum(read) < 30  # 60 before: every intent came with the pattern's record
    [after] = b.list_patterns("t", PageRequest()).items
    assert after.intent_count == 60  # bumped, no new intent
    assert after.intents[0].hit_count == 2  # the most hit shown first


def _paused(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Pause `engine`'s follower thread (its catch-ups apply nothing; one under way ends
    first); returns the real catch-up, for the test to call when it chooses."""
    follower = engine._state.follower
    assert follower is not None
    catch_up = follower.catch_up
    monkeypatch.setattr(follower, "catch_up", lambda: 0)
    with follower._lock:
        pass
    return catch_up


def _lagging(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """`engine`'s index lags the store: its follower applies nothing, and a capture's own
    catch-up finds the follower held (the case `_near.index_is_current` answers False)."""
    follower = engine._state.follower
    assert follower is not None
    monkeypatch.setattr(follower, "catch_up", lambda: 0)
    monkeypatch.setattr(follower, "catch_up_tenant", lambda tenant, timeout: False)


@pytest.mark.parametrize("intents", [3, 20])
def test_a_near_duplicate_on_a_lagging_replica_is_found_as_before(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch, intents: int
) -> None:
    """docs/capture.md, "Rule 5 on a shared store": B's index holds none of A's intents and
    cannot be brought up to date; a store of fewer than `LAGGING_READ` intents is read whole,
    so B's run with one of A's intents bumps it, as when every intent was read."""
    a, b = replicas("a"), replicas("b")
    _lagging(b, monkeypatch)
    words = [f"w{n}x{n * 7}q" for n in range(intents)]
    for n, word in enumerate(words):
        a.record("t", make_record(f"a{n}", f"{word} {word}z {word}y", JSON_TOOLS))
    word = words[-1]
    b.record("t", make_record("b1", f"{word} {word}z {word}y", JSON_TOOLS))
    [after] = b.list_patterns("t", PageRequest()).items
    assert after.intent_count == intents  # bumped, no new intent
    assert after.intents[0].hit_count == 2


@pytest.mark.parametrize("new_pattern", [False, True], ids=["rule-5", "grouping"])
def test_a_capture_on_a_lagging_replica_reads_a_bounded_number_of_intents(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch, new_pattern: bool
) -> None:
    """B's index lags and cannot catch up: its rule 5 check of a pattern of 40 intents, and the
    grouping of a new pattern among capabilities of 40 patterns, read at most `LAGGING_READ`
    stored intents (set to 8 here) and the index's candidates (none: it holds none of A's),
    not every intent of the patterns compared (40 before: the cost grew with the tenant's
    intents)."""
    a, b = replicas("a"), replicas("b")
    _lagging(b, monkeypatch)
    monkeypatch.setattr(_near, "LAGGING_READ", 8)
    words = [f"w{n}x{n * 7}q" for n in range(40)]
    for n, word in enumerate(words):
        code = f"f{n}()" if new_pattern else None
        a.record("t", make_record(f"a{n}", f"{word} {word}z {word}y", JSON_TOOLS, code=code))
    read = rows_read(b._state.store, monkeypatch)
    code = "g()" if new_pattern else None
    result = b.record("t", make_record("b1", "read a file", JSON_TOOLS, code=code))
    assert result.outcome == (CaptureOutcome.SAVED if new_pattern else CaptureOutcome.COUNTED)
    assert read.get(CF_INTENTS, 0) <= 8


def test_a_replica_cut_off_longer_than_the_op_log_is_kept_rebuilds_what_it_missed(
    replicas: Callable[[str], Engine],
    postgres_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/storage.md, "Op log gaps". B's follower applies nothing while A records patterns
    of two tenants and deletes one B had indexed; their entries age past `OPLOG_KEEP` and a
    third replica's start trims them; A records one more of tenant t. When B's follower
    resumes (Suggests running on B meanwhile) it cannot apply what was trimmed: it rebuilds
    both tenants' indexes from the store, so B suggests A's new patterns and no longer the
    deleted one, and follows the op log from there on."""
    a, b = replicas("a"), replicas("b")
    gone = a.record("t", make_record("r1", "Send the weekly mail", MAIL_TOOLS))
    assert eventually(lambda: suggested(b, "t", "Send the weekly mail") == [gone.pattern_id])
    follower = b._state.follower
    assert follower is not None
    monkeypatch.setattr(follower, "catch_up", lambda: 0)  # B cut off from the store
    saved = a.record("t", make_record("r2", "Read JSON file", JSON_TOOLS))
    other = a.record("u", make_record("r2", "Read JSON file", JSON_TOOLS))
    a.delete_pattern("t", gone.pattern_id)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("UPDATE pml_oplog SET written_at = written_at - interval '2 days'")
    replicas("c")  # its start trims the op log
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM pml_oplog").fetchone() == (0,)
    after = a.record("t", make_record("r3", "Compose a mail", MAIL_TOOLS))
    stop = threading.Event()
    errors: list[BaseException] = []

    def suggest_meanwhile() -> None:
        while not stop.is_set():
            try:
                suggested(b, "t", "Read JSON file")
            except BaseException as error:  # reported below
                errors.append(error)
                return

    reader = threading.Thread(target=suggest_meanwhile)
    reader.start()
    try:
        monkeypatch.undo()  # B reconnects
        assert eventually(lambda: suggested(b, "t", "Read JSON file") == [saved.pattern_id])
        assert eventually(lambda: suggested(b, "u", "Read JSON file") == [other.pattern_id])
    finally:
        stop.set()
        reader.join()
    assert errors == []
    assert suggested(b, "t", "Compose a mail") == [after.pattern_id]
    assert suggested(b, "t", "Send the weekly mail") in ([], [after.pattern_id])
    assert gone.pattern_id not in suggested(b, "t", "Send the weekly mail")
    with pytest.raises(NotFoundError):
        b.get_pattern("t", gone.pattern_id)
    assert follower.rebuilds == 2
    lag = b.admin.follower_lag()  # what /metrics reads (pml_follower_rebuilds_total)
    assert lag is not None
    assert lag.rebuilds == 2
    assert "trimmed before this replica applied them" in caplog.text
    latest = a.record("u", make_record("r4", "Compose a mail", MAIL_TOOLS))
    assert eventually(lambda: suggested(b, "u", "Compose a mail") == [latest.pattern_id])
    assert follower.rebuilds == 2


def test_a_replica_behind_notices_an_op_log_entry_trimmed_between_two_kept(
    replicas: Callable[[str], Engine], postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, "Op log gaps": `written_at` is the server's wall clock, which can step
    back, so an entry can be older than the one before it, and a trim by age take it and keep
    its neighbours. B's follower, behind, then read the entries after its cursor starting at
    `cursor + 1`, applied them, and never had the trimmed one's intent (only a first entry
    past `cursor + 1` counted as a gap): it now rebuilds the tenant."""
    a, b = replicas("a"), replicas("b")
    follower = b._state.follower
    assert follower is not None
    monkeypatch.setattr(follower, "catch_up", lambda: 0)  # B behind from here on
    with follower._lock:  # a catch-up under way ends first
        pass
    saved = [
        a.record("t", make_record(f"r{n}", intent, JSON_TOOLS, code=f"f{n}()"))
        for n, intent in enumerate(["Read JSON file", "Send the weekly mail", "Fetch a page"])
    ]
    cursor = follower.cursor("t")
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE pml_oplog SET written_at = written_at - interval '2 days'"
            " WHERE tenant = 't' AND seq = %s",
            (cursor + 2,),
        )
    replicas("c")  # its start trims the op log: the middle entry only
    monkeypatch.undo()
    assert eventually(lambda: follower.catch_up() >= 0 and follower.lag().behind == 0)
    for record, intent in zip(
        saved, ["Read JSON file", "Send the weekly mail", "Fetch a page"], strict=True
    ):
        assert suggested(b, "t", intent)[:1] == [record.pattern_id]
    assert follower.rebuilds == 1


def test_a_capture_on_a_replica_cut_off_longer_than_the_op_log_is_kept_groups_right(
    replicas: Callable[[str], Engine], postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, "Op log gaps", met by a capture's catch-up (grouping brings the index
    up to date under the group lock): A's capability was recorded while B's follower applied
    nothing, and its entries were trimmed since; B's new pattern of it still joins it (the
    catch-up finds the gap and rebuilds the tenant's indexes, where the cursor alone found
    nothing to apply and grouped from an index without A's intents)."""
    a, b = replicas("a"), replicas("b")
    follower = b._state.follower
    assert follower is not None
    monkeypatch.setattr(follower, "catch_up", lambda: 0)  # B cut off from the store
    first = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS, code="f1()"))
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("UPDATE pml_oplog SET written_at = written_at - interval '2 days'")
    replicas("c")  # its start trims the op log
    joined = b.record("t", make_record("r2", "Read JSON file", JSON_TOOLS, code="f2()"))
    assert joined.capability_id == first.capability_id
    assert follower.rebuilds == 1


def test_a_crowded_capability_of_another_replica_is_answered_bounded_and_exact(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/api.md, Capabilities, over a shared store: A records 300 patterns of one capability;
    B's GetCapability counts them all and sums every run, names at most 100 and reads at most
    the 50 intents its texts need (every member's intents before); B's ListPatterns with the
    capability pages through all 300."""
    a, b = replicas("a"), replicas("b")
    tools = ["fs.read"]
    records = [
        make_record(f"r{n}", f"Read file {n}", tools, code=f"{code_for(tools)}\nr0.f{n};")
        for n in range(300)
    ]
    capabilities = set()
    for start in range(0, len(records), 64):
        for result in a.record_many("t", records[start : start + 64]):
            assert not isinstance(result, Exception)
            capabilities.add(result.capability_id)
    (capability_id,) = capabilities
    assert eventually(lambda: b.stats("t").patterns == 300)
    read = intents_read(b._state.repo.store, monkeypatch)
    view = b.get_capability("t", capability_id)
    assert (view.pattern_count, view.usage_count, view.success_count) == (300, 300, 300)
    assert len(view.pattern_ids) == 100
    assert len(view.intents) == 50
    assert sum(read) <= 50
    seen: list[str] = []
    cursor = ""
    while True:
        page = b.list_patterns("t", PageRequest(page_size=128, cursor=cursor), capability_id)
        seen += [p.id for p in page.items]
        if not (cursor := page.next_cursor):
            break
    assert len(set(seen)) == 300


def test_a_replica_shows_a_pattern_of_many_intents_as_the_other_reading_few(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/capture.md, "The intents a view shows", over a shared store: A gives one pattern 60
    distinct intents, some hit again; B's Suggest and GetPattern show the same 32 of most hits
    and `intent_count` as A's, reading at most 32 stored intents (all 60 before), and a
    ListPatternIntents page reads its own rows only."""
    a, b = replicas("a"), replicas("b")
    words = [f"w{n}x{n * 7}q" for n in range(60)]
    for n, word in enumerate(words):
        a.record("t", make_record(f"a{n}", f"{word} {word}z {word}y", JSON_TOOLS))
    for n in range(59, 0, -9):
        a.record("t", make_record(f"again{n}", f"{words[n]} {words[n]}z {words[n]}y", JSON_TOOLS))
    [pattern] = a.list_patterns("t", PageRequest()).items
    assert eventually(lambda: b.get_pattern("t", pattern.id).usage_count == 67)
    read = intents_read(b._state.store, monkeypatch)
    got = b.get_pattern("t", pattern.id)
    assert sum(read) <= SHOWN_INTENTS
    assert got == a.get_pattern("t", pattern.id)
    assert got.intent_count == 60
    assert len(got.intents) == SHOWN_INTENTS
    assert got.intents[0].hit_count == 2
    read.clear()
    query = f"{words[5]} {words[5]}z {words[5]}y"
    assert eventually(lambda: suggested(b, "t", query) == [pattern.id])
    read.clear()
    [shown] = b.suggest("t", SuggestQuery(query)).suggestions
    assert sum(read) <= SHOWN_INTENTS
    assert shown.pattern == got
    read.clear()
    page = b.pattern_intents("t", pattern.id, PageRequest(page_size=10))
    assert sum(read) <= 11
    assert [i.id for i in page.items] == sorted(i.id for i in page.items)
    assert page.next_cursor == page.items[-1].id


def test_a_replica_reads_a_view_its_cache_lacks_in_one_query(
    replicas: Callable[[str], Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, Replicas: a pattern's view this replica has not cached (its record,
    counters and the intents they name) is one query (two before: the record and counters,
    then the intents), as GetPattern's read is; what it shows is what the other replica shows.
    Counters an older build wrote take a second query, for their intents, and show the same."""
    a, b = replicas("a"), replicas("b")
    for n in range(40):
        word = f"w{n}x{n * 7}q"
        a.record("t", make_record(f"a{n}", f"{word} {word}z {word}y", JSON_TOOLS))
    a.record("t", make_record("a-again", "w3x21q w3x21qz w3x21qy", JSON_TOOLS))
    [pattern] = a.list_patterns("t", PageRequest()).items
    expected = a.get_pattern("t", pattern.id)
    assert (expected.intent_count, expected.intents[0].hit_count) == (40, 2)
    assert eventually(lambda: b.get_pattern("t", pattern.id).usage_count == 41)

    queries: list[object] = []
    transactions = b._state.repo.shared_store.transactions
    rows = transactions.rows
    caller = threading.get_ident()

    def counted(query: Any, params: Any = ()) -> Any:
        # the follower's thread polls the same transactions: only this test's reads count
        if threading.get_ident() == caller:
            queries.append(query)
        return rows(query, params)

    monkeypatch.setattr(transactions, "rows", counted)
    assert b.get_pattern("t", pattern.id) == expected
    assert len(queries) == 1  # 2 before
    views = b._state.repo.views
    queries.clear()
    [missed] = views.shown_views("t", [pattern.id])
    assert len(queries) == 1  # 2 before
    assert missed is not None
    assert [i.id for i in missed.intents] == [int(i.id[4:], 16) for i in expected.intents]
    queries.clear()
    assert views.shown_views("t", [pattern.id]) == [missed]  # now cached
    assert queries == []

    # counters holding a NUL, escaped (a tag's): PostgreSQL refuses them as JSON text
    a.record("t", make_record("a-nul", "w3x21q w3x21qz w3x21qy", JSON_TOOLS, tags=("x\x00y",)))
    raw = b._state.store.get(CF_COUNTERS, tenant_key("t", pattern.id))
    assert raw is not None
    assert b"\\u0000" in raw
    expected = a.get_pattern("t", pattern.id)
    assert eventually(lambda: b.get_pattern("t", pattern.id).usage_count == 42)
    queries.clear()
    assert b.get_pattern("t", pattern.id) == expected
    assert len(queries) == 1

    # an older build's counters: no summary to name the intents
    store = b._state.store
    key = tenant_key("t", pattern.id)
    raw = store.get(CF_COUNTERS, key)
    assert raw is not None
    stripped = raw.replace(b',"intent_count":', b',"x":').split(b',"x":')[0] + b"}"
    assert PatternCounters.from_json(stripped).top_intents is None
    store.write([(CF_COUNTERS, key, stripped)])
    queries.clear()
    assert b.get_pattern("t", pattern.id) == expected
    assert len(queries) == 2


LOG_BOUND = 4


def _failure_rows(dsn: str, tenant: str) -> int:
    prefix = tenant_prefix(tenant)
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pml_failures WHERE key >= %s AND key < %s",
            (prefix, prefix_end(prefix)),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _logging_failures(engine: Engine, tag: str, stop: threading.Event) -> threading.Thread:
    """A thread that captures failed runs of new patterns through `engine` until `stop`."""

    def work() -> None:
        n = 0
        while not stop.is_set():
            code = f"send_{tag}{n}()"
            engine.record(
                "t",
                make_record(f"{tag}{n}", "Send it", MAIL_TOOLS, code=code, failed={"mail.send"}),
            )
            n += 1

    return threading.Thread(target=work)


def test_the_failure_log_keeps_its_bound_under_deletions_and_failures_on_two_replicas(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """docs/storage.md, Data left on disk: a deletion on replica A erases the failure log's
    entries of its pattern while replica B's failed runs trim the oldest, and both replicas
    log failures at once: the log never holds more than `failure_log_size` rows (an erasure
    put back an entry the trim had just removed, and two replicas' trims removed the same
    oldest entry, each a row over the bound)."""
    clock = Clock()
    a = open_engine(tmp_path / "a", clock, store=postgres_dsn, failure_log_size=LOG_BOUND)
    b = open_engine(tmp_path / "b", clock, store=postgres_dsn, failure_log_size=LOG_BOUND)
    try:
        worst = 0
        for round_ in range(12):
            code = f"read_{round_}()"
            saved = a.record(
                "t", make_record(f"p{round_}", "Read JSON file", JSON_TOOLS, code=code)
            )
            for n in range(LOG_BOUND):
                failed = make_record(
                    f"p{round_}-{n}", "Read JSON file", JSON_TOOLS, code=code, failed={"json.parse"}
                )
                a.record("t", failed)
            stop = threading.Event()
            loggers = [_logging_failures(b, f"b{round_}-", stop)]
            if round_ % 2:  # odd rounds: A logs failures too
                loggers.append(_logging_failures(a, f"a{round_}-", stop))
            for thread in loggers:
                thread.start()
            a.delete_pattern("t", saved.pattern_id)
            time.sleep(0.05)
            stop.set()
            for thread in loggers:
                thread.join()
            worst = max(worst, _failure_rows(postgres_dsn, "t"))
        assert worst <= LOG_BOUND
        listed = a.list_failures("t", PageRequest(page_size=100)).items
        assert 0 < len(listed) <= LOG_BOUND
    finally:
        a.close()
        b.close()


def test_a_deletion_on_one_replica_erases_the_tool_errors_of_answers_another_stored(
    replicas: Callable[[str], Engine], postgres_dsn: str
) -> None:
    """docs/storage.md, Data left on disk: the stored answers of a deleted pattern's runs lose
    their tool errors, whichever replica stored them (an UPDATE of the rows: the family's
    INSERT would refuse the request id); a resent id is answered `replayed` without them."""
    a, b = replicas("a"), replicas("b")
    saved = a.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    failed = make_record("r2", "Read JSON file", JSON_TOOLS, failed={"json.parse"})
    assert a.record("t", failed).tool_failures
    other = b.record("t", make_record("r3", "Send the mail", MAIL_TOOLS, failed={"mail.send"}))
    b.delete_pattern("t", saved.pattern_id)
    with psycopg.connect(postgres_dsn) as conn:
        rows = dict(conn.execute("SELECT key, value FROM pml_requests").fetchall())
    answers = {bytes(k)[-2:].decode(): bytes(v) for k, v in rows.items()}
    assert sorted(answers) == ["r1", "r2", "r3"]
    assert b"json.parse" not in answers["r2"]
    assert b"mail.send" in answers["r3"]
    again = a.record("t", failed)
    assert (again.replayed, again.pattern_id, again.tool_failures) == (True, "", ())
    mail = make_record("r3", "Send the mail", MAIL_TOOLS, failed={"mail.send"})
    assert b.record("t", mail).tool_failures == other.tool_failures
