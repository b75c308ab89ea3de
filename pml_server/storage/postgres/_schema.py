"""Versioned schema migrations of the PostgreSQL store, applied at start under an advisory lock
(two replicas starting together migrate once); a database migrated by a newer pml is refused.

Each key-value family of the embedded store is a table `pml_<family>(key bytea, value bytea)`
with the same keys (tenant-prefixed bytes: a prefix range is one tenant's rows, bytea compares
like RocksDB's bytewise order). What several replicas must agree on gets its own columns:
tenant stats and counter ceilings are counted in SQL, the op log has a per-tenant head row
whose update inside the writing transaction makes commit order equal sequence order.

Rows every capture of a tenant would update (its stats and counter ceilings) are striped
(version 2): a transaction updates the stripe of its backend, so concurrent captures do not
queue on one row lock held until each commit's WAL flush, and their commits can share a flush
(PostgreSQL's group commit). A read sums the stats stripes and takes the ceilings' maximum.
Pattern records and counters carry the id of the transaction that last wrote them (version
2), so a replica can read every row changed since a snapshot without a sequence every capture
would queue on (`OpLog.changed_rows`). Index snapshots have their own table (version
2), written compare-and-set on the op log position they include, so a replica that is behind
never replaces a newer replica's snapshot. Intents carry the writing transaction's id too
(version 3): a replica's cache of pattern views (`_views`) drops a pattern whose intent rows
another replica rewrote (a duplicate intent's hit count).
"""

from __future__ import annotations

import psycopg

from pml_server.domain.errors import FailedPreconditionError
from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_INTENTS,
    CF_OPLOG,
    CF_PATTERNS,
    CF_SESSIONS,
    CF_TRANSITIONS,
    COLUMN_FAMILIES,
)
from pml_server.storage.seam import StoreClosedError

SCHEMA_VERSION = 6
_MIGRATION_LOCK = 0x706D6C5F736368  # "pml_sch": one migration at a time per database
STATS_COLUMNS = (
    "executions",
    "rejected",
    "failures_logged",
    "patterns",
    "capabilities",
    "intents",
)
SEQUENCE_STEP = 1024  # ids a replica takes from a sequence at once
# Stripes of the rows every capture updates: more than a replica's pool, so that connections
# (by backend pid) rarely share one.
ROW_STRIPES = 64
FOLLOWED_FAMILIES = (CF_PATTERNS, CF_COUNTERS)
# The families whose rows carry the id of the transaction that last wrote them (`changed_xid`)
STAMPED_FAMILIES = (*FOLLOWED_FAMILIES, CF_INTENTS)
_VERSION_4_FAMILIES = (CF_SESSIONS, CF_TRANSITIONS)


def table_of(cf: str) -> str:
    return f"pml_{cf}"


def _version_1() -> list[str]:
    later = (CF_INTENTS, CF_OPLOG, *_VERSION_4_FAMILIES)  # made otherwise, or later
    plain = [cf for cf in COLUMN_FAMILIES if cf not in later]
    statements = [
        f"CREATE TABLE {table_of(cf)} (key bytea PRIMARY KEY, value bytea NOT NULL)" for cf in plain
    ]
    stats = ", ".join(f"{c} bigint NOT NULL DEFAULT 0" for c in STATS_COLUMNS)
    statements += [
        # intents: the intent id as a column, so a follower fetches an op's intents by id
        f"CREATE TABLE {table_of(CF_INTENTS)} (key bytea PRIMARY KEY, value bytea NOT NULL,"
        " tenant text NOT NULL, intent_id bigint NOT NULL)",
        f"CREATE INDEX pml_intents_by_id ON {table_of(CF_INTENTS)} (tenant, intent_id)",
        "CREATE TABLE pml_oplog_head (tenant text PRIMARY KEY, seq bigint NOT NULL)",
        "CREATE TABLE pml_oplog (tenant text NOT NULL, seq bigint NOT NULL, op bytea NOT NULL,"
        " written_at timestamptz NOT NULL DEFAULT clock_timestamp(), PRIMARY KEY (tenant, seq))",
        f"CREATE TABLE pml_tenant_stats (tenant text PRIMARY KEY, {stats})",
        "CREATE TABLE pml_counter_ceilings (tenant text PRIMARY KEY,"
        " success bigint NOT NULL, usage bigint NOT NULL)",
        f"CREATE SEQUENCE pml_ids_intent INCREMENT BY {SEQUENCE_STEP}",
        f"CREATE SEQUENCE pml_ids_seq INCREMENT BY {SEQUENCE_STEP}",
    ]
    return statements


