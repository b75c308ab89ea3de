"""The PostgreSQL store: a `seam.StoreBackend` several pml replicas share.

Transactions. A write lock the engine takes (`locks`: the pattern and capability-group locks)
is also a transaction-scoped advisory lock of this thread's transaction, begun with the first
such lock; the batch the engine then submits is written and committed in that transaction, so
the advisory locks are released only once the batch is visible: another replica taking the
same lock reads what this one committed (the in-process striped locks' guarantee, across
processes). Locks are always taken in the engine's order (pattern, then group), so replicas
cannot wait on each other in a cycle; the rows every writer touches (op log head, counter
ceilings, tenant stats) are written last, in that fixed order.

Exactly-once. A batch's request id row is inserted first (`ON CONFLICT DO NOTHING RETURNING`):
when another replica already recorded it, nothing is written and `RequestAlreadyAppliedError`
carries the stored answer.

Counts. Tenant stats arrive as deltas and are added in SQL; counter ceilings are raised with
GREATEST in the same transaction as the counters. Both are striped rows (the writing backend's
stripe), so concurrent captures neither queue on one row lock held through each commit's flush
nor keep PostgreSQL from flushing their commits together. Id allocators are sequences.

Op log. Each batch's op log entries take their sequence numbers from the tenant's head row
(`UPDATE ... RETURNING` inside the transaction): commit order is sequence order, so a follower
reading `seq > cursor` never skips an entry. A NOTIFY after the commit wakes followers (one per
burst of commits, from a notifier thread; see `_wake_followers`); it is not durable,
so they poll too.

No read cache here: another replica may change any row, and the database is the only copy.
(The repository keeps the pattern views Suggest shows, `_views`: this replica's commits drop
what they wrote through `watch_commits`, the follower what other replicas wrote.)
Connection failures surface as `UnavailableError` (reads) or `StoreClosedError` (writes, which
the engine reports as UNAVAILABLE): the caller retries, the pool reconnects.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool

from pml_server.domain import json_form
from pml_server.domain.errors import UnavailableError
from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_HASHES,
    CF_INTENTS,
    CF_OPLOG,
    CF_PATTERNS,
    CF_REQUESTS,
    prefix_end,
    split_tenant,
)
from pml_server.storage.postgres._dsn import describe, has_password, scrub
from pml_server.storage.postgres._schema import (
    FOLLOWED_FAMILIES,
    ROW_STRIPES,
    SEQUENCE_STEP,
    STATS_COLUMNS,
    migrate,
    table_of,
)
from pml_server.storage.seam import (
    LocalLocks,
    Op,
    RequestAlreadyAppliedError,
    StoreClosedError,
    WriteTicket,
    finished_ticket,
)

# Pseudo-family of the stats deltas a batch adds (`SharedRepository.put_stats`).
CF_STATS_DELTA = "tenant_stats_delta"
# Pseudo-family of index snapshots: tenant -> u64 op log position + index bytes, stored only
# when no snapshot at a later position is (`SharedRepository.put_snapshot`).
CF_INDEX_SNAPSHOT = "index_snapshot"
NOTIFY_CHANNEL = "pml_oplog"
DEFAULT_POOL_SIZE = 8
CONNECT_TIMEOUT_SECONDS = 5
_SCAN_PAGE = 2000
# Op log entries older than this are trimmed at start: a replica restarting later rebuilds from
# its snapshot and the intents table, which the restore reads anyway.
OPLOG_KEEP = "1 day"
# Lost or refused connections, a restarting server, deadlock or serialization victims: the
# caller may retry (UNAVAILABLE); anything else is a bug and surfaces as such.
_RETRYABLE = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.TransactionRollback,
)
_POOL_ERRORS = (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)
# The stripe of the per-tenant rows every capture updates (see `_schema`): this connection's.
_STRIPE = f"pg_backend_pid() %% {ROW_STRIPES}"  # %% : psycopg placeholders

Connection = psycopg.Connection[tuple[Any, ...]]


@dataclass
class Changes:
    """What `PostgresStore.changes` read: rows changed since a snapshot, and its own."""

    snapshot: str
    patterns: list[tuple[bytes, bytes]] = field(default_factory=list)
    counters: list[tuple[bytes, bytes]] = field(default_factory=list)
    intent_keys: list[bytes] = field(default_factory=list)


class StoreUnreachableError(OSError):
    """The database cannot be reached at start (the message names the host, never the
    password)."""


@dataclass
class _Transaction:
    conn: Connection
    depth: int = 0
    open: bool = True
    # BEGIN and the advisory locks taken but not sent yet: they go out with the transaction's
    # next statement, in one round trip (the server grants a lock before it runs what follows).
    pending: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)


def _advisory_key(name: str, key: tuple[str, ...]) -> int:
    digest = hashlib.blake2b("\x1f".join((name, *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class _SharedLock:
    """One `lock_for` result: the in-process stripe, then the advisory lock in this thread's
    transaction (see the module docstring)."""

    def __init__(self, store: PostgresStore, local: threading.Lock, key: int) -> None:
        self._store = store
        self._local = local
        self._key = key

    def __enter__(self) -> _SharedLock:
        self._local.acquire()
        try:
            self._store._lock_in_transaction(self._key)
        except BaseException:
            self._local.release()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self._store._leave_lock()
        finally:
            self._local.release()


class SharedLocks:
    def __init__(self, store: PostgresStore, name: str, stripes: int) -> None:
        self._store = store
        self._name = name
        self._stripes = LocalLocks(stripes)

    def lock_for(self, *key: str) -> _SharedLock:
        return _SharedLock(
            self._store, self._stripes.lock_for(*key), _advisory_key(self._name, key)
        )


class SequenceAllocator:
    """Ids from a PostgreSQL sequence stepping by `SEQUENCE_STEP`: each `nextval` reserves a
    block for this process, so ids are unique across replicas and never reused."""

    def __init__(self, store: PostgresStore, sequence: str) -> None:
        self._store = store
        self._sequence = sequence
        self._lock = threading.Lock()
        self._next = 1
        self._end = 0  # exclusive
        self._last = 0

    def next(self) -> int:
        with self._lock:
            if self._next >= self._end:
                start = self._store._nextval(self._sequence)
                self._next, self._end = start, start + SEQUENCE_STEP
            value = self._next
            self._next += 1
            self._last = value
            return value

    def last_issued(self) -> int:
        with self._lock:
            return self._last


class PostgresStore:
    """An open PostgreSQL store at `dsn` (migrated at open)."""

    shared = True

    def __init__(self, dsn: str, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        self._dsn = dsn
        self._where = describe(dsn)
        try:
            with psycopg.connect(
                dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
            ) as conn:
                self.schema_version = migrate(conn, self._where)
                conn.execute(
                    f"DELETE FROM pml_oplog WHERE written_at < now() - interval '{OPLOG_KEEP}'"
                )
        except psycopg.OperationalError as error:
            reason = scrub(str(error).strip().splitlines()[0] if str(error) else "", dsn)
            raise StoreUnreachableError(
                f"cannot reach PostgreSQL at {self._where}: {reason}"
            ) from None
        self._pool: psycopg_pool.ConnectionPool[Connection] = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_SECONDS},
            timeout=CONNECT_TIMEOUT_SECONDS,
            open=False,
            name="pml",
        )
        self._pool.open()
        self._local = threading.local()
        self._closed = False
        self._sequence_lock = threading.Lock()
        self._notifier_lock = threading.Lock()
        self._notifier: threading.Thread | None = None
        self._notify_wanted = threading.Event()
        self._sequence_conn: Connection | None = None
        self._commit_watchers: list[Callable[[Sequence[Op]], None]] = []

    @property
    def location(self) -> str:
        return f"postgresql://{self._where}"

    @property
    def dsn_has_password(self) -> bool:
        return has_password(self._dsn)

    # ---- connections and transactions --------------------------------------------------------

    def current_transaction(self) -> object | None:
        """This thread's open write transaction (an identity to compare), if any."""
        return self._transaction()

    def _transaction(self) -> _Transaction | None:
        tx: _Transaction | None = getattr(self._local, "tx", None)
        return tx if tx is not None and tx.open else None

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """This thread's open transaction's connection, else a pooled one (autocommit)."""
        tx = self._transaction()
        if tx is not None:
            try:
                yield tx.conn
            except _RETRYABLE as error:  # the locks' release rolls the transaction back
                raise UnavailableError(self._unavailable(error)) from error
            return
        try:
            with self._pool.connection() as conn:
                yield conn
        except _RETRYABLE + _POOL_ERRORS as error:
            raise UnavailableError(self._unavailable(error)) from error

    def _unavailable(self, error: BaseException) -> str:
        return f"the database at {self._where} is unavailable: {scrub(str(error), self._dsn)}"

    def _lock_in_transaction(self, key: int) -> None:
        tx: _Transaction | None = getattr(self._local, "tx", None)
        if tx is None or not tx.open:
            depth = tx.depth if tx is not None else 0
            try:
                conn = self._pool.getconn()
            except _POOL_ERRORS as error:
                raise UnavailableError(self._unavailable(error)) from error
            tx = _Transaction(conn, depth)
            self._local.tx = tx
            begin = True
        else:
            begin = False
        tx.depth += 1
        if begin:
            tx.pending.append(("BEGIN", ()))
        tx.pending.append(("SELECT pg_advisory_xact_lock(%s)", (key,)))

    def _leave_lock(self) -> None:
        tx: _Transaction | None = getattr(self._local, "tx", None)
        if tx is None:
            return
        tx.depth -= 1
        if tx.depth <= 0:
            self._local.tx = None
            if tx.open:  # locked but nothing submitted: release the advisory locks
                self._end_transaction(tx, rollback=True)

    def _end_transaction(self, tx: _Transaction, rollback: bool) -> None:
        if tx.open:
            tx.open = False
            idle = tx.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if rollback and not idle:
                with contextlib.suppress(psycopg.Error):  # broken: the pool discards it
                    tx.conn.execute("ROLLBACK")
            self._pool.putconn(tx.conn)
        if tx.depth <= 0 and getattr(self._local, "tx", None) is tx:
            self._local.tx = None

    def _rows(self, query: str | bytes, params: Any = ()) -> list[tuple[Any, ...]]:
        """The rows of one read: in this thread's transaction (after its pending BEGIN and
        locks, in the same round trip), else on a pooled connection."""
        with self._reading() as conn:
            tx = self._transaction()
            if tx is None or not tx.pending:
                return conn.execute(query, params).fetchall()
            with conn.pipeline():
                _send_pending(tx)
                cursor = conn.execute(query, params)
            return cursor.fetchall()

    def _rows_pipelined(
        self, queries: Sequence[tuple[str | bytes, Any]]
    ) -> list[list[tuple[Any, ...]]]:
        """The rows of each read, all sent in one pipeline (one round trip)."""
        with self._reading() as conn:
            tx = self._transaction()
            with conn.pipeline():
                if tx is not None:
                    _send_pending(tx)
                cursors = [conn.execute(query, params) for query, params in queries]
            return [cursor.fetchall() for cursor in cursors]

    def _row(self, query: str | bytes, params: Any = ()) -> tuple[Any, ...] | None:
        rows = self._rows(query, params)
        return rows[0] if rows else None

    @contextmanager
    def consistent_reads(self) -> Iterator[None]:
        """This thread's reads inside the block see one snapshot of the database (a
        read-only REPEATABLE READ transaction; its BEGIN goes out with the first read): what
        another replica commits meanwhile is either all seen or not at all. Inside a write
        transaction (or nested) the block changes nothing."""
        if getattr(self._local, "tx", None) is not None:
            yield
            return
        try:
            conn = self._pool.getconn()
        except _POOL_ERRORS as error:
            raise UnavailableError(self._unavailable(error)) from error
        tx = _Transaction(conn, depth=1)
        tx.pending.append(("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", ()))
        self._local.tx = tx
        try:
            yield
        finally:
            tx.depth = 0
            self._end_transaction(tx, rollback=True)

    def changed_rows(self, cf: str, since: str | None) -> tuple[list[tuple[bytes, bytes]], str]:
        """(rows of `cf` written by transactions not visible in the snapshot `since`, the
        snapshot this read saw): following with the returned snapshot never skips a commit,
        whatever order transactions commit in (an id below the snapshot's xmin was visible to
        it; one in progress then is read once it commits). `since` None: only the snapshot.
        `cf` is one of the followed families (pattern records, counters)."""
        assert cf in FOLLOWED_FAMILIES
        if since is None:
            row = self._row("SELECT pg_current_snapshot()::text")
            assert row is not None
            return [], str(row[0])
        row = self._row(
            "SELECT pg_current_snapshot()::text, coalesce(array_agg(key), '{}'),"
            f" coalesce(array_agg(value), '{{}}') FROM {table_of(cf)}"
            " WHERE changed_xid >= pg_snapshot_xmin(%(since)s::pg_snapshot)"
            " AND NOT pg_visible_in_snapshot(changed_xid, %(since)s::pg_snapshot)",
            {"since": since},
        )
        assert row is not None
        snapshot, keys, values = row
        return [(bytes(k), bytes(v)) for k, v in zip(keys, values, strict=True)], str(snapshot)

    def changes(self, since: str) -> Changes:
        """Every pattern record and counters row, and the key of every intent row, written by
        transactions not visible in the snapshot `since` (see `changed_rows`), read in one
        statement: the three share the snapshot returned with them."""
        changed = (
            "changed_xid >= pg_snapshot_xmin(%(since)s::pg_snapshot)"
            " AND NOT pg_visible_in_snapshot(changed_xid, %(since)s::pg_snapshot)"
        )
        rows = self._rows(
            f"SELECT 0, key, value FROM {table_of(CF_PATTERNS)} WHERE {changed}"
            f" UNION ALL SELECT 1, key, value FROM {table_of(CF_COUNTERS)} WHERE {changed}"
            f" UNION ALL SELECT 2, key, NULL FROM {table_of(CF_INTENTS)} WHERE {changed}"
            " UNION ALL SELECT 3, NULL, convert_to(pg_current_snapshot()::text, 'UTF8')",
            {"since": since},
        )
        found = Changes("")
        for kind, key, value in rows:
            if kind == 0:
                found.patterns.append((bytes(key), bytes(value)))
            elif kind == 1:
                found.counters.append((bytes(key), bytes(value)))
            elif kind == 2:
                found.intent_keys.append(bytes(key))
            else:
                found.snapshot = bytes(value).decode()
        return found

    def index_snapshot(self, tenant: str) -> tuple[int, bytes] | None:
        row = self._row(
            "SELECT oplog_seq, data FROM pml_index_snapshots WHERE tenant = %s", (tenant,)
        )
        return None if row is None else (int(row[0]), bytes(row[1]))

    # ---- reads -------------------------------------------------------------------------------

    def get(self, cf: str, key: bytes) -> bytes | None:
        row = self._row(f"SELECT value FROM {table_of(cf)} WHERE key = %s", (key,))
        return None if row is None else bytes(row[0])

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        rows = self._rows(
            f"SELECT key, value FROM {table_of(cf)} WHERE key = ANY(%s)", (list(keys),)
        )
        found = {bytes(k): bytes(v) for k, v in rows}
        return [found.get(key) for key in keys]

    def scan(
        self,
        cf: str,
        prefix: bytes,
        *,
        start: bytes | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        """As `rocks.Store.scan`: key order (or reversed), from `start` on (inclusive; for
        reverse scans the exclusive upper bound), at most `limit`."""
        clauses = ["key >= %s"]
        params: list[Any] = [prefix]
        upper = prefix_end(prefix)
        if upper is not None:
            clauses.append("key < %s")
            params.append(upper)
        if start is not None:
            clauses.append("key < %s" if reverse else "key >= %s")
            params.append(start)
        query = f"SELECT key, value FROM {table_of(cf)} WHERE {' AND '.join(clauses)}"
        query += " ORDER BY key DESC" if reverse else " ORDER BY key"
        if limit is not None:
            query += " LIMIT %s"
            params.append(limit)
        rows = self._rows(query.encode(), params)
        return [(bytes(k), bytes(v)) for k, v in rows]

    def scan_stored(self, cf: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Rows whose key starts with `prefix`, in key order, read a page at a time."""
        after: bytes | None = None
        while True:
            start = prefix if after is None else after + b"\x00"
            page = self.scan(cf, prefix, start=start, limit=_SCAN_PAGE)
            yield from page
            if len(page) < _SCAN_PAGE:
                return
            after = page[-1][0]

    # ---- shared state the repository reads ---------------------------------------------------

    def get_pairs(
        self, first: str, second: str, keys: Sequence[bytes]
    ) -> list[tuple[bytes, bytes] | None]:
        """(value in `first`, value in `second`) of each key, None where either is missing: one
        query where two `get_many` would take two round trips."""
        if not keys:
            return []
        rows = self._rows(
            f"SELECT a.key, a.value, b.value FROM {table_of(first)} a"
            f" JOIN {table_of(second)} b ON b.key = a.key WHERE a.key = ANY(%s)",
            (list(keys),),
        )
        found = {bytes(k): (bytes(a), bytes(b)) for k, a, b in rows}
        return [found.get(key) for key in keys]

    def pairs_and_values(
        self, first: str, second: str, keys: Sequence[bytes], cf: str, values_of: Sequence[bytes]
    ) -> tuple[list[tuple[bytes, bytes] | None], list[bytes | None]]:
        """`get_pairs(first, second, keys)` and `get_many(cf, values_of)` in one round trip
        (two statements in one pipeline)."""
        pairs, values = self._rows_pipelined(
            [
                (
                    f"SELECT a.key, a.value, b.value FROM {table_of(first)} a"
                    f" JOIN {table_of(second)} b ON b.key = a.key WHERE a.key = ANY(%s)",
                    (list(keys),),
                ),
                (
                    f"SELECT key, value FROM {table_of(cf)} WHERE key = ANY(%s)",
                    (list(values_of),),
                ),
            ]
        )
        found_pairs = {bytes(k): (bytes(a), bytes(b)) for k, a, b in pairs}
        found = {bytes(k): bytes(v) for k, v in values}
        return [found_pairs.get(k) for k in keys], [found.get(k) for k in values_of]

    def pattern_for_hash(self, prefix: bytes, code_hash_key: bytes) -> tuple[Any, ...]:
        """(pattern, counters, [intents in key order]) bytes of the pattern a code hash names,
        in one query (three lookups and a scan in the embedded store); `prefix` is the tenant's
        key prefix. (None, None, []) when the hash names none."""
        row = self._row(
            f"SELECT p.value, c.value, (SELECT coalesce(array_agg(i.value ORDER BY i.key), '{{}}')"
            f" FROM {table_of(CF_INTENTS)} i WHERE i.key >= %(prefix)s || h.value || %(sep)s"
            " AND i.key < %(prefix)s || h.value || %(end)s)"
            f" FROM {table_of(CF_HASHES)} h"
            f" LEFT JOIN {table_of(CF_PATTERNS)} p ON p.key = %(prefix)s || h.value"
            f" LEFT JOIN {table_of(CF_COUNTERS)} c ON c.key = %(prefix)s || h.value"
            " WHERE h.key = %(hash)s",
            {"prefix": prefix, "hash": code_hash_key, "sep": b"\x00", "end": b"\x01"},
        )
        if row is None:
            return None, None, []
        pattern, counters, intents = row
        return (
            None if pattern is None else bytes(pattern),
            None if counters is None else bytes(counters),
            [bytes(v) for v in intents],
        )

    def tenant_stats(self, tenant: str) -> dict[str, int]:
        columns = ", ".join(f"sum({c})" for c in STATS_COLUMNS)
        row = self._row(
            f"SELECT count(*), {columns} FROM pml_tenant_stats WHERE tenant = %s", (tenant,)
        )
        if row is None or not row[0]:
            return {}
        return dict(zip(STATS_COLUMNS, map(int, row[1:]), strict=True))

    def counter_ceilings(self, tenant: str) -> tuple[int, int]:
        row = self._row(
            "SELECT coalesce(max(success), 0), coalesce(max(usage), 0)"
            " FROM pml_counter_ceilings WHERE tenant = %s",
            (tenant,),
        )
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def oplog_heads(self) -> dict[str, int]:
        """Each tenant's last committed op log sequence."""
        rows = self._rows("SELECT tenant, seq FROM pml_oplog_head")
        return {str(t): int(s) for t, s in rows}

    def oplog_entries(
        self, tenant: str, after: int, limit: int = 1000
    ) -> list[tuple[int, dict[str, Any], float]]:
        """(seq, op, seconds since it was committed) of the tenant's entries after `after`."""
        rows = self._rows(
            "SELECT seq, op, extract(epoch FROM clock_timestamp() - written_at)"
            " FROM pml_oplog WHERE tenant = %s AND seq > %s ORDER BY seq LIMIT %s",
            (tenant, after, limit),
        )
        return [(int(s), json_form.loads(bytes(op)), float(age)) for s, op, age in rows]

    def all_oplog(self) -> list[tuple[int, dict[str, Any]]]:
        rows = self._rows("SELECT seq, op FROM pml_oplog ORDER BY tenant, seq")
        return [(int(s), json_form.loads(bytes(op))) for s, op in rows]

    def intents_by_id(self, tenant: str, intent_ids: Sequence[int]) -> list[bytes]:
        """The stored intents of `intent_ids` still present (an op's additions)."""
        if not intent_ids:
            return []
        rows = self._rows(
            f"SELECT value FROM {table_of(CF_INTENTS)} WHERE tenant = %s AND intent_id = ANY(%s)",
            (tenant, list(intent_ids)),
        )
        return [bytes(r[0]) for r in rows]

    def listen(self) -> Connection:
        """A dedicated connection LISTENing for op log commits (`notifies()` wakes on them)."""
        conn = psycopg.connect(self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS)
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return conn

    # ---- writes ------------------------------------------------------------------------------

    def watch_commits(self, watcher: Callable[[Sequence[Op]], None]) -> None:
        """Call `watcher` with every batch `submit` was given, once its commit is over (done,
        refused or of unknown outcome) and before `submit` returns (a cache of this replica's
        drops what it wrote before the caller is answered)."""
        self._commit_watchers.append(watcher)

    def submit(self, ops: Sequence[Op]) -> WriteTicket:
        """Write and commit `ops` as one transaction (this thread's, when its locks opened one)
        before returning: the ticket is already durable."""
        if self._closed:
            raise StoreClosedError("store is closed")
        try:
            return self._submit(ops)
        finally:
            for watcher in self._commit_watchers:
                watcher(ops)

    def _submit(self, ops: Sequence[Op]) -> WriteTicket:
        tx = self._transaction()
        try:
            if tx is not None:
                try:
                    _commit(tx.conn, ops, begin=False, pending=tx)
                finally:
                    self._end_transaction(tx, rollback=True)  # a no-op once committed
            else:
                with self._pool.connection() as conn:
                    try:
                        _commit(conn, ops, begin=True)
                    except BaseException:
                        with contextlib.suppress(psycopg.Error):
                            conn.execute("ROLLBACK")
                        raise
        except psycopg.errors.UniqueViolation as error:
            if error.diag.table_name != table_of(CF_REQUESTS):
                raise
            key = next(k for cf, k, v in ops if cf == CF_REQUESTS and v is not None)
            stored = self.get(CF_REQUESTS, key)  # committed by the writer this one waited for
            raise RequestAlreadyAppliedError(stored or b"") from None
        except _RETRYABLE + _POOL_ERRORS as error:
            raise StoreClosedError(self._unavailable(error)) from error
        if any(cf == CF_OPLOG and value is not None for cf, _, value in ops):
            self._wake_followers()
        return finished_ticket()

    def _wake_followers(self) -> None:
        """NOTIFY the followers, after the commit and outside it: a NOTIFY in the writing
        transaction takes a database-wide lock until that transaction's commit is flushed,
        which queued every op log writer behind every other. One notifier thread sends one
        NOTIFY per burst of commits (it is only a wake-up; followers poll as well)."""
        with self._notifier_lock:
            if self._notifier is None:
                self._notifier = threading.Thread(
                    target=self._notify_loop, name="pml-notifier", daemon=True
                )
                self._notifier.start()
        self._notify_wanted.set()

    def _notify_loop(self) -> None:
        conn: Connection | None = None
        while True:
            self._notify_wanted.wait()
            if self._closed:
                break
            self._notify_wanted.clear()
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
                    )
                conn.execute("SELECT pg_notify(%s, '')", (NOTIFY_CHANNEL,))
            except psycopg.Error:  # the followers' poll covers it; retried at the next commit
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def write(self, ops: Sequence[Op]) -> None:
        self.submit(ops).wait()

    def writes_held(self) -> AbstractContextManager[None]:
        """Nothing to hold: every submit commits its own transaction before returning."""
        return contextlib.nullcontext()

    def checkpoint(self, dest: Path) -> int:
        raise ValueError(
            "a shared PostgreSQL store is backed up with PostgreSQL's own tools (pg_dump, or a "
            "base backup), not by pml"
        )

    def locks(self, name: str, stripes: int) -> SharedLocks:
        return SharedLocks(self, name, stripes)

    def allocator(self, name: str) -> SequenceAllocator:
        return SequenceAllocator(self, f"pml_ids_{name}")

    def _nextval(self, sequence: str) -> int:
        """A sequence step on a connection of its own (not transactional anyway). Not from
        the pool: the allocator is called by captures that each hold a pooled connection for
        their transaction, and a full pool would leave the step waiting for one of them."""
        with self._sequence_lock:
            try:
                if self._sequence_conn is None or self._sequence_conn.closed:
                    self._sequence_conn = psycopg.connect(
                        self._dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
                    )
                row = self._sequence_conn.execute(f"SELECT nextval('{sequence}')").fetchone()
            except _RETRYABLE as error:
                if self._sequence_conn is not None:
                    self._sequence_conn.close()
                raise UnavailableError(self._unavailable(error)) from error
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._notify_wanted.set()  # the notifier exits
        self._pool.close()
        with self._sequence_lock:
            if self._sequence_conn is not None:
                self._sequence_conn.close()


def _send_pending(tx: _Transaction) -> None:
    """Queue the transaction's unsent BEGIN and advisory locks (inside a pipeline)."""
    for statement, params in tx.pending:
        tx.conn.execute(statement.encode(), params or None)
    tx.pending.clear()


def _commit(
    conn: Connection, ops: Sequence[Op], begin: bool, pending: _Transaction | None = None
) -> None:
    """Every statement of the batch and its COMMIT in one pipeline (one round trip), after
    the transaction's unsent BEGIN and locks if any. The request id row is a plain INSERT: a
    duplicate aborts the whole transaction (UniqueViolation), which is what makes the batch
    exactly-once."""
    with conn.pipeline():
        if pending is not None:
            _send_pending(pending)
        if begin:
            conn.execute("BEGIN")
        _apply(conn, ops)
        conn.execute("COMMIT")


def _apply(conn: Connection, ops: Sequence[Op]) -> None:
    """Every statement of one batch, inside the caller's transaction (see the module
    docstring for the order)."""
    final: dict[tuple[str, bytes], bytes | None] = {}
    oplog: list[bytes] = []
    deltas: dict[str, dict[str, int]] = {}
    ceilings: dict[str, tuple[int, int]] = {}
    snapshots: list[tuple[str, int, bytes]] = []
    for cf, key, value in ops:
        if cf == CF_OPLOG:
            if value is not None:  # deletions: the store trims the log itself
                oplog.append(value)
        elif cf == CF_INDEX_SNAPSHOT:
            assert value is not None
            snapshots.append((key.decode(), int.from_bytes(value[:8], "big"), value[8:]))
        elif cf == CF_STATS_DELTA:
            assert value is not None
            into = deltas.setdefault(key.decode(), {})
            for name, delta in json_form.loads(value).items():
                into[name] = into.get(name, 0) + int(delta)
        else:
            final[(cf, key)] = value
            if cf == CF_COUNTERS and value is not None:
                counts = json_form.loads(value)
                tenant = split_tenant(key)[0]
                old = ceilings.get(tenant, (0, 0))
                ceilings[tenant] = (max(old[0], counts["success"]), max(old[1], counts["usage"]))
    _insert_requests_first(conn, [(k, v) for (cf, k), v in final.items() if cf == CF_REQUESTS])
    for cf in sorted({cf for cf, _ in final} - {CF_REQUESTS}):
        rows = [(k, v) for (family, k), v in final.items() if family == cf]
        _write_family(conn, cf, rows)
    requests_deleted = [k for (cf, k), v in final.items() if cf == CF_REQUESTS and v is None]
    if requests_deleted:
        conn.execute(
            f"DELETE FROM {table_of(CF_REQUESTS)} WHERE key = ANY(%s)", (requests_deleted,)
        )
    _append_oplog(conn, oplog)
    for tenant in sorted(ceilings):
        success, usage = ceilings[tenant]
        conn.execute(
            "INSERT INTO pml_counter_ceilings AS c (tenant, stripe, success, usage)"
            f" VALUES (%s, {_STRIPE}, %s, %s) ON CONFLICT (tenant, stripe)"
            " DO UPDATE SET success = GREATEST(c.success, excluded.success),"
            " usage = GREATEST(c.usage, excluded.usage)"
            " WHERE c.success < excluded.success OR c.usage < excluded.usage",
            (tenant, success, usage),
        )
    for tenant in sorted(deltas):
        _add_stats(conn, tenant, deltas[tenant])
    for tenant, position, data in snapshots:
        # compare-and-set on the op log position: a replica behind never replaces the
        # snapshot of one that had applied more
        conn.execute(
            "INSERT INTO pml_index_snapshots AS s (tenant, oplog_seq, data) VALUES (%s, %s, %s)"
            " ON CONFLICT (tenant) DO UPDATE SET oplog_seq = excluded.oplog_seq,"
            " data = excluded.data WHERE s.oplog_seq <= excluded.oplog_seq",
            (tenant, position, data),
        )


def _insert_requests_first(conn: Connection, rows: list[tuple[bytes, bytes | None]]) -> None:
    """First in the transaction: a second writer of the same id waits here for the first to
    commit, then fails with UniqueViolation before anything of its batch counts."""
    for key, value in rows:
        if value is not None:
            conn.execute(
                f"INSERT INTO {table_of(CF_REQUESTS)} (key, value) VALUES (%s, %s)", (key, value)
            )


def _write_family(conn: Connection, cf: str, rows: list[tuple[bytes, bytes | None]]) -> None:
    """One statement for the family's deletions and one for its upserts. A single row (a
    counted capture's counters, its intent) goes as plain parameters: dumping arrays is
    Python code in psycopg, a scalar is not, and a capture's CPU is mostly the driver's."""
    table = table_of(cf)
    deleted = [k for k, v in rows if v is None]
    put = [(k, v) for k, v in rows if v is not None]
    if deleted:
        conn.execute(f"DELETE FROM {table} WHERE key = ANY(%s)", (deleted,))
    if not put:
        return
    one = len(put) == 1
    keys = [k for k, _ in put]
    values = [v for _, v in put]
    if cf == CF_INTENTS:
        tenants = [split_tenant(k)[0] for k in keys]
        ids = [int.from_bytes(k[-8:], "big", signed=True) for k in keys]
        source = (
            "VALUES (%s, %s, %s, %s)"
            if one
            else "SELECT * FROM unnest(%s::bytea[], %s::bytea[], %s::text[], %s::bigint[])"
        )
        conn.execute(
            f"INSERT INTO {table} (key, value, tenant, intent_id) {source}"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value,"
            " changed_xid = pg_current_xact_id()".encode(),
            (keys[0], values[0], tenants[0], ids[0]) if one else (keys, values, tenants, ids),
        )
        return
    followed = ", changed_xid = pg_current_xact_id()" if cf in FOLLOWED_FAMILIES else ""
    source = "VALUES (%s, %s)" if one else "SELECT * FROM unnest(%s::bytea[], %s::bytea[])"
    conn.execute(
        f"INSERT INTO {table} (key, value) {source}"
        f" ON CONFLICT (key) DO UPDATE SET value = excluded.value{followed}".encode(),
        (keys[0], values[0]) if one else (keys, values),
    )


def _append_oplog(conn: Connection, entries: list[bytes]) -> None:
    by_tenant: dict[str, list[bytes]] = {}
    for raw in entries:
        by_tenant.setdefault(str(json_form.loads(raw)["tenant"]), []).append(raw)
    for tenant in sorted(by_tenant):
        rows = by_tenant[tenant]
        # the head row's update takes the sequence numbers: committed in sequence order
        conn.execute(
            "WITH head AS (INSERT INTO pml_oplog_head AS h (tenant, seq) VALUES (%(t)s, %(n)s)"
            " ON CONFLICT (tenant) DO UPDATE SET seq = h.seq + excluded.seq RETURNING seq)"
            " INSERT INTO pml_oplog (tenant, seq, op)"
            " SELECT %(t)s, head.seq - %(n)s + e.ord, e.op"
            " FROM head, unnest(%(ops)s::bytea[]) WITH ORDINALITY AS e(op, ord)",
            {"t": tenant, "n": len(rows), "ops": rows},
        )


def _add_stats(conn: Connection, tenant: str, delta: dict[str, int]) -> None:
    columns = [c for c in STATS_COLUMNS if delta.get(c)]
    if not columns:
        return
    names = ", ".join(columns)
    placeholders = ", ".join(["%s"] * len(columns))
    sets = ", ".join(f"{c} = s.{c} + excluded.{c}" for c in columns)
    conn.execute(
        f"INSERT INTO pml_tenant_stats AS s (tenant, stripe, {names})"
        f" VALUES (%s, {_STRIPE}, {placeholders})"
        f" ON CONFLICT (tenant, stripe) DO UPDATE SET {sets}",
        (tenant, *[delta[c] for c in columns]),
    )
