"""The op log on PostgreSQL, and what a follower reads to learn of other replicas' writes.

Each batch's op log entries take their sequence numbers from the tenant's head row
(`UPDATE ... RETURNING` inside the transaction, `append`): commit order is sequence order, so
a follower reading `seq > cursor` never skips an entry. The notifier (`_notifier`) wakes the
followers after the commit; it is not durable, so they poll too. Entries are trimmed by age at
start (`trim`), never when a replica snapshots (another replica may still need them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pml_server.domain import json_form
from pml_server.storage.keys import CF_COUNTERS, CF_INTENTS, CF_PATTERNS, split_tenant, tenant_key
from pml_server.storage.postgres._notifier import listen
from pml_server.storage.postgres._schema import FOLLOWED_FAMILIES, table_of
from pml_server.storage.postgres._transactions import Connection, Transactions

log = logging.getLogger(__name__)

# Op log entries older than this are trimmed at start: a replica restarting later rebuilds from
# its snapshot and the intents table, which the restore reads anyway; a running replica whose
# follower finds entries trimmed before it applied them rebuilds that tenant's indexes
# (docs/storage.md, "Op log gaps").
OPLOG_KEEP = "1 day"


# Rows written by a transaction not visible in the snapshot `since`: one at or past its xmax,
# or one in progress then (its xip). The same rows as `changed_xid >= xmin AND NOT
# pg_visible_in_snapshot(...)` (an id below xmin was visible), but read by index from xmax
# and at the few in-progress ids: read from xmin, every poll walked every row written since
# the oldest transaction then open began (docs/storage.md, Replicas).
CHANGED_SINCE = (
    "changed_xid >= pg_snapshot_xmax(%(since)s::pg_snapshot)"
    " OR changed_xid = ANY(ARRAY(SELECT pg_snapshot_xip(%(since)s::pg_snapshot)))"
)


# docs/storage.md, "After a PostgreSQL crash": crash recovery hands out again the transaction
# ids its WAL does not record (a rollback, or a commit that wrote nothing, whose record was not
# flushed yet), so a snapshot taken before the crash can count as seen a transaction that
# commits after it. A feed position names the server's epoch, the row of an unlogged table:
# crash recovery empties it (a promoted standby has none); a position of no epoch or of
# another one is read again from the start (`FROM_START`).
_EPOCH = "(SELECT token FROM pml_feed_epoch WHERE id = 1)"
_NEW_EPOCH = (
    "INSERT INTO pml_feed_epoch (id, token) VALUES (1, gen_random_uuid()::text)"
    " ON CONFLICT (id) DO NOTHING"
)
FROM_START = "1:1:"  # a snapshot no transaction is visible in: every row is read


@dataclass(frozen=True)
class FeedPosition:
    """Where a follower's change feed goes on from: `snapshot` (`pg_current_snapshot()` text,
    `xmin:xmax:xip,...`), taken in the server's `epoch` (None: none was set, so the next read
    starts over)."""

    snapshot: str
    epoch: str | None


@dataclass
class Changes:
    """What `OpLog.changes` read: rows changed since a snapshot, and its own. `written`: the
    key of every row read (pattern records, counters, intents) with the transaction that
    wrote it, so a replica tells its own commits from other replicas' (docs/storage.md,
    Replicas)."""

    position: FeedPosition
    patterns: list[tuple[bytes, bytes]] = field(default_factory=list)
    counters: list[tuple[bytes, bytes]] = field(default_factory=list)
    written: list[tuple[bytes, int]] = field(default_factory=list)


def committed_before(snapshot: str) -> Callable[[int], bool]:
    """Whether a committed transaction's id is visible in `snapshot` (`pg_current_snapshot()`
    text, `xmin:xmax:xip,...`), as `pg_visible_in_snapshot` answers: below xmax and not in
    progress then. A row it wrote is never read again by `changes` since that snapshot."""
    _, xmax, running = snapshot.split(":")
    bound = int(xmax)
    in_progress = {int(x) for x in running.split(",") if x}
    return lambda xid: xid < bound and xid not in in_progress


def trim(conn: Connection) -> None:
    """Delete the entries older than `OPLOG_KEEP` (at open)."""
    conn.execute(f"DELETE FROM pml_oplog WHERE written_at < now() - interval '{OPLOG_KEEP}'")


def append(conn: Connection, entries: list[bytes]) -> None:
    """A batch's entries, inside its transaction, tenant by tenant in a fixed order."""
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


