"""The store seam's contract (`storage.seam.StoreBackend`), run against both backends: the
embedded RocksDB store and the shared PostgreSQL one (a real throwaway cluster). Then what only
the shared store promises: exactness across several stores ("replicas") on one database."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from pml_server.domain import json_form
from pml_server.domain.records import PatternCounters, TenantStats
from pml_server.storage import SchemaVersionError as RocksSchemaVersionError
from pml_server.storage import Store, StoreBackend, repository_for
from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_HASHES,
    CF_INTENTS,
    CF_META,
    CF_OPLOG,
    CF_PATTERNS,
    CF_REQUEST_REWRITE,
    CF_REQUESTS,
    CF_SESSIONS,
    rewrite_value,
    tenant_key,
    tenant_prefix,
)
from pml_server.storage.postgres import (
    SCHEMA_VERSION,
    PostgresStore,
    SchemaVersionError,
    SharedRepository,
    StoreUnreachableError,
    _oplog,
)
from pml_server.storage.postgres._oplog import Changes, FeedPosition
from pml_server.storage.postgres._schema import MIGRATIONS, SchemaMismatchError
from pml_server.storage.seam import Locks, Op, RequestAlreadyAppliedError
from testing.postgres_cluster import free_port
from tests.storage.conftest import Opener


def test_batches_are_atomic_visible_and_survive_reopen(opener: Opener) -> None:
    store = opener()
    store.write([(CF_PATTERNS, b"a", b"1"), (CF_META, b"x", b"2"), (CF_PATTERNS, b"b", b"3")])
    store.write([(CF_PATTERNS, b"b", None), (CF_PATTERNS, b"c", b"4"), (CF_PATTERNS, b"c", b"5")])
    assert store.get(CF_PATTERNS, b"a") == b"1"
    assert store.get(CF_PATTERNS, b"b") is None
    assert store.get(CF_PATTERNS, b"c") == b"5"  # the last write of a key in a batch wins
    store.close()
    again = opener()
    assert again.get(CF_META, b"x") == b"2"
    assert again.get(CF_META, b"a") is None  # families are separate key spaces
    assert again.get_many(CF_PATTERNS, [b"c", b"zz", b"a"]) == [b"5", None, b"1"]


def test_writes_held_are_visible_at_once_and_durable_once_waited(opener: Opener) -> None:
    store = opener()
    with store.writes_held():
        tickets = [store.submit([(CF_PATTERNS, bytes([i]), bytes([i]))]) for i in range(5)]
        assert store.get(CF_PATTERNS, b"\x03") == b"\x03"  # the next capture reads it
        store.write([(CF_META, b"mark", b"1")])  # a caller inside may still wait for a write
    for ticket in tickets:
        ticket.wait()
    store.close()
    again = opener()
    assert again.get_many(CF_PATTERNS, [bytes([i]) for i in range(5)]) == [
        bytes([i]) for i in range(5)
    ]
    assert again.get(CF_META, b"mark") == b"1"


def test_scans_keep_key_order_bounds_and_tenants_apart(opener: Opener) -> None:
    store = opener()
    t1, t2 = tenant_prefix("t"), tenant_prefix("tt")
    store.write([(CF_PATTERNS, t1 + bytes([i]), bytes([i])) for i in range(10)])
    store.write([(CF_PATTERNS, t2 + b"x", b"other tenant"), (CF_PATTERNS, t1 + b"\xff", b"ff")])
    assert [v for _, v in store.scan(CF_PATTERNS, t1)][:10] == [bytes([i]) for i in range(10)]
    assert b"other tenant" not in [v for _, v in store.scan(CF_PATTERNS, t1)]
    page = store.scan(CF_PATTERNS, t1, start=t1 + bytes([4]), limit=3)
    assert [v for _, v in page] == [b"\x04", b"\x05", b"\x06"]
    assert [v for _, v in store.scan(CF_PATTERNS, t1, reverse=True, limit=2)] == [b"ff", b"\x09"]
    before = store.scan(CF_PATTERNS, t1, start=t1 + bytes([3]), reverse=True)
    assert [v for _, v in before] == [b"\x02", b"\x01", b"\x00"]
    assert [v for _, v in store.scan_stored(CF_PATTERNS, t2)] == [b"other tenant"]


def test_scan_stored_streams_every_row_in_order(opener: Opener) -> None:
    store = opener()
    prefix = tenant_prefix("many")
    keys = [prefix + i.to_bytes(4, "big") for i in range(4500)]  # more than one page
    store.write([(CF_PATTERNS, k, b"v") for k in keys])
    assert [k for k, _ in store.scan_stored(CF_PATTERNS, prefix)] == keys


def test_allocated_ids_are_unique_and_never_reused_after_reopen(opener: Opener) -> None:
    store = opener()
    allocator = store.allocator("intent")
    issued = [allocator.next() for _ in range(5)]
    assert issued == sorted(set(issued))
    assert allocator.last_issued() == issued[-1]
    store.close()
    assert opener().allocator("intent").next() > issued[-1]


def _count_under_locks(stores: list[StoreBackend], writers: int, each: int) -> None:
    """`writers` threads (spread over `stores`) each add 1 to one stored counter `each` times,
    read-modify-write under the pattern lock."""
    key = tenant_key("t", "p")
    locks = [store.locks("pattern", 16) for store in stores]  # one set per store, as an engine

    def work(store: StoreBackend, locks: Locks) -> None:
        for _ in range(each):
            with locks.lock_for("t", "p"):
                raw = store.get(CF_COUNTERS, key)
                counters = PatternCounters() if raw is None else PatternCounters.from_json(raw)
                counters.usage += 1
                counters.success += 1
                store.submit([(CF_COUNTERS, key, counters.to_json())]).wait()

    threads = [
        threading.Thread(target=work, args=(stores[i % len(stores)], locks[i % len(stores)]))
        for i in range(writers)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_counter_read_modify_write_under_the_lock_is_exact(opener: Opener) -> None:
    store = opener()
    _count_under_locks([store], writers=8, each=25)
    raw = store.get(CF_COUNTERS, tenant_key("t", "p"))
    assert raw is not None
    assert PatternCounters.from_json(raw).usage == 200
    assert repository_for(store).patterns.counter_ceilings("t") == (200, 200)


def _deletes_only_unchanged_rows(store: StoreBackend) -> None:
    a, b, c, d = (tenant_key("t", k) for k in "abcd")
    store.write([(CF_SESSIONS, a, b"1"), (CF_SESSIONS, b, b"1"), (CF_SESSIONS, c, b"1")])
    rewritten = store.submit([(CF_SESSIONS, b, b"2")])  # maybe still queued: compared too
    rows = [(a, b"1"), (b, b"1"), (c, b"0"), (d, b"1")]
    assert store.delete_unchanged(CF_SESSIONS, rows) == 1
    rewritten.wait()
    assert store.delete_unchanged(CF_SESSIONS, []) == 0
    assert store.get_many(CF_SESSIONS, [a, b, c, d]) == [None, b"2", b"1", None]


def test_delete_unchanged_deletes_only_the_rows_still_as_given(opener: Opener) -> None:
    """A sweep's compare-and-delete (docs/ranking.md, Sessions): a row rewritten since it was
    read, or read with another value, is kept; one never stored is no deletion; it survives a
    reopen."""
    store = opener()
    _deletes_only_unchanged_rows(store)
    store.close()
    assert opener().get(CF_SESSIONS, tenant_key("t", "a")) is None


def test_delete_unchanged_with_fast_durability(tmp_path: Path) -> None:
    store = Store(tmp_path / "db", "fast")  # writes in the caller's thread, not group-committed
    try:
        _deletes_only_unchanged_rows(store)
    finally:
        store.close()


# One rule for a batch on both stores (docs/storage.md, Batches apply in order): each op of
# a batch sees the ones before it; a rewrite of a stored answer (`keys.CF_REQUEST_REWRITE`)
# compares with the key's value as the batch's earlier ops left it. Each case: the answer
# stored before (None: none), the batch's ops on that one key, what it holds after.
_A, _B, _C, _D = b"answer A", b"answer B", b"answer C", b"answer D"
_Step = Callable[[bytes], Op]


def _put(value: bytes) -> _Step:
    return lambda key: (CF_REQUESTS, key, value)


def _delete(key: bytes) -> Op:
    return (CF_REQUESTS, key, None)


def _rewrite(read: bytes, result: bytes) -> _Step:
    return lambda key: (CF_REQUEST_REWRITE, key, rewrite_value(read, result))


_IN_ORDER_CASES: dict[str, tuple[bytes | None, list[_Step], bytes | None]] = {
    "put then rewrite": (None, [_put(_A), _rewrite(_A, _B)], _B),
    "put then a rewrite read otherwise": (None, [_put(_A), _rewrite(_C, _B)], _A),
    "rewrite then put": (None, [_rewrite(_A, _B), _put(_C)], _C),
    "delete then rewrite": (_A, [_delete, _rewrite(_A, _B)], None),
    "rewrite then delete": (_A, [_rewrite(_A, _B), _delete], None),
    "two rewrites, the second of the first's": (_A, [_rewrite(_A, _B), _rewrite(_B, _C)], _C),
    "two rewrites of the same read": (_A, [_rewrite(_A, _B), _rewrite(_A, _C)], _B),
    "rewrite of a missing key": (None, [_rewrite(_A, _B)], None),
    "rewrite of the stored answer": (_A, [_rewrite(_A, _B)], _B),
    "rewrite of an answer changed since read": (_D, [_rewrite(_A, _B)], _D),
    "delete, put, rewrite": (_A, [_delete, _put(_C), _rewrite(_C, _D)], _D),
}


def test_a_batch_applies_in_order_rewrites_included(opener: Opener) -> None:
    """The same batches give the same answers on both stores, each case alone and all of
    them in one batch (distinct keys), read back at once and after a reopen."""
    store = opener()
    keys = {
        (tenant, name): tenant_key(tenant, f"req-{i}")
        for tenant in ("alone", "together")
        for i, name in enumerate(_IN_ORDER_CASES)
    }
    before: list[Op] = [
        (CF_REQUESTS, key, _IN_ORDER_CASES[name][0])
        for (_, name), key in keys.items()
        if _IN_ORDER_CASES[name][0] is not None
    ]
    store.write(before)
    for name, (_, steps, _) in _IN_ORDER_CASES.items():
        store.write([step(keys["alone", name]) for step in steps])
    together = [
        step(keys["together", name])
        for name, (_, steps, _) in _IN_ORDER_CASES.items()
        for step in steps
    ]
    store.write(together)
    expected = {case: _IN_ORDER_CASES[case[1]][2] for case in keys}
    assert {case: store.get(CF_REQUESTS, key) for case, key in keys.items()} == expected
    store.close()
    again = opener()
    assert {case: again.get(CF_REQUESTS, key) for case, key in keys.items()} == expected


def test_a_newer_schema_is_refused_rocksdb(tmp_path: Path) -> None:
    import struct

    store = Store(tmp_path)
    store.write([(CF_META, b"meta/schema_version", struct.pack(">I", 99))])
    store.close()
    with pytest.raises(RocksSchemaVersionError, match="99"):
        Store(tmp_path)


# ---- the shared store alone: several stores on one database ---------------------------------


def test_a_newer_schema_is_refused_postgresql(postgres_dsn: str) -> None:
    PostgresStore(postgres_dsn).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pml_schema_migrations (version) VALUES (99)")
    with pytest.raises(SchemaVersionError, match="schema version 99"):
        PostgresStore(postgres_dsn)


@pytest.mark.parametrize("version", [3, 4])
def test_a_migration_half_applied_outside_pml_is_refused_naming_it(
    postgres_dsn: str, version: int
) -> None:
    """A version is one transaction, so only a change outside pml (a partial restore, DDL run
    by hand) leaves part of it without its row in pml_schema_migrations: the start failed on
    the raw DuplicateTable or DuplicateColumn (a traceback, not a line naming the database).
    It is refused naming both versions and the object; nothing is changed, so restoring the
    row lets it open."""
    PostgresStore(postgres_dsn).close()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pml_schema_migrations WHERE version >= %s", (version,))
    with pytest.raises(SchemaMismatchError, match=f"records schema version {version - 1}") as err:
        PostgresStore(postgres_dsn)
    assert f"part of version {version}" in str(err.value)
    assert "already exists" in str(err.value)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT max(version) FROM pml_schema_migrations").fetchall()
        assert rows == [(version - 1,)]
        for v in range(version, SCHEMA_VERSION + 1):
            conn.execute("INSERT INTO pml_schema_migrations (version) VALUES (%s)", (v,))
    PostgresStore(postgres_dsn).close()


def test_migrations_apply_once_and_reopen(postgres_dsn: str) -> None:
    first, second = PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT version FROM pml_schema_migrations").fetchall()
    assert rows == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
    first.close()
    second.close()


def test_a_version_1_database_keeps_its_counts_when_migrated(postgres_dsn: str) -> None:
    """Version 2 stripes the stats and ceilings rows: the rows a version 1 pml wrote stay."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE pml_schema_migrations (version int PRIMARY KEY,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")  # fmt: skip
        for statement in MIGRATIONS[1]:
            conn.execute(statement.encode())
        conn.execute("INSERT INTO pml_schema_migrations (version) VALUES (1)")
        conn.execute("INSERT INTO pml_tenant_stats (tenant, executions) VALUES ('t', 7)")
        conn.execute("INSERT INTO pml_counter_ceilings VALUES ('t', 3, 4)")
    store = PostgresStore(postgres_dsn)
    repo = SharedRepository(store)
    store.write([repo.meta.put_stats("t", TenantStats(), {"executions": 1})])
    store.write([repo.patterns.put_counters("t", "p", PatternCounters(success=2, usage=9))])
    assert repo.meta.stats("t").executions == 8
    assert repo.patterns.counter_ceilings("t") == (3, 9)
    store.close()


