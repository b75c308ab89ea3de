"""What Suggest reads: the views it shows (records, counters and the wanted intents, without
their vectors) in few round trips, and the ranking table's rows (service/_suggest_core.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from pml_server.domain import json_form, shown_intents
from pml_server.domain.records import IntentRecord, PatternCounters, PatternRecord
from pml_server.storage.codec import decode_counters_shared, decode_intent_for_view, decode_pattern
from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_INTENTS,
    CF_PATTERNS,
    split_tenant,
    tenant_key,
    tenant_prefix,
    u64,
)
from pml_server.storage.seam import KeyValueReads, Op

_LAST_ID = 2**64 - 1  # the largest u64 intent id

# The families a pattern's view is read from (`patterns_written`).
_VIEW_FAMILIES = frozenset({CF_PATTERNS, CF_COUNTERS, CF_INTENTS})


class ViewRows(NamedTuple):
    """What `ViewReads.view_rows` read: stored bytes, None where gone."""

    patterns: list[bytes | None]
    counters: list[bytes | None]
    intents: list[list[bytes]]  # each pattern's shown intents (domain/shown_intents.py)
    intent_counts: list[int]  # how many intents each pattern has


class ShownView(NamedTuple):
    """A pattern as a view shows it: record, counters (shared: never mutate them), the shown
    intents without their vectors, best first, and how many intents it has."""

    record: PatternRecord
    counters: PatternCounters
    intents: list[IntentRecord]
    intent_count: int


class ViewReads:
    def __init__(self, store: KeyValueReads) -> None:
        self.store = store

    def patterns_with_counters(
        self, tenant: str, pattern_ids: Sequence[str]
    ) -> list[tuple[PatternRecord, PatternCounters] | None]:
        """(record, counters) of each pattern, None where either is missing (deleted): two
        multi-gets, each stored value decoded once (memoized on its bytes). The counters are
        shared with other readers: never mutate them."""
        keys = [tenant_key(tenant, pattern_id) for pattern_id in pattern_ids]
        records = self.store.get_many(CF_PATTERNS, keys)
        counters = self.store.get_many(CF_COUNTERS, keys)
        return [
            None
            if record is None or count is None
            else (decode_pattern(record), decode_counters_shared(count))
            for record, count in zip(records, counters, strict=True)
        ]

    def intent_views_by_id(
        self, tenant: str, wanted: Sequence[tuple[str, int]]
    ) -> list[IntentRecord | None]:
        """The intents named by (pattern id, intent id), in order, None where gone, without
        their vectors (for views): one multi-get instead of a prefix scan per pattern."""
        keys = [tenant_key(tenant, pattern_id, u64(intent_id)) for pattern_id, intent_id in wanted]
        return [
            None if raw is None else decode_intent_for_view(raw)
            for raw in self.store.get_many(CF_INTENTS, keys)
        ]

    def shown_intent_rows(
        self,
        tenant: str,
        pattern_ids: Sequence[str],
        counters: Sequence[PatternCounters | None],
    ) -> tuple[list[list[bytes]], list[int]]:
        """(the stored bytes of each pattern's shown intents, best first; how many intents it
        has), by its `counters` (None: none read): one multi-get of the few intents the
        counters name (domain/shown_intents.py), never all of them; a pattern whose counters
        an older build wrote is read whole, once per view, until its next capture."""
        keys: list[bytes] = []
        runs: list[tuple[int, int] | list[bytes]] = []
        counts: list[int] = []
        for pattern_id, counted in zip(pattern_ids, counters, strict=True):
            ids = None if counted is None else shown_intents.shown_ids(counted)
            if counted is None:
                runs.append([])
                counts.append(0)
            elif ids is None:
                prefix = intent_prefix(tenant, pattern_id)
                every = [raw for _, raw in self.store.scan(CF_INTENTS, prefix)]
                every.sort(key=lambda raw: _view_order(decode_intent_for_view(raw)))
                runs.append(every[: shown_intents.SHOWN_INTENTS])
                counts.append(len(every))
            else:
                runs.append((len(keys), len(keys) + len(ids)))
                keys += [tenant_key(tenant, pattern_id, u64(i)) for i in ids]
                counts.append(counted.intent_count or 0)
        found = self.store.get_many(CF_INTENTS, keys) if keys else []
        rows = [
            run if isinstance(run, list) else [raw for raw in found[run[0] : run[1]] if raw]
            for run in runs
        ]
        return rows, counts

    def view_rows(self, tenant: str, pattern_ids: Sequence[str]) -> ViewRows | None:
        """The stored bytes of these patterns' records, counters and shown intents, in order,
        None where gone: three multi-gets, the counters decoded (memoized) to name the
        intents (`codec.stored_view` makes the views). None from a repository that keeps
        decoded views of its own (a shared store's replica cache): then `shown_views`."""
        keys = [tenant_key(tenant, pattern_id) for pattern_id in pattern_ids]
        patterns = self.store.get_many(CF_PATTERNS, keys)
        counters = self.store.get_many(CF_COUNTERS, keys)
        decoded = [None if raw is None else decode_counters_shared(raw) for raw in counters]
        intents, counts = self.shown_intent_rows(tenant, pattern_ids, decoded)
        return ViewRows(patterns, counters, intents, counts)

    def shown_views(self, tenant: str, pattern_ids: Sequence[str]) -> list[ShownView | None]:
        """What a Suggest shows of these patterns, decoded, None where deleted (a shared
        store: from its replica's cache)."""
        return self.read_shown_views(tenant, pattern_ids)

    def read_shown_views(self, tenant: str, pattern_ids: Sequence[str]) -> list[ShownView | None]:
        """`shown_views` read from the store now (GetPattern: never from a cache)."""
        found = self.patterns_with_counters(tenant, pattern_ids)
        return self.shown_of(tenant, pattern_ids, found)

    def views_of_records(
        self, tenant: str, records: Sequence[PatternRecord]
    ) -> list[ShownView | None]:
        """The `ShownView`s of these pattern records (read already), None where deleted
        meanwhile (no counters): a multi-get of their counters and one of the intents those
        name."""
        ids = [record.id for record in records]
        counters = [
            None if raw is None else decode_counters_shared(raw)
            for raw in self.store.get_many(CF_COUNTERS, [tenant_key(tenant, p) for p in ids])
        ]
        found = [
            None if counted is None else (record, counted)
            for record, counted in zip(records, counters, strict=True)
        ]
        return self.shown_of(tenant, ids, found)

    def shown_of(
        self,
        tenant: str,
        pattern_ids: Sequence[str],
        found: Sequence[tuple[PatternRecord, PatternCounters] | None],
    ) -> list[ShownView | None]:
        """The `ShownView`s of these patterns' (record, counters), their shown intents read."""
        rows, counts = self.shown_intent_rows(
            tenant, pattern_ids, [None if pair is None else pair[1] for pair in found]
        )
        return [
            None
            if pair is None
            else ShownView(pair[0], pair[1], [decode_intent_for_view(r) for r in raw], count)
            for pair, raw, count in zip(found, rows, counts, strict=True)
        ]

    def intents_page(
        self, tenant: str, pattern_id: str, after: int | None, limit: int
    ) -> list[IntentRecord]:
        """At most `limit` of the pattern's intents after the intent id `after` (None: from
        the first), in id order, without their vectors: one range scan of that many rows."""
        prefix = intent_prefix(tenant, pattern_id)
        if after is not None and after >= _LAST_ID:
            return []
        start = prefix if after is None else tenant_key(tenant, pattern_id, u64(after + 1))
        rows = self.store.scan(CF_INTENTS, prefix, start=start, limit=limit)
        return [decode_intent_for_view(raw) for _, raw in rows]

    def patterns_written(self, ops: Sequence[Op]) -> set[tuple[str, str]]:
        """(tenant, pattern id) of each pattern whose record, counters or intents `ops` write
        or delete: what a pattern's view shows."""
        written = set()
        for cf, key, _ in ops:
            if cf in _VIEW_FAMILIES:
                tenant, rest = split_tenant(key)
                # pattern and counters keys end with the id; intent keys add 0x00 + u64
                written.add((tenant, rest.split(b"\x00", 1)[0].decode()))
        return written

    def pattern_rank_rows(self, tenant: str) -> Iterator[tuple[str, str, list[str], bool, bool]]:
        """(id, capability id, tools, flagged, superseded) of each stored pattern: the ranking
        table's record part, streamed (before anything writes only, `Store.scan_stored`)."""
        for _, raw in self.store.scan_stored(CF_PATTERNS, tenant_prefix(tenant)):
            yield pattern_rank_row(raw)

    def counter_rank_rows(self, tenant: str) -> Iterator[tuple[str, int, int, int, int, list[str]]]:
        """(pattern id, successes, failures, usage, last used, tags) of each stored counters
        record: the ranking table's counters part, streamed (before anything writes only)."""
        for key, raw in self.store.scan_stored(CF_COUNTERS, tenant_prefix(tenant)):
            yield counter_rank_row(split_tenant(key)[1].decode(), raw)


def intent_prefix(tenant: str, pattern_id: str) -> bytes:
    """The prefix of a pattern's intent keys."""
    return tenant_key(tenant, pattern_id, b"")


def _view_order(intent: IntentRecord) -> tuple[int, int]:
    return -intent.hit_count, intent.id


def pattern_rank_row(raw: bytes) -> tuple[str, str, list[str], bool, bool]:
    """(id, capability id, tools, flagged, superseded) of a stored pattern record."""
    data = json_form.loads(raw)
    return (
        data["id"],
        data["capability_id"],
        data["tools_used"],
        bool(data.get("flagged_for_removal", False)),
        bool(data.get("superseded_by", "")),
    )


def counter_rank_row(pattern_id: str, raw: bytes) -> tuple[str, int, int, int, int, list[str]]:
    """(pattern id, successes, failures, usage, last used, tags) of a stored counters record."""
    data = json_form.loads(raw)
    return (
        pattern_id,
        data["success"],
        data["failure"],
        data["usage"],
        data["last_used_ms"],
        data.get("tags", []),
    )