class OpLog:
    """A follower's reads: the op log since a cursor, and the followed rows changed since a
    snapshot (pattern records, counters, intents' keys); `listen` wakes it on commits."""

    def __init__(self, transactions: Transactions) -> None:
        self._db = transactions

    def listen(self) -> Connection:
        """A dedicated connection LISTENing for op log commits (`_notifier.listen`)."""
        return listen(self._db.connect)

    def heads(self) -> dict[str, int]:
        """Each tenant's last committed op log sequence."""
        rows = self._db.rows("SELECT tenant, seq FROM pml_oplog_head")
        return {str(t): int(s) for t, s in rows}

    def entries(
        self, tenant: str, after: int, limit: int = 1000
    ) -> list[tuple[int, dict[str, Any], float]]:
        """(seq, op, seconds since it was committed) of the tenant's entries after `after`."""
        rows = self._db.rows(
            "SELECT seq, op, extract(epoch FROM clock_timestamp() - written_at)"
            " FROM pml_oplog WHERE tenant = %s AND seq > %s ORDER BY seq LIMIT %s",
            (tenant, after, limit),
        )
        return [(int(s), json_form.loads(bytes(op)), float(age)) for s, op, age in rows]

    def head_and_entries(
        self, tenant: str, after: int, limit: int = 1000
    ) -> tuple[int, list[tuple[int, dict[str, Any], float]]]:
        """The tenant's head (0 before its first entry) and `entries` after `after`, in one
        statement: a gap (entries trimmed after `after`) shows even when none is left."""
        rows = self._db.rows(
            "SELECT h.seq, o.seq, o.op, extract(epoch FROM clock_timestamp() - o.written_at)"
            " FROM pml_oplog_head h LEFT JOIN LATERAL (SELECT seq, op, written_at FROM pml_oplog"
            " WHERE tenant = h.tenant AND seq > %s ORDER BY seq LIMIT %s) o ON true"
            " WHERE h.tenant = %s ORDER BY o.seq",
            (after, limit, tenant),
        )
        entries = [
            (int(s), json_form.loads(bytes(op)), float(age))
            for _, s, op, age in rows
            if s is not None
        ]
        return (int(rows[0][0]) if rows else 0), entries

    def all(self) -> list[tuple[int, dict[str, Any]]]:
        rows = self._db.rows("SELECT seq, op FROM pml_oplog ORDER BY tenant, seq")
        return [(int(s), json_form.loads(bytes(op))) for s, op in rows]

    def intents_by_id(self, tenant: str, intent_ids: Sequence[int]) -> list[bytes]:
        """The stored intents of `intent_ids` still present (an op's additions)."""
        if not intent_ids:
            return []
        rows = self._db.rows(
            f"SELECT value FROM {table_of(CF_INTENTS)} WHERE tenant = %s AND intent_id = ANY(%s)",
            (tenant, list(intent_ids)),
        )
        return [bytes(r[0]) for r in rows]

    def patterns_present(self, tenant: str, pattern_ids: Sequence[str]) -> set[str]:
        """Which of the tenant's `pattern_ids` have a record stored (their keys alone)."""
        if not pattern_ids:
            return set()
        rows = self._db.rows(
            f"SELECT key FROM {table_of(CF_PATTERNS)} WHERE key = ANY(%s)",
            ([tenant_key(tenant, p) for p in pattern_ids],),
        )
        return {split_tenant(bytes(key))[1].decode() for (key,) in rows}

    def _new_epoch(self, since: FeedPosition | None) -> None:
        """Set the server's epoch if it has none (before the read that starts over)."""
        if since is not None:
            log.warning(
                "the change feed's position (epoch %s) is not of the database server's epoch: "
                "it recovered from a crash or failed over since the last read; reading every "
                "followed row again (docs/storage.md, After a PostgreSQL crash)",
                since.epoch,
            )
        self._db.rows(f"{_NEW_EPOCH} RETURNING 1")

    def position(self) -> FeedPosition:
        """The current position (at open): nothing before it is read."""
        self._new_epoch(None)
        row = self._db.row(f"SELECT pg_current_snapshot()::text, {_EPOCH}")
        assert row is not None
        return FeedPosition(str(row[0]), row[1])

    def changed_rows(
        self, cf: str, since: FeedPosition
    ) -> tuple[list[tuple[bytes, bytes]], FeedPosition]:
        """(rows of `cf` written by transactions not visible in the position `since`, the
        position this read saw): following with the returned one never skips a commit,
        whatever order transactions commit in (an id below the snapshot's xmin was visible to
        it; one in progress then is read once it commits), nor across a crash of the server
        (`FeedPosition`: every row is read again). `cf` is one of the followed families."""
        assert cf in FOLLOWED_FAMILIES
        query = (
            f"SELECT pg_current_snapshot()::text, {_EPOCH}, coalesce(array_agg(key), '{{}}'),"
            f" coalesce(array_agg(value), '{{}}') FROM {table_of(cf)} WHERE {CHANGED_SINCE}"
        )
        row = self._db.row(query, {"since": since.snapshot})
        assert row is not None
        if row[1] is None or row[1] != since.epoch:
            self._new_epoch(since)
            row = self._db.row(query, {"since": FROM_START})
            assert row is not None
        snapshot, epoch, keys, values = row
        rows = [(bytes(k), bytes(v)) for k, v in zip(keys, values, strict=True)]
        return rows, FeedPosition(str(snapshot), epoch)

    def changes(self, since: FeedPosition) -> Iterator[Changes]:
        """Every pattern record and counters row, and the key of every intent row, written by
        transactions not visible in the snapshot `since` (see `changed_rows`), each with the
        transaction that wrote it, a page at a time (`CHANGES_PAGE` rows of a family; a
        follower far behind would otherwise hold every row changed meanwhile at once). The
        first page is one statement with each family's first rows and the snapshot it saw,
        which every page carries: the one to follow from. A family's further pages are read
        after its last row (by writing transaction, then key) in statements of their own,
        each in a later snapshot: a row rewritten meanwhile is read there or, by a transaction
        not yet visible in the first one, by the next `changes`. A position of another
        epoch than the server's (`FeedPosition`) is read from the start."""
        first = " UNION ALL ".join(
            _page_of(kind, cf, after=False) for kind, cf in enumerate(_CHANGED_FAMILIES)
        )
        first += (
            f" UNION ALL SELECT 3, convert_to({_EPOCH}, 'UTF8'),"
            " convert_to(pg_current_snapshot()::text, 'UTF8'), 0"
        )
        snapshot = since.snapshot
        rows = self._db.rows(first, {"since": snapshot})
        [(_, epoch, _, _)] = [row for row in rows if row[0] == 3]
        if epoch is None or bytes(epoch).decode() != since.epoch:
            self._new_epoch(since)
            snapshot = FROM_START
            rows = self._db.rows(first, {"since": snapshot})
            [(_, epoch, _, _)] = [row for row in rows if row[0] == 3]
        position = next(
            FeedPosition(bytes(value).decode(), None if epoch is None else bytes(epoch).decode())
            for kind, _, value, _ in rows
            if kind == 3
        )
        yield _changes_page(position, [row for row in rows if row[0] != 3])
        for kind, cf in enumerate(_CHANGED_FAMILIES):
            read = [row for row in rows if row[0] == kind]
            while len(read) == CHANGES_PAGE[cf]:
                _, key, _, xid = read[-1]
                read = self._db.rows(
                    _page_of(kind, cf, after=True), {"since": snapshot, "xid": xid, "key": key}
                )
                yield _changes_page(position, read)


