"""The store seam's key-value families on PostgreSQL: one table per family (`_schema.table_of`).

Reads go through `Transactions` (in this thread's transaction when it has one); the writes are
statements of a batch, run inside the caller's transaction (`_store._apply` orders them).
No read cache here: another replica may change any row, and the database is the only copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_HASHES,
    CF_INTENTS,
    CF_PATTERNS,
    CF_REQUESTS,
    prefix_end,
    split_tenant,
)
from pml_server.storage.postgres._schema import FOLLOWED_FAMILIES, table_of
from pml_server.storage.postgres._transactions import Connection, Transactions

_SCAN_PAGE = 2000
# The counters' `top_intents` array in their compact JSON (`json_form.dumps`): a key no other
# object of the counters has (theirs are field names and parameter names, `$...`), and a
# string's quote is escaped, so no value matches; null (an older build's) does not either.
_TOP_INTENTS = r'"top_intents":(\[[-0-9,\[\] ]*\])'


class KeyValues:
    """Reads of the key-value families, and the joined reads the shared repository makes in
    one round trip where the embedded store would make several lookups."""

    def __init__(self, transactions: Transactions) -> None:
        self._db = transactions

    def get(self, cf: str, key: bytes) -> bytes | None:
        row = self._db.row(f"SELECT value FROM {table_of(cf)} WHERE key = %s", (key,))
        return None if row is None else bytes(row[0])

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        rows = self._db.rows(
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
        rows = self._db.rows(query.encode(), params)
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

    def get_pairs(
        self, first: str, second: str, keys: Sequence[bytes]
    ) -> list[tuple[bytes, bytes] | None]:
        """(value in `first`, value in `second`) of each key, None where either is missing: one
        query where two `get_many` would take two round trips."""
        if not keys:
            return []
        rows = self._db.rows(
            f"SELECT a.key, a.value, b.value FROM {table_of(first)} a"
            f" JOIN {table_of(second)} b ON b.key = a.key WHERE a.key = ANY(%s)",
            (list(keys),),
        )
        found = {bytes(k): (bytes(a), bytes(b)) for k, a, b in rows}
        return [found.get(key) for key in keys]

    def shown_view_rows(
        self, keys: Sequence[bytes], records: bool = True
    ) -> list[tuple[bytes, bytes, list[bytes] | None] | None]:
        """(record, counters, the intents its counters name best first) of each pattern key,
        None where the record or counters are missing, in one query where the embedded store
        reads them in three multi-gets (domain/shown_intents.py); the record is b"" unless
        `records` (a caller that holds them: not sent twice). The intents are None where
        the counters predate the summary (an older build's: the caller reads them otherwise);
        an intent they name that is gone is left out. Only the counters' `top_intents` (digits,
        commas and brackets) is read as JSON in SQL: PostgreSQL refuses the whole row's
        (`json` too) once a recent value holds an escaped NUL."""
        if not keys:
            return []
        rows = self._db.rows(
            "SELECT p.key, " + ("p.value" if records else "''::bytea") + ", c.value, s.intents"
            f" FROM {table_of(CF_PATTERNS)} p JOIN {table_of(CF_COUNTERS)} c ON c.key = p.key"
            " CROSS JOIN LATERAL"
            " (SELECT substring(convert_from(c.value, 'UTF8') from %(top)s)::json AS top) j"
            " LEFT JOIN LATERAL (SELECT coalesce(array_agg(i.value ORDER BY t.n), '{}') AS"
            " intents FROM json_array_elements(j.top) WITH ORDINALITY AS t(pair, n)"
            f" JOIN {table_of(CF_INTENTS)} i"
            " ON i.key = p.key || %(sep)s || int8send((t.pair ->> 0)::bigint)) s"
            " ON j.top IS NOT NULL"
            " WHERE p.key = ANY(%(keys)s)",
            {"keys": list(keys), "sep": b"\x00", "top": _TOP_INTENTS},
        )
        found = {
            bytes(k): (bytes(p), bytes(c), None if i is None else [bytes(v) for v in i])
            for k, p, c, i in rows
        }
        return [found.get(key) for key in keys]

    def first_of_prefixes(
        self, cf: str, prefixes: Sequence[bytes], each: int, total: int
    ) -> list[bytes]:
        """The values of the first `each` rows under each prefix in key order, prefix by
        prefix, at most `total` in all: one query where a scan a prefix takes a round trip
        each. Each prefix ends in a key separator (`tenant_key(..., b"")`), so it has an end."""
        if not prefixes or total <= 0:
            return []
        rows = self._db.rows(
            "SELECT r.value FROM unnest(%(prefixes)s::bytea[], %(ends)s::bytea[])"
            " WITH ORDINALITY AS p(prefix, upper, n) CROSS JOIN LATERAL"
            f" (SELECT key, value FROM {table_of(cf)} WHERE key >= p.prefix AND key < p.upper"
            " ORDER BY key LIMIT %(each)s) r ORDER BY p.n, r.key LIMIT %(total)s",
            {
                "prefixes": list(prefixes),
                "ends": [prefix_end(prefix) for prefix in prefixes],
                "each": each,
                "total": total,
            },
        )
        return [bytes(value) for (value,) in rows]

    def pattern_for_hash(
        self, prefix: bytes, code_hash_key: bytes, intents_limit: int
    ) -> tuple[Any, ...]:
        """(pattern, counters, [its first `intents_limit` intents in key order]) bytes of the
        pattern a code hash names, in one query (three lookups and a scan in the embedded
        store); `prefix` is the tenant's key prefix. (None, None, []) when the hash names none."""
        row = self._db.row(
            "SELECT p.value, c.value, (SELECT coalesce(array_agg(i.value ORDER BY i.key), '{}')"
            f" FROM (SELECT key, value FROM {table_of(CF_INTENTS)}"
            " WHERE key >= %(prefix)s || h.value || %(sep)s"
            " AND key < %(prefix)s || h.value || %(end)s ORDER BY key LIMIT %(limit)s) i)"
            f" FROM {table_of(CF_HASHES)} h"
            f" LEFT JOIN {table_of(CF_PATTERNS)} p ON p.key = %(prefix)s || h.value"
            f" LEFT JOIN {table_of(CF_COUNTERS)} c ON c.key = %(prefix)s || h.value"
            " WHERE h.key = %(hash)s",
            {
                "prefix": prefix,
                "hash": code_hash_key,
                "sep": b"\x00",
                "end": b"\x01",
                "limit": intents_limit,
            },
        )
        if row is None:
            return None, None, []
        pattern, counters, intents = row
        return (
            None if pattern is None else bytes(pattern),
            None if counters is None else bytes(counters),
            [bytes(v) for v in intents],
        )


