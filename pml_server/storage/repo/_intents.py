"""Intents: each pattern's (keyed by pattern id and intent id), read per pattern, by id, or
streamed for every tenant when the in-memory indexes are rebuilt."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from pml_server.domain.records import IntentRecord, decode_intent
from pml_server.storage.codec import decode_intent_for_view
from pml_server.storage.keys import (
    CF_INTENTS,
    from_u64,
    split_tenant,
    tenant_key,
    tenant_prefix,
    u64,
)
from pml_server.storage.seam import KeyValueReads, Op

# The rows a read of every intent of one pattern takes at a time (deleting it, summarizing
# its shown intents): a pattern keeps every distinct intent, so each read is a range scan of
# at most this many from the last key read (docs/capture.md, The intents a view shows).
WHOLE_PATTERN_READ = 256


class IntentRows:
    def __init__(self, store: KeyValueReads) -> None:
        self.store = store

    def of_pattern(
        self, tenant: str, pattern_id: str, limit: int | None = None
    ) -> list[IntentRecord]:
        """The pattern's intents in id order, with their vectors (the first `limit` of them)."""
        rows = self.store.scan(CF_INTENTS, tenant_key(tenant, pattern_id, b""), limit=limit)
        return [decode_intent(v) for _, v in rows]

    def first_of_pattern(self, tenant: str, pattern_id: str, limit: int) -> list[IntentRecord]:
        """The pattern's first `limit` intents in id order (oldest first), without their
        vectors: what a capability's view shows of its patterns' intents."""
        rows = self.store.scan(CF_INTENTS, tenant_key(tenant, pattern_id, b""), limit=limit)
        return [decode_intent_for_view(v) for _, v in rows]

    def first_of_patterns(
        self, tenant: str, pattern_ids: Sequence[str], each: int, total: int
    ) -> Iterator[IntentRecord]:
        """Each pattern's first `each` intents in id order, pattern by pattern, at most `total`
        in all, without their vectors: read a pattern at a time as the caller asks (a local
        range scan each; a shared store reads them in one query, `SharedIntents`)."""
        left = total
        for pattern_id in pattern_ids:
            if left <= 0:
                return
            intents = self.first_of_pattern(tenant, pattern_id, min(left, each))
            left -= len(intents)
            yield from intents

    def ids_of_pattern(self, tenant: str, pattern_id: str) -> Iterator[int]:
        """The ids of the pattern's intents in id order, read `WHOLE_PATTERN_READ` rows at a
        time, taken from their keys: nothing decoded."""
        prefix = tenant_key(tenant, pattern_id, b"")
        for rows in self._pages(prefix):
            for key, _ in rows:
                yield from_u64(key[len(prefix) :])

    def views_of_pattern(self, tenant: str, pattern_id: str) -> Iterator[IntentRecord]:
        """The pattern's intents in id order without their vectors, read `WHOLE_PATTERN_READ`
        rows at a time."""
        for rows in self._pages(tenant_key(tenant, pattern_id, b"")):
            for _, raw in rows:
                yield decode_intent_for_view(raw)

    def _pages(self, prefix: bytes) -> Iterator[list[tuple[bytes, bytes]]]:
        """The rows under `prefix` in key order, each page one range scan of at most
        `WHOLE_PATTERN_READ` rows from the last key read."""
        start = prefix
        while True:
            rows = self.store.scan(CF_INTENTS, prefix, start=start, limit=WHOLE_PATTERN_READ)
            if rows:
                yield rows
            if len(rows) < WHOLE_PATTERN_READ:
                return
            start = rows[-1][0] + b"\x00"

    def of_pattern_if_few(self, tenant: str, pattern_id: str) -> list[IntentRecord] | None:
        """Every intent of the pattern if the store read them already with it and they are
        few (a shared store, `SharedIntents`); else None: ask the index which to read."""
        return None

    def intents_by_id(
        self, tenant: str, wanted: Sequence[tuple[str, int]]
    ) -> list[IntentRecord | None]:
        """The intents named by (pattern id, intent id), in order, None where gone: one
        multi-get instead of a prefix scan per pattern."""
        keys = [tenant_key(tenant, pattern_id, u64(intent_id)) for pattern_id, intent_id in wanted]
        return [
            None if raw is None else decode_intent(raw)
            for raw in self.store.get_many(CF_INTENTS, keys)
        ]

    def put_intent(self, tenant: str, intent: IntentRecord) -> Op:
        key = tenant_key(tenant, intent.pattern_id, u64(intent.id))
        return (CF_INTENTS, key, intent.to_json())

    def delete_intent(self, tenant: str, pattern_id: str, intent_id: int) -> Op:
        return (CF_INTENTS, tenant_key(tenant, pattern_id, u64(intent_id)), None)

    def stored_intents(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        """(tenant, its intents' stored bytes) for every tenant, streamed in key order (a
        tenant's keys are contiguous): rebuilding the in-memory indexes at open reads them one
        at a time instead of holding every record and vector at once. Before anything
        writes only (`Store.scan_stored`)."""
        rows = self.store.scan_stored(CF_INTENTS)
        for tenant, group in itertools.groupby(rows, key=lambda row: split_tenant(row[0])[0]):
            yield tenant, (value for _, value in group)

    def tenant_stored_intents(self, tenant: str) -> Iterator[bytes]:
        """One tenant's part of `stored_intents`."""
        return (value for _, value in self.store.scan_stored(CF_INTENTS, tenant_prefix(tenant)))
