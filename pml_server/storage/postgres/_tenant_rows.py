"""The per-tenant rows the shared repository keeps beside the families: tenant stats, counter
ceilings and index snapshots.

Tenant stats arrive as deltas and are added in SQL; counter ceilings are raised with GREATEST
in the same transaction as the counters. Both are striped rows (the writing backend's stripe),
so concurrent captures neither queue on one row lock held through each commit's flush nor keep
PostgreSQL from flushing their commits together; a read sums (or takes the maximum of) the
stripes.
"""

from __future__ import annotations

from pml_server.storage.postgres._schema import ROW_STRIPES, STATS_COLUMNS
from pml_server.storage.postgres._transactions import Connection, Transactions

# Pseudo-family of the stats deltas a batch adds (`SharedMeta.put_stats`).
CF_STATS_DELTA = "tenant_stats_delta"
# Pseudo-family of index snapshots: tenant -> u64 op log position + index bytes, stored only
# when no snapshot at a later position is (`SharedMeta.put_snapshot`).
CF_INDEX_SNAPSHOT = "index_snapshot"
# The stripe of the per-tenant rows every capture updates (see `_schema`): this connection's.
_STRIPE = f"pg_backend_pid() %% {ROW_STRIPES}"  # %% : psycopg placeholders


class TenantRows:
    """Reads of the per-tenant rows."""

    def __init__(self, transactions: Transactions) -> None:
        self._db = transactions

    def tenant_stats(self, tenant: str) -> dict[str, int]:
        columns = ", ".join(f"sum({c})" for c in STATS_COLUMNS)
        row = self._db.row(
            f"SELECT count(*), {columns} FROM pml_tenant_stats WHERE tenant = %s", (tenant,)
        )
        if row is None or not row[0]:
            return {}
        return dict(zip(STATS_COLUMNS, map(int, row[1:]), strict=True))

    def counter_ceilings(self, tenant: str) -> tuple[int, int]:
        row = self._db.row(
            "SELECT coalesce(max(success), 0), coalesce(max(usage), 0)"
            " FROM pml_counter_ceilings WHERE tenant = %s",
            (tenant,),
        )
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    def index_snapshot(self, tenant: str) -> tuple[int, bytes] | None:
        row = self._db.row(
            "SELECT oplog_seq, data FROM pml_index_snapshots WHERE tenant = %s", (tenant,)
        )
        return None if row is None else (int(row[0]), bytes(row[1]))


def raise_ceilings(conn: Connection, tenant: str, success: int, usage: int) -> None:
    conn.execute(
        "INSERT INTO pml_counter_ceilings AS c (tenant, stripe, success, usage)"
        f" VALUES (%s, {_STRIPE}, %s, %s) ON CONFLICT (tenant, stripe)"
        " DO UPDATE SET success = GREATEST(c.success, excluded.success),"
        " usage = GREATEST(c.usage, excluded.usage)"
        " WHERE c.success < excluded.success OR c.usage < excluded.usage",
        (tenant, success, usage),
    )


def add_stats(conn: Connection, tenant: str, delta: dict[str, int]) -> None:
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


def put_snapshot(conn: Connection, tenant: str, position: int, data: bytes) -> None:
    # compare-and-set on the op log position: a replica behind never replaces the
    # snapshot of one that had applied more
    conn.execute(
        "INSERT INTO pml_index_snapshots AS s (tenant, oplog_seq, data) VALUES (%s, %s, %s)"
        " ON CONFLICT (tenant) DO UPDATE SET oplog_seq = excluded.oplog_seq,"
        " data = excluded.data WHERE s.oplog_seq <= excluded.oplog_seq",
        (tenant, position, data),
    )
