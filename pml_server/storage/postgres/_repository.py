"""The repository over a shared PostgreSQL store: what the embedded store keeps as values the
engine rewrites (tenant stats, counter ceilings, the op log) lives in SQL columns here. The
pattern views Suggest shows are cached in this replica (`_views`).

`SharedRepository` is `storage.repo.Repository` with these parts in place of the embedded
store's (the others are the same): `SharedMeta` (stats as deltas, snapshots in their own
rows), `SharedPatterns` and
`SharedIntents` (a pattern read by its hash brings its intents along), `SharedLogs` (the op
log in SQL) and `SharedViews` (this replica's cache of views)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from pml_server.domain import json_form
from pml_server.domain.records import (
    IntentRecord,
    PatternCounters,
    PatternRecord,
    TenantStats,
    decode_intent,
)
from pml_server.storage.codec import (
    decode_counters_shared,
    decode_intent_for_view,
    decode_pattern,
)
from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_INTENTS,
    CF_PATTERNS,
    split_tenant,
    tenant_key,
    tenant_prefix,
    u64,
)
from pml_server.storage.postgres._oplog import committed_before
from pml_server.storage.postgres._store import PostgresStore
from pml_server.storage.postgres._tenant_rows import CF_INDEX_SNAPSHOT, CF_STATS_DELTA
from pml_server.storage.postgres._views import PatternKey, ReplicaViewCache
from pml_server.storage.repo import (
    IntentRows,
    LogRows,
    MetaRows,
    PatternRows,
    Repository,
    ShownView,
    ViewReads,
    ViewRows,
)
from pml_server.storage.seam import Op

DEFAULT_VIEW_CACHE_SIZE = 10_000
_VIEWED_FAMILIES = (CF_PATTERNS, CF_COUNTERS, CF_INTENTS)


def viewed_pattern(key: bytes) -> PatternKey:
    """(tenant, pattern id) of a pattern record, counters or intent key."""
    tenant, rest = split_tenant(key)
    return tenant, rest.split(b"\x00", 1)[0].decode()


class SharedRepository(Repository):
    def __init__(
        self, store: PostgresStore, view_cache_size: int = DEFAULT_VIEW_CACHE_SIZE
    ) -> None:
        super().__init__(store)
        self.shared_store = store
        prefetched = threading.local()
        self.meta: SharedMeta = SharedMeta(store)
        self.patterns: SharedPatterns = SharedPatterns(store, prefetched)
        self.intents: SharedIntents = SharedIntents(store, prefetched)
        self.logs: SharedLogs = SharedLogs(store)
        self.views: SharedViews = SharedViews(store, view_cache_size)

    def consistent_reads(self) -> AbstractContextManager[None]:
        return self.shared_store.transactions.consistent_reads()


class SharedMeta(MetaRows):
    def __init__(self, store: PostgresStore) -> None:
        super().__init__(store)
        self.shared_store = store

    def stats(self, tenant: str) -> TenantStats:
        return TenantStats(**self.shared_store.tenant_rows.tenant_stats(tenant))

    def put_stats(
        self, tenant: str, stats: TenantStats, deltas: Mapping[str, int] | None = None
    ) -> Op:
        """The batch's counts are added in SQL (another replica may count at the same time):
        `deltas`, not the absolute `stats`, are written."""
        return (CF_STATS_DELTA, tenant.encode(), json_form.dumps(dict(deltas or {})))

    def snapshot(self, tenant: str) -> tuple[int, bytes] | None:
        """(op log position of the tenant the snapshot includes, index bytes)."""
        return self.shared_store.tenant_rows.index_snapshot(tenant)

    def put_snapshot(self, tenant: str, seq: int, data: bytes) -> Op:
        """`seq`: the tenant's op log position every entry through which the index holds
        (the follower's cursor, read before the snapshot was taken); stored only when no
        snapshot at a later position is."""
        return (CF_INDEX_SNAPSHOT, tenant.encode(), u64(seq) + data)


# A capture's pattern read brings the pattern's intents along when it has at most this many:
# rule 5 then compares with them all at no further round trip; a pattern of more asks the
# index, brought up to date first (docs/capture.md, "Rule 5 on a shared store").
PREFETCHED_INTENTS = 16


class SharedPatterns(PatternRows):
    def __init__(self, store: PostgresStore, prefetched: threading.local) -> None:
        super().__init__(store)
        self.shared_store = store
        self._prefetched = prefetched  # shared with `SharedIntents`

    def pattern_for_hash(
        self, tenant: str, code_hash: str
    ) -> tuple[PatternRecord | None, PatternCounters | None]:
        """As `PatternRows.pattern_for_hash`, in one query that also reads the pattern's
        intents when it has at most `PREFETCHED_INTENTS`: the capture holding the pattern's
        lock asks for them next (`SharedIntents.of_pattern_if_few`)."""
        pattern, counters, intents = self.shared_store.kv.pattern_for_hash(
            tenant_prefix(tenant), tenant_key(tenant, code_hash), PREFETCHED_INTENTS + 1
        )
        record = None if pattern is None else decode_pattern(pattern)
        within = self.shared_store.transactions.current()
        self._prefetched.intents = (
            None if record is None or within is None else (within, tenant, record.id, intents)
        )
        return (
            record,
            None if counters is None else PatternCounters.from_json(counters),
        )

    def counter_ceilings(self, tenant: str) -> tuple[int, int]:
        """Raised in SQL in every batch that writes counters, by any replica (in the same
        transaction). A reader that bounds counters read later by these reads both inside
        `consistent_reads`: else another replica's commit in between could show counts above
        the ceiling it read."""
        return self.shared_store.tenant_rows.counter_ceilings(tenant)


class SharedIntents(IntentRows):
    def __init__(self, store: PostgresStore, prefetched: threading.local) -> None:
        super().__init__(store)
        self.shared_store = store
        self._prefetched = prefetched  # set by `SharedPatterns.pattern_for_hash`

    def of_pattern_if_few(self, tenant: str, pattern_id: str) -> list[IntentRecord] | None:
        """The intents `pattern_for_hash` read with the pattern, once, in the same thread and
        the same write transaction (its locks held since, so still current), if that was all
        of them (at most `PREFETCHED_INTENTS`); else None."""
        prefetched = getattr(self._prefetched, "intents", None)
        self._prefetched.intents = None
        if prefetched is not None:
            within, of_tenant, of_pattern, intents = prefetched
            current = self.shared_store.transactions.current()
            if (
                current is within
                and (of_tenant, of_pattern) == (tenant, pattern_id)
                and len(intents) <= PREFETCHED_INTENTS
            ):
                return [decode_intent(raw) for raw in intents]
        return None

    def first_of_patterns(
        self, tenant: str, pattern_ids: Sequence[str], each: int, total: int
    ) -> Iterator[IntentRecord]:
        """As `IntentRows.first_of_patterns`, in one query (a range scan a pattern on the
        server) where a read a pattern at a time took a round trip each: the same rows, those
        the caller would not ask for included (at most `total`)."""
        prefixes = [tenant_key(tenant, pattern_id, b"") for pattern_id in pattern_ids]
        rows = self.shared_store.kv.first_of_prefixes(CF_INTENTS, prefixes, each, total)
        return (decode_intent_for_view(raw) for raw in rows)


class SharedLogs(LogRows):
    def __init__(self, store: PostgresStore) -> None:
        super().__init__(store)
        self.shared_store = store

    def oplog_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        """Every retained entry (sequences are per tenant here; restore reads them all)."""
        return self.shared_store.oplog.all()

    def delete_oplog_through(self, seq: int) -> list[Op]:
        return []  # other replicas follow the log: the store trims it by age


class SharedViews(ViewReads):
    def __init__(self, store: PostgresStore, view_cache_size: int) -> None:
        super().__init__(store)
        self.shared_store = store
        self._views = ReplicaViewCache(view_cache_size)
        store.watch_commits(self._forget_written)

    def _forget_written(self, ops: Sequence[Op], committed_by: int | None) -> None:
        written = {viewed_pattern(key) for cf, key, _ in ops if cf in _VIEWED_FAMILIES}
        if written:
            self._views.drop(written, committed_by)

    def forget_views(self, patterns: Iterable[PatternKey]) -> None:
        """Drop these patterns' cached views (another replica changed them)."""
        self._views.drop(patterns)

    def forget_changed(self, written: Sequence[tuple[bytes, int]]) -> None:
        """Drop the views of the pattern, counters and intent rows the follower read as
        changed since its last snapshot (`OpLog.changes`: each key with the transaction that
        wrote it), but for this replica's own commits, dropped when they committed."""
        self._views.drop_changed((viewed_pattern(key), xid) for key, xid in written)

    def followed_to(self, snapshot: str) -> None:
        """The follower's change feed goes on from `snapshot`: this replica's commits visible
        in it are never met again, and forgotten."""
        self._views.forget_commits(committed_before(snapshot))

    def patterns_with_counters(
        self, tenant: str, pattern_ids: Sequence[str]
    ) -> list[tuple[PatternRecord, PatternCounters] | None]:
        """As `ViewReads.patterns_with_counters`, in one query (a join)."""
        keys = [tenant_key(tenant, pattern_id) for pattern_id in pattern_ids]
        return [
            None if pair is None else (decode_pattern(pair[0]), decode_counters_shared(pair[1]))
            for pair in self.shared_store.kv.get_pairs(CF_PATTERNS, CF_COUNTERS, keys)
        ]

    def read_shown_views(self, tenant: str, pattern_ids: Sequence[str]) -> list[ShownView | None]:
        """As `ViewReads.read_shown_views`, in one query (`KeyValues.shown_view_rows`); the
        patterns whose counters an older build wrote take a second to read their intents."""
        keys = [tenant_key(tenant, pattern_id) for pattern_id in pattern_ids]
        rows = self.shared_store.kv.shown_view_rows(keys)
        found = [
            None if row is None else (decode_pattern(row[0]), decode_counters_shared(row[1]))
            for row in rows
        ]
        return self._shown(tenant, pattern_ids, rows, found)

    def views_of_records(
        self, tenant: str, records: Sequence[PatternRecord]
    ) -> list[ShownView | None]:
        """As `ViewReads.views_of_records`, in one query (`KeyValues.shown_view_rows` without
        the records, which the caller holds) where the embedded store makes two multi-gets."""
        ids = [record.id for record in records]
        keys = [tenant_key(tenant, pattern_id) for pattern_id in ids]
        rows = self.shared_store.kv.shown_view_rows(keys, records=False)
        found = [
            None if row is None else (record, decode_counters_shared(row[1]))
            for record, row in zip(records, rows, strict=True)
        ]
        return self._shown(tenant, ids, rows, found)

    def _shown(
        self,
        tenant: str,
        pattern_ids: Sequence[str],
        rows: Sequence[tuple[bytes, bytes, list[bytes] | None] | None],
        found: Sequence[tuple[PatternRecord, PatternCounters] | None],
    ) -> list[ShownView | None]:
        """The views of `shown_view_rows`' `rows` of these patterns, `found` their (record,
        counters) decoded."""
        views = [
            None
            if row is None or pair is None
            else ShownView(
                pair[0],
                pair[1],
                [decode_intent_for_view(raw) for raw in row[2] or ()],
                pair[1].intent_count or 0,
            )
            for row, pair in zip(rows, found, strict=True)
        ]
        older = [n for n, row in enumerate(rows) if row is not None and row[2] is None]
        if older:
            again = self.shown_of(
                tenant, [pattern_ids[n] for n in older], [found[n] for n in older]
            )
            for n, view in zip(older, again, strict=True):
                views[n] = view
        return views

    def view_rows(self, tenant: str, pattern_ids: Sequence[str]) -> ViewRows | None:
        """None: this replica's views come decoded from its cache (`shown_views`)."""
        return None

    def shown_views(self, tenant: str, pattern_ids: Sequence[str]) -> list[ShownView | None]:
        """As `ViewReads.shown_views`: from this replica's cache (`_views`), and what it
        lacks in one round trip (`read_shown_views`), then cached."""
        views: dict[str, ShownView] = {}
        for pattern_id in pattern_ids:
            view = self._views.get((tenant, pattern_id))
            if view is not None:
                views[pattern_id] = view
        missing = [p for p in pattern_ids if p not in views]
        if missing:
            began_at = self._views.generation()
            read = self.read_shown_views(tenant, missing)
            fresh = {p: v for p, v in zip(missing, read, strict=True) if v is not None}
            self._views.keep(began_at, (((tenant, p), v) for p, v in fresh.items()))
            views.update(fresh)
        return [views.get(p) for p in pattern_ids]