def test_unreachable_database_names_the_host_never_the_password() -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(StoreUnreachableError) as caught:
        PostgresStore(f"postgresql://pml:hunter2secret@127.0.0.1:{port}/pml")
    message = str(caught.value)
    assert f"127.0.0.1:{port}/pml" in message
    assert "hunter2secret" not in message
    assert "hunter2secret" not in repr(caught.value)


def test_counters_are_exact_across_two_stores(postgres_dsn: str) -> None:
    stores: list[StoreBackend] = [PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)]
    _count_under_locks(stores, writers=8, each=25)
    raw = stores[1].get(CF_COUNTERS, tenant_key("t", "p"))
    assert raw is not None
    assert PatternCounters.from_json(raw).usage == 200
    for store in stores:
        store.close()


def test_a_request_id_is_recorded_once_across_stores(postgres_dsn: str) -> None:
    stores = [PostgresStore(postgres_dsn) for _ in range(4)]
    key = tenant_key("t", "req-1")
    outcomes: list[bytes] = []
    lock = threading.Lock()

    def send(store: PostgresStore, mark: bytes) -> None:
        try:
            store.write([(CF_REQUESTS, key, mark), (CF_PATTERNS, tenant_key("t", mark), b"x")])
            applied = mark
        except RequestAlreadyAppliedError as error:
            applied = b"replayed:" + error.result
        with lock:
            outcomes.append(applied)

    threads = [
        threading.Thread(target=send, args=(stores[i % 4], f"w{i}".encode())) for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if not o.startswith(b"replayed:")]
    assert len(winners) == 1
    assert all(o == b"replayed:" + winners[0] for o in outcomes if o not in winners)
    # nothing else of a refused batch was written
    written = stores[0].scan(CF_PATTERNS, tenant_prefix("t"))
    assert [k for k, _ in written] == [tenant_key("t", winners[0])]
    for store in stores:
        store.close()


