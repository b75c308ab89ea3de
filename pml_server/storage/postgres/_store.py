"""The PostgreSQL store: a `seam.StoreBackend` several pml replicas share.

`PostgresStore` is composed of its parts, each a private module of this package:
`_transactions` (the pool, this thread's transaction, advisory locks, sequences), `_keyvalue`
(the families' rows), `_oplog` (the op log and a follower's reads), `_tenant_rows` (stats,
counter ceilings, index snapshots) and `_notifier` (LISTEN/NOTIFY wake-ups). This module
writes one batch (`submit`) with their statements, in the order below.

Transactions. A write lock the engine takes (`locks`: the pattern and capability-group locks)
is also a transaction-scoped advisory lock of this thread's transaction, begun with the first
such lock; the batch the engine then submits is written and committed in that transaction, so
the advisory locks are released only once the batch is visible: another replica taking the
same lock reads what this one committed (the in-process striped locks' guarantee, across
processes). Locks are always taken in the engine's order (pattern, then group), so replicas
cannot wait on each other in a cycle; the rows every writer touches (op log head, counter
ceilings, tenant stats) are written last, in that fixed order.

Exactly-once. A batch's request id row is inserted first (a plain INSERT; a UniqueViolation):
when another replica already recorded it, nothing is written and `RequestAlreadyAppliedError`
carries the stored answer. (A batch rewriting stored answers, `keys.CF_REQUEST_REWRITE`, first
locks and reads their rows, and writes the batch as `keys.apply_rewrites` makes it: in order.)

Counts. Tenant stats arrive as deltas and are added in SQL; counter ceilings are raised with
GREATEST in the same transaction as the counters (`_tenant_rows`). Id allocators are sequences.

Op log. Each batch's op log entries take their sequence numbers from the tenant's head row
(`_oplog`): commit order is sequence order. A NOTIFY after the commit wakes followers (one per
burst of commits, from a notifier thread; see `_notifier.Notifier`); it is not durable, so they
poll too.

No read cache here: another replica may change any row, and the database is the only copy.
(The repository keeps the pattern views Suggest shows, `_views`: this replica's commits drop
what they wrote through `watch_commits`, the follower what other replicas wrote.)
Connection failures surface as `UnavailableError` (reads) or `StoreClosedError` (writes, which
the engine reports as UNAVAILABLE): the caller retries, the pool reconnects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import psycopg

from pml_server.domain import json_form
from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_OPLOG,
    CF_REQUEST_REWRITE,
    CF_REQUESTS,
    apply_rewrites,
    split_tenant,
)
from pml_server.storage.postgres import _keyvalue, _oplog, _tenant_rows
from pml_server.storage.postgres._dsn import describe, has_password, scrub
from pml_server.storage.postgres._keyvalue import KeyValues
from pml_server.storage.postgres._notifier import Notifier
from pml_server.storage.postgres._oplog import OpLog
from pml_server.storage.postgres._schema import STAMPED_FAMILIES, migrate, table_of
from pml_server.storage.postgres._tenant_rows import (
    CF_INDEX_SNAPSHOT,
    CF_STATS_DELTA,
    TenantRows,
)
from pml_server.storage.postgres._transactions import (
    CONNECT_TIMEOUT_SECONDS,
    DEFAULT_POOL_SIZE,
    Connection,
    SequenceAllocator,
    SharedLocks,
    Transactions,
)
from pml_server.storage.seam import (
    Op,
    RequestAlreadyAppliedError,
    StoreClosedError,
    WriteTicket,
    finished_ticket,
)


class StoreUnreachableError(OSError):
    """The database cannot be reached at start (the message names the host, never the
    password)."""


class PostgresStore:
    """An open PostgreSQL store at `dsn` (migrated at open): the seam (`StoreBackend`) over
    its parts, which callers needing more than the seam use directly (`transactions`, `kv`,
    `oplog`, `tenant_rows`)."""

    shared = True

    def __init__(self, dsn: str, pool_size: int = DEFAULT_POOL_SIZE) -> None:
        self._dsn = dsn
        self._where = describe(dsn)
        try:
            with psycopg.connect(
                dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
            ) as conn:
                self.schema_version = migrate(conn, self._where)
                _oplog.trim(conn)
        except psycopg.OperationalError as error:
            reason = scrub(str(error).strip().splitlines()[0] if str(error) else "", dsn)
            raise StoreUnreachableError(
                f"cannot reach PostgreSQL at {self._where}: {reason}"
            ) from None
        # The parts (see the module docstring); the seam's reads are `kv`'s, and the shared
        # repository and the op log follower call the parts directly.
        self.transactions = Transactions(dsn, pool_size)
        self.kv = KeyValues(self.transactions)
        self.oplog = OpLog(self.transactions)
        self.tenant_rows = TenantRows(self.transactions)
        self._notifier = Notifier(self.transactions.connect)
        self._closed = False
        self._commit_watchers: list[Callable[[Sequence[Op], int | None], None]] = []

    @property
    def location(self) -> str:
        return f"postgresql://{self._where}"

    @property
    def dsn_has_password(self) -> bool:
        return has_password(self._dsn)

    def locks(self, name: str, stripes: int) -> SharedLocks:
        return SharedLocks(self.transactions, name, stripes)

    def allocator(self, name: str) -> SequenceAllocator:
        return SequenceAllocator(self.transactions, f"pml_ids_{name}")

    # ---- key-value reads (`_keyvalue`) -------------------------------------------------------

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self.kv.get(cf, key)

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        return self.kv.get_many(cf, keys)

    def scan(
        self,
        cf: str,
        prefix: bytes,
        *,
        start: bytes | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        return self.kv.scan(cf, prefix, start=start, limit=limit, reverse=reverse)

    def scan_stored(self, cf: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        return self.kv.scan_stored(cf, prefix)

    # ---- writes ------------------------------------------------------------------------------

    def watch_commits(self, watcher: Callable[[Sequence[Op], int | None], None]) -> None:
        """Call `watcher` with every batch `submit` was given, once its commit is over (done,
        refused or of unknown outcome) and before `submit` returns (a cache of this replica's
        drops what it wrote before the caller is answered), and the id of the transaction
        that committed it when it did and wrote rows stamped with it (`changed_xid`, what the
        follower's change feed reads them with), else None."""
        self._commit_watchers.append(watcher)

    def submit(self, ops: Sequence[Op]) -> WriteTicket:
        """Write and commit `ops` as one transaction (this thread's, when its locks opened one)
        before returning: the ticket is already durable."""
        if self._closed:
            raise StoreClosedError("store is closed")
        committed: list[int] = []
        try:
            return self._submit(ops, committed)
        finally:
            xid = committed[0] if committed else None
            for watcher in self._commit_watchers:
                watcher(ops, xid)

    def _submit(self, ops: Sequence[Op], committed: list[int]) -> WriteTicket:
        """The request id row is a plain INSERT: a duplicate aborts the whole transaction
        (UniqueViolation), which is what makes the batch exactly-once. `committed` receives
        the transaction's id once it committed, when it wrote stamped rows (in the same
        round trip: the SELECT goes in the commit's pipeline)."""
        stamped = any(cf in STAMPED_FAMILIES and value is not None for cf, _, value in ops)
        xid: list[psycopg.Cursor[tuple[Any, ...]]] = []

        def statements(conn: Connection) -> None:
            _apply(conn, ops)
            if stamped:
                xid.append(conn.execute("SELECT pg_current_xact_id()::text::bigint"))

        try:
            self.transactions.commit(statements)
        except psycopg.errors.UniqueViolation as error:
            if error.diag.table_name != table_of(CF_REQUESTS):
                raise
            inserted = _inserted_requests(ops)
            key = next(k for cf, k, _ in ops if cf == CF_REQUESTS and k in inserted)
            stored = self.get(CF_REQUESTS, key)  # committed by the writer this one waited for
            raise RequestAlreadyAppliedError(stored or b"") from None
        if xid:
            row = xid[0].fetchone()
            assert row is not None
            committed.append(int(row[0]))
        if any(cf == CF_OPLOG and value is not None for cf, _, value in ops):
            self._notifier.wake()
        return finished_ticket()

    def write(self, ops: Sequence[Op]) -> None:
        self.submit(ops).wait()

    def delete_unchanged(self, cf: str, rows: Sequence[tuple[bytes, bytes]]) -> int:
        """See `seam.BatchWrites.delete_unchanged`: one DELETE comparing each row's value (a
        concurrent writer's row lock makes it wait, then compare the committed value)."""
        if self._closed:
            raise StoreClosedError("store is closed")
        if not rows:
            return 0
        deleted: list[psycopg.Cursor[tuple[Any, ...]]] = []

        def statements(conn: Connection) -> None:
            deleted.append(_keyvalue.delete_unchanged(conn, cf, rows))

        ops: list[Op] = [(cf, key, None) for key, _ in rows]
        try:
            self.transactions.commit(statements)
        finally:
            for watcher in self._commit_watchers:
                watcher(ops, None)  # deletions only: no stamped row
        return deleted[0].rowcount

    def writes_held(self) -> AbstractContextManager[None]:
        """Nothing to hold: every submit commits its own transaction before returning."""
        return contextlib.nullcontext()

    def checkpoint(self, dest: Path) -> int:
        raise ValueError(
            "a shared PostgreSQL store is backed up with PostgreSQL's own tools (pg_dump, or a "
            "base backup), not by pml"
        )

    def erase_overwritten(self, keys: Sequence[tuple[str, bytes]] | None = None) -> None:
        """Nothing: PostgreSQL keeps a row's dead versions in the table's files until VACUUM
        FULL rewrites them, which takes an exclusive lock on every replica's reads; pml leaves
        that to the operator (docs/storage.md, Data left on disk)."""

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._notifier.close()  # the notifier exits
        self.transactions.close()


def _apply(conn: Connection, ops: Sequence[Op]) -> None:
    """Every statement of one batch, inside the caller's transaction (see the module
    docstring for the order). A batch with rewrites of stored answers first locks and reads
    the rows they name (`_keyvalue.lock_requests`) and writes what `keys.apply_rewrites` makes
    of it: the batch applies in order (docs/storage.md, Batches apply in order)."""
    inserted = _inserted_requests(ops)
    rewritten = list({key: None for cf, key, _ in ops if cf == CF_REQUEST_REWRITE})
    if rewritten:
        ops = apply_rewrites(ops, _keyvalue.lock_requests(conn, rewritten))
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
    requests = [(k, v) for (cf, k), v in final.items() if cf == CF_REQUESTS]
    _keyvalue.insert_requests_first(conn, [(k, v) for k, v in requests if k in inserted])
    for cf in sorted({cf for cf, _ in final} - {CF_REQUESTS}):
        rows = [(k, v) for (family, k), v in final.items() if family == cf]
        _keyvalue.write_family(conn, cf, rows)
    # Answers rewritten, or put back after the batch deleted them; then answers deleted.
    _keyvalue.write_family(
        conn, CF_REQUESTS, [(k, v) for k, v in requests if k not in inserted and v is not None]
    )
    _keyvalue.delete_requests(conn, [k for k, v in requests if v is None])
    _oplog.append(conn, oplog)
    for tenant in sorted(ceilings):
        _tenant_rows.raise_ceilings(conn, tenant, *ceilings[tenant])
    for tenant in sorted(deltas):
        _tenant_rows.add_stats(conn, tenant, deltas[tenant])
    for tenant, position, data in snapshots:
        _tenant_rows.put_snapshot(conn, tenant, position, data)


def _inserted_requests(ops: Sequence[Op]) -> set[bytes]:
    """The `requests` keys the batch puts without deleting them first: each is a plain INSERT
    (exactly-once: the batch is refused when the row is stored; the module docstring)."""
    inserted: set[bytes] = set()
    deleted: set[bytes] = set()
    for cf, key, value in ops:
        if cf != CF_REQUESTS:
            continue
        if value is None:
            deleted.add(key)
        elif key not in deleted:
            inserted.add(key)
    return inserted
