"""The shared store's connections: the pool, this thread's transaction, and what runs in it.

A write lock the engine takes (`SharedLocks`) is also a transaction-scoped advisory lock of
this thread's transaction, begun with the first such lock; the batch the engine then submits
is committed in that transaction (`Transactions.commit`), so the advisory locks are released
only once the batch is visible (see `_store` for why). BEGIN and the locks are not sent when
taken: they go out with the transaction's next statement, in one round trip.

Connection failures surface as `UnavailableError` (reads) or `StoreClosedError` (commits,
which the engine reports as UNAVAILABLE): the caller retries, the pool reconnects.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import psycopg_pool

from pml_server.domain.errors import UnavailableError, one_line
from pml_server.storage.postgres._dsn import describe, scrub
from pml_server.storage.postgres._schema import SEQUENCE_STEP
from pml_server.storage.seam import LocalLocks, StoreClosedError

DEFAULT_POOL_SIZE = 8
CONNECT_TIMEOUT_SECONDS = 5
# Lost or refused connections, a restarting server, deadlock or serialization victims: the
# caller may retry (UNAVAILABLE); anything else is a bug and surfaces as such.
RETRYABLE = (
    psycopg.OperationalError,
    psycopg.InterfaceError,
    psycopg.errors.TransactionRollback,
)
POOL_ERRORS = (psycopg_pool.PoolTimeout, psycopg_pool.PoolClosed)
# Every connection's options. No server-side prepared statements (`prepare_threshold`): a
# batch runs in a pipeline that a resent request id aborts (docs/storage.md, The shared store),
# and psycopg records a statement that reached its threshold in such a pipeline as prepared
# while the server skipped the PREPARE, so every later use of it on that connection failed.
CONNECTION_OPTIONS: dict[str, Any] = {
    "autocommit": True,
    "connect_timeout": CONNECT_TIMEOUT_SECONDS,
    "prepare_threshold": None,
}

Connection = psycopg.Connection[tuple[Any, ...]]


@dataclass
class _Transaction:
    conn: Connection
    depth: int = 0
    open: bool = True
    # BEGIN and the advisory locks taken but not sent yet: they go out with the transaction's
    # next statement, in one round trip (the server grants a lock before it runs what follows).
    pending: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)

    def send_pending(self) -> None:
        """Queue the transaction's unsent BEGIN and advisory locks (inside a pipeline)."""
        for statement, params in self.pending:
            self.conn.execute(statement.encode(), params or None)
        self.pending.clear()


