"""Pattern records, the code-hash link that finds a pattern by its code, and its counters
(with the per-tenant ceilings Suggest bounds unread candidates by)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from pml_server.domain import json_form
from pml_server.domain.model import RetentionRow
from pml_server.domain.records import PatternCounters, PatternRecord
from pml_server.storage.codec import decode_counters_shared, decode_pattern, encode_pattern
from pml_server.storage.keys import CF_COUNTERS, CF_HASHES, CF_PATTERNS, tenant_key, tenant_prefix
from pml_server.storage.seam import KeyValueReads, Op

# Pattern records a retention run holds at once (`retention_rows`), each up to about twice the
# code limit (template and original code): 16 MiB at the default 256 KiB, a few hundred KB
# for patterns of a few KB.
RETENTION_PAGE = 32


class PatternRows:
    def __init__(self, store: KeyValueReads) -> None:
        self.store = store
        self._ceilings = _CounterCeilings(store)

    def pattern_id_for_hash(self, tenant: str, code_hash: str) -> str | None:
        raw = self.store.get(CF_HASHES, tenant_key(tenant, code_hash))
        return None if raw is None else raw.decode()

    def pattern_for_hash(
        self, tenant: str, code_hash: str
    ) -> tuple[PatternRecord | None, PatternCounters | None]:
        """The pattern stored under `code_hash` and its counters (a copy the caller may
        change), each None when missing."""
        pattern_id = self.pattern_id_for_hash(tenant, code_hash)
        if not pattern_id:
            return None, None
        return self.pattern(tenant, pattern_id), self.counters(tenant, pattern_id)

    def put_hash(self, tenant: str, code_hash: str, pattern_id: str) -> Op:
        return (CF_HASHES, tenant_key(tenant, code_hash), pattern_id.encode())

    def delete_hash(self, tenant: str, code_hash: str) -> Op:
        return (CF_HASHES, tenant_key(tenant, code_hash), None)

    def pattern(self, tenant: str, pattern_id: str) -> PatternRecord | None:
        raw = self.store.get(CF_PATTERNS, tenant_key(tenant, pattern_id))
        return None if raw is None else decode_pattern(raw)

    def patterns_by_id(self, tenant: str, pattern_ids: Sequence[str]) -> list[PatternRecord | None]:
        """The records of these patterns, in order, None where gone: one multi-get. Shared
        between readers (frozen)."""
        keys = [tenant_key(tenant, pattern_id) for pattern_id in pattern_ids]
        return [
            None if raw is None else decode_pattern(raw)
            for raw in self.store.get_many(CF_PATTERNS, keys)
        ]

    def put_pattern(self, tenant: str, record: PatternRecord) -> Op:
        return (CF_PATTERNS, tenant_key(tenant, record.id), encode_pattern(record))

    def delete_pattern(self, tenant: str, pattern_id: str) -> Op:
        return (CF_PATTERNS, tenant_key(tenant, pattern_id), None)

    def patterns_page(self, tenant: str, after: str, size: int) -> tuple[list[PatternRecord], str]:
        prefix = tenant_prefix(tenant)
        start = tenant_key(tenant, after) + b"\x00" if after else None
        rows = self.store.scan(CF_PATTERNS, prefix, start=start, limit=size + 1)
        records = [PatternRecord.from_json(v) for _, v in rows[:size]]
        return records, (records[-1].id if len(rows) > size else "")

    def pattern_tools(self, tenant: str) -> dict[str, tuple[str, ...]]:
        """Each stored pattern's tools, by pattern id: what rebuilding the lexical index needs.
        Streamed, and only these two fields are kept (building every record was a sixth of a
        100k open). Before anything writes only (`Store.scan_stored`)."""
        tools: dict[str, tuple[str, ...]] = {}
        for _, raw in self.store.scan_stored(CF_PATTERNS, tenant_prefix(tenant)):
            data = json_form.loads(raw)
            tools[data["id"]] = tuple(data["tools_used"])
        return tools

    def retention_rows(self, tenant: str) -> Iterator[RetentionRow]:
        """Each pattern's `RetentionRow`, in pattern id order: the records a page of
        `RETENTION_PAGE` at a time, each decoded only while its row is built, and the page's
        counters in one multi-get (not the shared decode cache: a run reads every pattern once).
        A pattern whose counters are gone (deleted meanwhile) has no row. Safe while writes are
        pending, unlike `scan_stored`."""
        prefix = tenant_prefix(tenant)
        start: bytes | None = None
        while True:
            page = self.store.scan(CF_PATTERNS, prefix, start=start, limit=RETENTION_PAGE)
            if not page:
                return
            ids = [_pattern_ids(raw) for _, raw in page]
            keys = [key for key, _ in page]
            start = keys[-1] + b"\x00"
            full = len(page) == RETENTION_PAGE
            del page  # the records' bytes, code and all, go before the counters are read
            for (pattern_id, capability_id), raw_counters in zip(
                ids, self.store.get_many(CF_COUNTERS, keys), strict=True
            ):
                if raw_counters is None:
                    continue
                counts = json_form.loads(raw_counters)
                yield RetentionRow(
                    pattern_id,
                    capability_id,
                    counts["success"],
                    counts["failure"],
                    counts["last_used_ms"],
                )
            if not full:
                return

    def counters(self, tenant: str, pattern_id: str) -> PatternCounters | None:
        raw = self.store.get(CF_COUNTERS, tenant_key(tenant, pattern_id))
        return None if raw is None else PatternCounters.from_json(raw)

    def counters_by_id(
        self, tenant: str, pattern_ids: Sequence[str]
    ) -> list[PatternCounters | None]:
        """The counters of these patterns, in order, None where gone: one multi-get. Shared
        with other readers: never mutate them."""
        keys = [tenant_key(tenant, pattern_id) for pattern_id in pattern_ids]
        return [
            None if raw is None else decode_counters_shared(raw)
            for raw in self.store.get_many(CF_COUNTERS, keys)
        ]

    def counter_ceilings(self, tenant: str) -> tuple[int, int]:
        """(successes, usage) at least as high as those of any pattern of `tenant`, now or
        about to be written (see `_CounterCeilings`)."""
        return self._ceilings.of(tenant)

    def put_counters(self, tenant: str, pattern_id: str, counters: PatternCounters) -> Op:
        self._ceilings.raise_to(tenant, counters)
        return (CF_COUNTERS, tenant_key(tenant, pattern_id), counters.to_json())

    def delete_counters(self, tenant: str, pattern_id: str) -> Op:
        return (CF_COUNTERS, tenant_key(tenant, pattern_id), None)


def _pattern_ids(raw: bytes) -> tuple[str, str]:
    """(id, capability id) of a stored pattern record, its code decoded and dropped at once."""
    data = json_form.loads(raw)
    return data["id"], data["capability_id"]


class _CounterCeilings:
    """Per tenant, the highest success and usage counts of any pattern: what lets a lazy ranking
    bound every unread candidate's score (the tests' oracle, testing/ranking_oracle/lazy.py;
    the core ranks from its table). Raised when a counters write is built, before it can be
    seen, so a reader never meets counts above the ceiling; never lowered (deleting a pattern
    only makes the bound looser). A tenant's stored counters are scanned once, on first use;
    raises that arrive before or during that scan are kept and merged."""

    def __init__(self, store: KeyValueReads) -> None:
        self._store = store
        self._lock = threading.Lock()
        self._ceilings: dict[str, tuple[int, int]] = {}
        self._scanned: set[str] = set()

    def raise_to(self, tenant: str, counters: PatternCounters) -> None:
        with self._lock:
            self._raise_locked(tenant, counters.success, counters.usage)

    def _raise_locked(self, tenant: str, success: int, usage: int) -> None:
        old_success, old_usage = self._ceilings.get(tenant, (0, 0))
        self._ceilings[tenant] = (max(old_success, success), max(old_usage, usage))

    def of(self, tenant: str) -> tuple[int, int]:
        with self._lock:
            if tenant not in self._scanned:
                for _, raw in self._store.scan(CF_COUNTERS, tenant_prefix(tenant)):
                    counts = json_form.loads(raw)
                    self._raise_locked(tenant, counts["success"], counts["usage"])
                self._scanned.add(tenant)
            return self._ceilings.get(tenant, (0, 0))