# Rows of a family one statement of `OpLog.changes` reads at most: a pattern record holds up to
# two 256 KiB codes (docs/reliability.md), a counters row a few KiB, an intent only its key.
CHANGES_PAGE = {CF_PATTERNS: 100, CF_COUNTERS: 1000, CF_INTENTS: 1000}
_CHANGED_FAMILIES = (CF_PATTERNS, CF_COUNTERS, CF_INTENTS)


def _page_of(kind: int, cf: str, after: bool) -> str:
    """A page of the rows of `cf` written by transactions not visible in `since`, in order of
    their writer then key, after (`xid`, `key`) if `after`."""
    value = "NULL::bytea" if cf == CF_INTENTS else "value"
    where = f"({CHANGED_SINCE})"
    if after:
        where += (
            " AND changed_xid >= %(xid)s::text::xid8"
            " AND (changed_xid, key) > (%(xid)s::text::xid8, %(key)s)"
        )
    return (
        f"(SELECT {kind}, key, {value}, changed_xid::text::bigint FROM {table_of(cf)}"
        f" WHERE {where} ORDER BY changed_xid, key LIMIT {CHANGES_PAGE[cf]})"
    )


def _changes_page(position: FeedPosition, rows: Sequence[tuple[Any, ...]]) -> Changes:
    page = Changes(position)
    for kind, key, value, xid in rows:
        if kind == 0:
            page.patterns.append((bytes(key), bytes(value)))
        elif kind == 1:
            page.counters.append((bytes(key), bytes(value)))
        page.written.append((bytes(key), int(xid)))
    return page