def test_stats_deltas_add_up_across_stores(postgres_dsn: str) -> None:
    stores = [PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)]
    repos = [SharedRepository(s) for s in stores]

    def count(i: int) -> None:
        repo = repos[i % 2]
        for _ in range(50):
            repo.store.write(
                [repo.meta.put_stats("t", TenantStats(), {"executions": 1, "patterns": 2})]
            )

    threads = [threading.Thread(target=count, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = repos[0].meta.stats("t")
    assert (stats.executions, stats.patterns, stats.intents) == (400, 800, 0)
    assert repos[1].meta.stats("other") == TenantStats()
    for store in stores:
        store.close()


def test_op_log_sequences_follow_commit_order(postgres_dsn: str) -> None:
    """8 writers over 2 stores append op log entries; a follower polling `seq > cursor` while
    they run receives every entry exactly once, in sequence order without gaps."""
    stores = [PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)]
    follower = PostgresStore(postgres_dsn)
    done = threading.Event()
    seen: list[int] = []

    def follow() -> None:
        cursor = 0
        while True:
            finished = done.is_set()
            for seq, op, _ in follower.oplog.entries("t", cursor):
                seen.append(op["ids"][0])
                assert seq == cursor + 1
                cursor = seq
            if finished:
                return

    def write(i: int) -> None:
        for n in range(50):
            entry = json_form.dumps({"tenant": "t", "op": "add", "ids": [i * 1000 + n]})
            stores[i % 2].write([(CF_OPLOG, b"ignored", entry)])

    reader = threading.Thread(target=follow)
    reader.start()
    writers = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()
    assert sorted(seen) == sorted(i * 1000 + n for i in range(8) for n in range(50))
    assert follower.oplog.heads() == {"t": 400}
    for store in (*stores, follower):
        store.close()


def _waiting_on_a_lock(store: PostgresStore) -> bool:
    row = store.transactions.row(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND datname = current_database()"
    )
    return row is not None and row[0] > 0


@pytest.mark.parametrize("tenant_is_new", [False, True], ids=["head-row", "first-entry"])
def test_an_op_log_entry_still_uncommitted_is_never_passed_by_a_later_one(
    postgres_dsn: str, tenant_is_new: bool
) -> None:
    """docs/storage.md, The op log: the classic defect of a feed read `seq > cursor` (a
    sequence value taken at insert, visible only at commit, so a later value committed first
    is read and the earlier one never is) cannot happen here. A transaction is held open after
    appending its entry; another replica's append of the same tenant waits for it (the head
    row), so a follower reading meanwhile sees neither, and both in order once it commits."""
    store, follower = PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)
    if not tenant_is_new:
        store.write([(CF_OPLOG, b"", json_form.dumps({"tenant": "t", "op": "add", "ids": [0]}))])
    base = 0 if tenant_is_new else 1
    first = json_form.dumps({"tenant": "t", "op": "add", "ids": [1]})
    second = json_form.dumps({"tenant": "t", "op": "add", "ids": [2]})
    writer = threading.Thread(target=lambda: store.write([(CF_OPLOG, b"", second)]))
    with psycopg.connect(postgres_dsn) as held:  # a transaction, open until commit()
        _oplog.append(held, [first])
        writer.start()
        deadline = time.monotonic() + 15
        while not _waiting_on_a_lock(follower) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _waiting_on_a_lock(follower)  # the later append waits for the first's commit
        assert follower.oplog.heads().get("t", 0) == base
        assert follower.oplog.entries("t", base) == []
        held.commit()
    writer.join()
    assert follower.oplog.heads() == {"t": base + 2}
    entries = follower.oplog.entries("t", base)
    assert [(seq, op["ids"]) for seq, op, _ in entries] == [(base + 1, [1]), (base + 2, [2])]
    for opened in (store, follower):
        opened.close()