def _version_2() -> list[str]:
    striped = []
    for table in ("pml_tenant_stats", "pml_counter_ceilings"):
        striped += [
            f"ALTER TABLE {table} ADD COLUMN stripe int NOT NULL DEFAULT 0",
            f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey",
            f"ALTER TABLE {table} ADD PRIMARY KEY (tenant, stripe)",
        ]
    # the transaction that last wrote a pattern record or its counters: what a replica's
    # ranking table follows (`OpLog.changed_rows`)
    feeds = []
    for cf in FOLLOWED_FAMILIES:
        feeds += [
            f"ALTER TABLE {table_of(cf)} ADD COLUMN changed_xid xid8 NOT NULL"
            " DEFAULT pg_current_xact_id()",
            f"CREATE INDEX {table_of(cf)}_by_xid ON {table_of(cf)} (changed_xid)",
        ]
    return [
        *striped,
        *feeds,
        # the op log position (the tenant's sequence) every entry through which is included
        "CREATE TABLE pml_index_snapshots (tenant text PRIMARY KEY, oplog_seq bigint NOT NULL,"
        " data bytea NOT NULL)",
    ]


def _version_3() -> list[str]:
    """Intents follow like pattern records and counters (keys only: `OpLog.changes`)."""
    return [
        f"ALTER TABLE {table_of(CF_INTENTS)} ADD COLUMN changed_xid xid8 NOT NULL"
        " DEFAULT pg_current_xact_id()",
        f"CREATE INDEX {table_of(CF_INTENTS)}_by_xid ON {table_of(CF_INTENTS)} (changed_xid)",
    ]


def _version_4() -> list[str]:
    """Sessions' last steps and the transitions between capabilities (docs/ranking.md,
    Sessions): plain key-value families, written under the capture's advisory locks."""
    return [
        f"CREATE TABLE {table_of(cf)} (key bytea PRIMARY KEY, value bytea NOT NULL)"
        for cf in _VERSION_4_FAMILIES
    ]


MIGRATIONS: dict[int, list[str]] = {
    1: _version_1(),
    2: _version_2(),
    3: _version_3(),
    4: _version_4(),
    # No statement: rows an older build cannot read (the RocksDB store's version 2, storage/
    # rocks.py SCHEMA_VERSION), so that an older build refuses the database at start.
    5: [],
    # The server's epoch a replica's change feed position names (`_oplog.FeedPosition`):
    # unlogged, so crash recovery empties it (docs/storage.md, After a PostgreSQL crash).
    6: ["CREATE UNLOGGED TABLE pml_feed_epoch (id int PRIMARY KEY, token text NOT NULL)"],
}


class SchemaVersionError(FailedPreconditionError):
    """The database was migrated by a newer pml than this one."""


class SchemaMismatchError(FailedPreconditionError):
    """The database holds part of a schema version its migrations table does not record (a
    migration is one transaction: only a change outside pml leaves one half applied)."""


def _first_line(error: psycopg.Error) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def migrate(conn: psycopg.Connection[tuple[object, ...]], where: str) -> int:
    """Bring the schema up to `SCHEMA_VERSION`; the version found (after migrating)."""
    conn.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS pml_schema_migrations (version int PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = conn.execute("SELECT coalesce(max(version), 0) FROM pml_schema_migrations").fetchone()
        found = int(str(row[0])) if row else 0
        if found > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the database at {where} has schema version {found}; this pml knows up to "
                f"{SCHEMA_VERSION}: upgrade pml to use it, or restore a backup taken by this "
                "version of pml"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            try:
                with conn.transaction():
                    for statement in MIGRATIONS[version]:
                        conn.execute(statement.encode())
                    conn.execute(
                        "INSERT INTO pml_schema_migrations (version) VALUES (%s)", (version,)
                    )
            except psycopg.ProgrammingError as error:  # an object there, or missing
                raise SchemaMismatchError(
                    f"the database at {where} records schema version {version - 1} but "
                    f"already holds part of version {version} ({_first_line(error)}): it was "
                    "changed outside pml (a partial restore, or statements run by hand). "
                    "Restore it from a backup, or use another database"
                ) from None
        return max(found, SCHEMA_VERSION)
    except psycopg.OperationalError as error:
        raise StoreClosedError(f"migrating the database at {where} failed: {error}") from error
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
