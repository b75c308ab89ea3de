"""What Suggest reads: the views it shows (records, counters and the wanted intents, without
their vectors) in few round trips, and the ranking table's rows (service/_suggest_core.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

from pml_server.domain import json_form
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

# The families a pattern's view is read from (`patterns_written`).
_VIEW_FAMILIES = frozenset({CF_PATTERNS, CF_COUNTERS, CF_INTENTS})


class ViewRows(NamedTuple):
    """What `ViewReads.view_rows` read: stored bytes, None where gone."""

    patterns: list[bytes | None]
    counters: list[bytes | None]
    intents: list[bytes | None]


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

    def patterns_and_intent_views(
        self, tenant: str, pattern_ids: Sequence[str], wanted: Sequence[tuple[str, int]]
    ) -> tuple[list[tuple[PatternRecord, PatternCounters] | None], list[IntentRecord | None]]:
        """`patterns_with_counters` and `intent_views_by_id` (a shared store: in one round
        trip)."""
        return self.patterns_with_counters(tenant, pattern_ids), self.intent_views_by_id(
            tenant, wanted
        )

    def view_rows(
        self, tenant: str, pattern_ids: Sequence[str], wanted: Sequence[tuple[str, int]]
    ) -> ViewRows | None:
        """The stored bytes of these patterns' records and counters and of the `wanted`
        (pattern id, intent id) intents, in order, None where gone: three multi-gets, nothing
        decoded (`codec.stored_view` makes the views). None from a repository that keeps
        decoded views of its own (a shared store's replica cache): then
        `patterns_and_intent_views`."""
        keys = [tenant_key(tenant, pattern_id) for pattern_id in pattern_ids]
        intent_keys = [tenant_key(tenant, p, u64(i)) for p, i in wanted]
        return ViewRows(
            self.store.get_many(CF_PATTERNS, keys),
            self.store.get_many(CF_COUNTERS, keys),
            self.store.get_many(CF_INTENTS, intent_keys),
        )

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