def test_a_replica_behind_never_replaces_a_newer_index_snapshot(postgres_dsn: str) -> None:
    """Each replica snapshots its own index; the stored one is that of the replica which had
    applied the most of the op log, whichever wrote last (it was last-writer-wins)."""
    ahead, behind = PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)
    repos = [SharedRepository(ahead), SharedRepository(behind)]
    repos[0].store.write([repos[0].meta.put_snapshot("t", 40, b"through 40")])
    repos[1].store.write([repos[1].meta.put_snapshot("t", 25, b"through 25")])
    assert repos[1].meta.snapshot("t") == (40, b"through 40")
    repos[1].store.write([repos[1].meta.put_snapshot("t", 40, b"also through 40")])
    repos[1].store.write([repos[1].meta.put_snapshot("t", 41, b"through 41")])
    assert repos[0].meta.snapshot("t") == (41, b"through 41")
    assert repos[0].meta.snapshot("other") is None
    for store in (ahead, behind):
        store.close()


def test_reads_in_one_block_see_one_state_of_the_database(postgres_dsn: str) -> None:
    """Suggest bounds the counters it reads by the tenant's ceilings read first: inside
    `consistent_reads` a commit by another replica in between is not half seen (it was: the
    counters above the ceiling)."""
    reader, writer = PostgresStore(postgres_dsn), PostgresStore(postgres_dsn)
    repos = [SharedRepository(reader), SharedRepository(writer)]

    def count_to(usage: int) -> None:
        counters = PatternCounters(success=usage, usage=usage)
        writer.write([repos[1].patterns.put_counters("t", "p", counters)])

    count_to(1)
    with repos[0].consistent_reads():
        ceiling = repos[0].patterns.counter_ceilings("t")
        count_to(5)  # another replica commits meanwhile
        read = repos[0].patterns.counters("t", "p")
    assert ceiling == (1, 1)
    assert read is not None
    assert read.usage <= ceiling[1]
    assert repos[0].patterns.counter_ceilings("t") == (5, 5)  # after the block: the new state
    for store in (reader, writer):
        store.close()