class Transactions:
    """The pool of connections to `dsn` and each thread's open transaction on one of them."""

    def __init__(self, dsn: str, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        self._dsn = dsn
        self.where = describe(dsn)
        self._pool: psycopg_pool.ConnectionPool[Connection] = psycopg_pool.ConnectionPool(
            dsn,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs=CONNECTION_OPTIONS,
            timeout=CONNECT_TIMEOUT_SECONDS,
            open=False,
            name="pml",
        )
        self._pool.open()
        self._local = threading.local()
        self._sequence_lock = threading.Lock()
        self._sequence_conn: Connection | None = None

    def connect(self) -> Connection:
        """A connection of its own, outside the pool (autocommit)."""
        return psycopg.connect(self._dsn, **CONNECTION_OPTIONS)

    def unavailable(self, error: BaseException) -> str:
        """What a call refused for `error` says; every connection failure passes here. A
        connection lost (the database restarted, the network cut) is seldom lost alone: the
        pool's idle connections are tested and the broken ones replaced now, so that the
        calls after this one do not each meet one (after a restart, a pool of 6 refused 6
        calls in a row; docs/storage.md, The shared store)."""
        if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
            with contextlib.suppress(Exception):  # the refusal is said whatever the test finds
                self._pool.check()
        # one line: a log line quotes it whole (libpq's messages span lines)
        return (
            f"the database at {self.where} is unavailable: {one_line(scrub(str(error), self._dsn))}"
        )

    # ---- this thread's transaction -----------------------------------------------------------

    def current(self) -> _Transaction | None:
        tx: _Transaction | None = getattr(self._local, "tx", None)
        return tx if tx is not None and tx.open else None

    def lock(self, key: int) -> None:
        """Take advisory lock `key` in this thread's transaction, beginning one if needed."""
        tx: _Transaction | None = getattr(self._local, "tx", None)
        if tx is None or not tx.open:
            depth = tx.depth if tx is not None else 0
            try:
                conn = self._pool.getconn()
            except POOL_ERRORS as error:
                raise UnavailableError(self.unavailable(error)) from error
            tx = _Transaction(conn, depth)
            self._local.tx = tx
            begin = True
        else:
            begin = False
        tx.depth += 1
        if begin:
            tx.pending.append(("BEGIN", ()))
        tx.pending.append(("SELECT pg_advisory_xact_lock(%s)", (key,)))

    def leave_lock(self) -> None:
        tx: _Transaction | None = getattr(self._local, "tx", None)
        if tx is None:
            return
        tx.depth -= 1
        if tx.depth <= 0:
            self._local.tx = None
            if tx.open:  # locked but nothing submitted: release the advisory locks
                self._end(tx, rollback=True)

    def _end(self, tx: _Transaction, rollback: bool) -> None:
        if tx.open:
            tx.open = False
            idle = tx.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            if rollback and not idle:
                with contextlib.suppress(psycopg.Error):  # broken: the pool discards it
                    tx.conn.execute("ROLLBACK")
            self._pool.putconn(tx.conn)
        if tx.depth <= 0 and getattr(self._local, "tx", None) is tx:
            self._local.tx = None

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
        except POOL_ERRORS as error:
            raise UnavailableError(self.unavailable(error)) from error
        tx = _Transaction(conn, depth=1)
        tx.pending.append(("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", ()))
        self._local.tx = tx
        try:
            yield
        finally:
            tx.depth = 0
            self._end(tx, rollback=True)

    # ---- reads -------------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """This thread's open transaction's connection, else a pooled one (autocommit)."""
        tx = self.current()
        if tx is not None:
            try:
                yield tx.conn
            except RETRYABLE as error:  # the locks' release rolls the transaction back
                raise UnavailableError(self.unavailable(error)) from error
            return
        try:
            with self._pool.connection() as conn:
                yield conn
        except RETRYABLE + POOL_ERRORS as error:
            raise UnavailableError(self.unavailable(error)) from error

    def rows(self, query: str | bytes, params: Any = ()) -> list[tuple[Any, ...]]:
        """The rows of one read: in this thread's transaction (after its pending BEGIN and
        locks, in the same round trip), else on a pooled connection."""
        with self._reading() as conn:
            tx = self.current()
            if tx is None or not tx.pending:
                return conn.execute(query, params).fetchall()
            with conn.pipeline():
                tx.send_pending()
                cursor = conn.execute(query, params)
            return cursor.fetchall()

    def row(self, query: str | bytes, params: Any = ()) -> tuple[Any, ...] | None:
        rows = self.rows(query, params)
        return rows[0] if rows else None

    # ---- writes ------------------------------------------------------------------------------

    def commit(self, statements: Callable[[Connection], None]) -> None:
        """Run `statements` and COMMIT in one pipeline (one round trip): in this thread's
        transaction after its unsent BEGIN and locks if it has one (its advisory locks are
        released with the commit), else in a transaction of its own on a pooled connection.
        Connection failures raise `StoreClosedError`; anything else (a duplicate request id's
        UniqueViolation) is the caller's."""
        tx = self.current()
        try:
            if tx is not None:
                try:
                    with tx.conn.pipeline():
                        tx.send_pending()
                        statements(tx.conn)
                        tx.conn.execute("COMMIT")
                finally:
                    self._end(tx, rollback=True)  # a no-op once committed
            else:
                with self._pool.connection() as conn:
                    try:
                        with conn.pipeline():
                            conn.execute("BEGIN")
                            statements(conn)
                            conn.execute("COMMIT")
                    except BaseException:
                        with contextlib.suppress(psycopg.Error):
                            conn.execute("ROLLBACK")
                        raise
        except RETRYABLE + POOL_ERRORS as error:
            raise StoreClosedError(self.unavailable(error)) from error

    def nextval(self, sequence: str) -> int:
        """A sequence step on a connection of its own (not transactional anyway). Not from
        the pool: the allocator is called by captures that each hold a pooled connection for
        their transaction, and a full pool would leave the step waiting for one of them."""
        with self._sequence_lock:
            try:
                if self._sequence_conn is None or self._sequence_conn.closed:
                    self._sequence_conn = self.connect()
                row = self._sequence_conn.execute(f"SELECT nextval('{sequence}')").fetchone()
            except RETRYABLE as error:
                if self._sequence_conn is not None:
                    self._sequence_conn.close()
                raise UnavailableError(self.unavailable(error)) from error
        assert row is not None
        return int(row[0])

    def close(self) -> None:
        self._pool.close()
        with self._sequence_lock:
            if self._sequence_conn is not None:
                self._sequence_conn.close()


def _advisory_key(name: str, key: tuple[str, ...]) -> int:
    digest = hashlib.blake2b("\x1f".join((name, *key)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class _SharedLock:
    """One `lock_for` result: the in-process stripe, then the advisory lock in this thread's
    transaction (see the module docstring)."""

    def __init__(self, transactions: Transactions, local: threading.RLock, key: int) -> None:
        self._transactions = transactions
        self._local = local
        self._key = key

    def __enter__(self) -> _SharedLock:
        self._local.acquire()
        try:
            self._transactions.lock(self._key)
        except BaseException:
            self._local.release()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self._transactions.leave_lock()
        finally:
            self._local.release()


class SharedLocks:
    def __init__(self, transactions: Transactions, name: str, stripes: int) -> None:
        self._transactions = transactions
        self._name = name
        self._stripes = LocalLocks(stripes)

    def lock_for(self, *key: str) -> _SharedLock:
        return _SharedLock(
            self._transactions, self._stripes.lock_for(*key), _advisory_key(self._name, key)
        )


class SequenceAllocator:
    """Ids from a PostgreSQL sequence stepping by `SEQUENCE_STEP`: each `nextval` reserves a
    block for this process, so ids are unique across replicas and never reused."""

    def __init__(self, transactions: Transactions, sequence: str) -> None:
        self._transactions = transactions
        self._sequence = sequence
        self._lock = threading.Lock()
        self._next = 1
        self._end = 0  # exclusive
        self._last = 0

    def next(self) -> int:
        with self._lock:
            if self._next >= self._end:
                start = self._transactions.nextval(self._sequence)
                self._next, self._end = start, start + SEQUENCE_STEP
            value = self._next
            self._next += 1
            self._last = value
            return value

    def last_issued(self) -> int:
        with self._lock:
            return self._last