def insert_requests_first(conn: Connection, rows: list[tuple[bytes, bytes | None]]) -> None:
    """First in the transaction: a second writer of the same id waits here for the first to
    commit, then fails with UniqueViolation before anything of its batch counts."""
    for key, value in rows:
        if value is not None:
            conn.execute(
                f"INSERT INTO {table_of(CF_REQUESTS)} (key, value) VALUES (%s, %s)", (key, value)
            )


def lock_requests(conn: Connection, keys: list[bytes]) -> dict[bytes, bytes | None]:
    """The stored answers at `keys` (None: none), their rows locked until the transaction
    ends, in key order (two replicas' batches never deadlock): what a batch's rewrites
    compare with (`keys.apply_rewrites`); a prune's deletion waits for the batch."""
    rows = conn.execute(
        f"SELECT key, value FROM {table_of(CF_REQUESTS)} WHERE key = ANY(%s)"
        " ORDER BY key FOR UPDATE",
        (keys,),
    ).fetchall()
    found: dict[bytes, bytes | None] = dict.fromkeys(keys)
    found.update((bytes(k), bytes(v)) for k, v in rows)
    return found


def delete_requests(conn: Connection, keys: list[bytes]) -> None:
    if keys:
        conn.execute(f"DELETE FROM {table_of(CF_REQUESTS)} WHERE key = ANY(%s)", (keys,))


def write_family(conn: Connection, cf: str, rows: list[tuple[bytes, bytes | None]]) -> None:
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


def delete_unchanged(
    conn: Connection, cf: str, rows: Sequence[tuple[bytes, bytes]]
) -> psycopg.Cursor[tuple[Any, ...]]:
    """Delete each row's key whose value is still the row's (the cursor's rowcount says how
    many). The rows are locked in key order first, so two replicas' sweeps never deadlock."""
    table = table_of(cf)
    return conn.execute(
        f"WITH locked AS (SELECT key, value FROM {table} WHERE key = ANY(%s)"
        " ORDER BY key FOR UPDATE)"
        f" DELETE FROM {table} AS t USING locked, unnest(%s::bytea[], %s::bytea[]) AS d(k, v)"
        " WHERE t.key = locked.key AND locked.key = d.k AND locked.value = d.v",
        ([k for k, _ in rows], [k for k, _ in rows], [v for _, v in rows]),
    )