def test_changed_rows_never_skip_a_commit_whatever_the_commit_order(postgres_dsn: str) -> None:
    """A replica's ranking table follows the pattern and counters rows changed since its last
    read: a transaction that began writing before another one but commits after it is read
    (by the next read), once."""
    store = PostgresStore(postgres_dsn)
    counted = PatternCounters(success=1, usage=1).to_json()
    since = store.oplog.position()
    with psycopg.connect(postgres_dsn) as slow:  # a transaction, open until commit()
        slow.execute(
            "INSERT INTO pml_counters (key, value) VALUES (%s, %s)",
            (tenant_key("t", "slow"), counted),
        )
        store.write([(CF_COUNTERS, tenant_key("t", "fast"), counted)])
        rows, since = store.oplog.changed_rows(CF_COUNTERS, since)
        assert [k for k, _ in rows] == [tenant_key("t", "fast")]
        slow.commit()
    rows, since = store.oplog.changed_rows(CF_COUNTERS, since)
    assert [k for k, _ in rows] == [tenant_key("t", "slow")]
    store.write([(CF_COUNTERS, tenant_key("t", "fast"), PatternCounters(usage=2).to_json())])
    rows, since = store.oplog.changed_rows(CF_COUNTERS, since)
    assert [(k, PatternCounters.from_json(v).usage) for k, v in rows] == [
        (tenant_key("t", "fast"), 2)
    ]
    assert store.oplog.changed_rows(CF_COUNTERS, since)[0] == []
    store.close()


def _changes(store: PostgresStore, since: FeedPosition) -> Changes:
    """Every page of `OpLog.changes` in one."""
    pages = list(store.oplog.changes(since))
    assert len({page.position for page in pages}) == 1
    whole = Changes(pages[0].position)
    for page in pages:
        whole.patterns += page.patterns
        whole.counters += page.counters
        whole.written += page.written
    return whole


def test_changes_are_read_a_bounded_page_at_a_time_every_row_once(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/storage.md, Replicas: a follower far behind reads the rows changed meanwhile a
    page at a time (pages of 3 here), each once, all pages carrying the first one's snapshot;
    a row rewritten between two pages by a transaction the snapshot does not see is read by
    the next `changes`."""
    monkeypatch.setitem(_oplog.CHANGES_PAGE, CF_COUNTERS, 3)
    monkeypatch.setitem(_oplog.CHANGES_PAGE, CF_INTENTS, 3)
    store = PostgresStore(postgres_dsn)
    since = store.oplog.position()
    counters = [tenant_key("t", f"p{n}") for n in range(8)]
    intents = [tenant_key("t", "p0", n.to_bytes(8, "big")) for n in range(4)]
    for n, key in enumerate(counters):  # 8 transactions, one row each
        store.write([(CF_COUNTERS, key, PatternCounters(usage=n).to_json())])
    store.write([(CF_INTENTS, key, b"{}") for key in intents])  # 4 rows of one transaction
    pages = store.oplog.changes(since)
    first = next(pages)
    assert [k for k, _ in first.counters] == counters[:3]
    assert [k for k, _ in first.written if k in intents] == intents[:3]
    store.write([(CF_COUNTERS, counters[5], PatternCounters(usage=50).to_json())])
    rest = list(pages)
    assert max(len(page.written) for page in rest) <= 3
    read = [(k, PatternCounters.from_json(v).usage) for p in [first, *rest] for k, v in p.counters]
    assert read == [(k, n) for n, k in enumerate(counters) if n != 5] + [(counters[5], 50)]
    assert sorted(k for p in [first, *rest] for k, _ in p.written if k in intents) == intents
    assert {page.position for page in rest} == {first.position}
    again = _changes(store, first.position)
    assert [(k, PatternCounters.from_json(v).usage) for k, v in again.counters] == [
        (counters[5], 50)
    ]
    store.close()


def test_a_poll_of_changes_reads_few_blocks_while_a_transaction_stays_open(
    postgres_dsn: str,
) -> None:
    """docs/storage.md, Replicas: a transaction left open (here one that wrote a row, so it
    holds an id) keeps every later snapshot's xmin at its id. A poll of the change feed read
    every row written since from xmin (all 10,000 below: the counters table's every block,
    each poll); it reads from the snapshot's xmax and at the ids in progress then, a few
    blocks however many rows were written since that transaction began."""
    store = PostgresStore(postgres_dsn)
    counted = PatternCounters(usage=1).to_json()
    with psycopg.connect(postgres_dsn) as held:  # open until the end
        held.execute("INSERT INTO pml_counters (key, value) VALUES ('held', '{}')")
        for batch in range(100):
            keys = [tenant_key("t", f"p{batch}-{n}") for n in range(100)]
            store.write([(CF_COUNTERS, key, counted) for key in keys])
        since = store.oplog.position()
        assert _changes(store, since).written == []
        page = _oplog._page_of(1, CF_COUNTERS, after=False)
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            [[[plan]]] = conn.execute(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {page}".encode(),
                {"since": since.snapshot},
            ).fetchall()
        top = plan["Plan"]
        assert top["Shared Hit Blocks"] + top["Shared Read Blocks"] <= 20  # 339 before
        held.rollback()
    store.close()


def test_changes_read_patterns_counters_and_rewritten_intents_in_one_snapshot(
    postgres_dsn: str,
) -> None:
    """What a replica's follower reads at each catch-up: the pattern and counters rows and the
    keys of the intent rows written since its last snapshot (an intent rewritten too: a
    duplicate's hit count), then nothing more until the next write."""
    store = PostgresStore(postgres_dsn)
    since = store.oplog.position()
    intent = tenant_key("t", "p", (7).to_bytes(8, "big"))
    store.write(
        [
            (CF_PATTERNS, tenant_key("t", "p"), b"{}"),
            (CF_COUNTERS, tenant_key("t", "p"), PatternCounters(usage=1).to_json()),
            (CF_INTENTS, intent, b'{"hit_count": 1}'),
        ]
    )
    changes = _changes(store, since)
    assert [k for k, _ in changes.patterns] == [tenant_key("t", "p")]
    assert [k for k, _ in changes.counters] == [tenant_key("t", "p")]
    [writer] = {xid for _, xid in changes.written}  # one transaction wrote the three
    assert sorted(k for k, _ in changes.written) == sorted([tenant_key("t", "p")] * 2 + [intent])
    quiet = _changes(store, changes.position)
    assert (quiet.patterns, quiet.counters, quiet.written) == ([], [], [])
    store.write([(CF_INTENTS, intent, b'{"hit_count": 2}')])  # only the intent row
    rewritten = _changes(store, quiet.position)
    assert (rewritten.patterns, rewritten.counters) == ([], [])
    [(key, again)] = rewritten.written
    assert (key, again > writer) == (intent, True)
    store.close()


def test_a_commit_drops_what_it_wrote_from_the_view_cache_before_submit_returns(
    postgres_dsn: str,
) -> None:
    """The watcher hears each batch once committed, with the transaction the follower's
    change feed then reads its rows with (None for a batch writing no stamped row)."""
    store = PostgresStore(postgres_dsn)
    since = store.oplog.position()
    seen: list[tuple[list[tuple[str, bytes]], int | None]] = []
    store.watch_commits(lambda ops, xid: seen.append(([(cf, key) for cf, key, _ in ops], xid)))
    store.write([(CF_COUNTERS, tenant_key("t", "p"), PatternCounters(usage=1).to_json())])
    [(written, xid)] = seen
    assert written == [(CF_COUNTERS, tenant_key("t", "p"))]
    assert _changes(store, since).written == [(tenant_key("t", "p"), xid)]
    store.write([(CF_HASHES, tenant_key("t", "h"), b"p")])
    assert seen[1] == ([(CF_HASHES, tenant_key("t", "h"))], None)
    store.close()
