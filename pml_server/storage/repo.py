"""Typed access to the store: domain records in, keys and bytes out.

The engine talks to this module only, never to keys or rocksdict, so a second backend (e.g. a
shared SQL database) implements this surface without touching the capture rules. Reads return
records; writes are built as operations (`Op`) that the engine collects into one atomic batch.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

from pml_server.domain import json_form
from pml_server.domain.records import (
    CapabilityRecord,
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
    encode_capability,
    encode_pattern,
)
from pml_server.storage.keys import (
    CF_AUDIT,
    CF_CAP_BY_TOOLS,
    CF_CAPABILITIES,
    CF_COUNTERS,
    CF_FAILURES,
    CF_HASHES,
    CF_INTENTS,
    CF_META,
    CF_OPLOG,
    CF_PATTERNS,
    CF_REQUESTS,
    CF_SESSIONS,
    CF_TRANSITIONS,
    from_u64,
    split_tenant,
    tenant_key,
    tenant_prefix,
    u64,
)
from pml_server.storage.seam import Op, StoreBackend

_MODEL_KEY = b"model_id"
_ALLOCATOR_KEY = b"allocator/"
_STATS_KEY = b"stats/"
_SNAPSHOT_KEY = b"snapshot/"
# The families a pattern's view is read from (`patterns_written`).
_VIEW_FAMILIES = frozenset({CF_PATTERNS, CF_COUNTERS, CF_INTENTS})


def tools_digest(tools: Sequence[str]) -> str:
    return _digest_of(tuple(tools))


# A new pattern needs its signature's digest three times (group lock, grouping scan, link key);
# signatures repeat, and a hash object costs more than the lookup.
@functools.lru_cache(maxsize=4096)
def _digest_of(tools: tuple[str, ...]) -> str:
    return hashlib.sha256("\x1f".join(tools).encode()).hexdigest()[:32]


class ViewRows(NamedTuple):
    """What `Repository.view_rows` read: stored bytes, None where gone."""

    patterns: list[bytes | None]
    counters: list[bytes | None]
    intents: list[bytes | None]


class Repository:
    def __init__(self, store: StoreBackend) -> None:
        self.store = store
        self._ceilings = _CounterCeilings(store)

    # ---- meta --------------------------------------------------------------------------------

    def model_id(self) -> str | None:
        raw = self.store.get(CF_META, _MODEL_KEY)
        return None if raw is None else raw.decode()

    def put_model_id(self, model_id: str) -> Op:
        return (CF_META, _MODEL_KEY, model_id.encode())

    def allocator_mark(self, name: str) -> int:
        raw = self.store.get(CF_META, _ALLOCATOR_KEY + name.encode())
        return 0 if raw is None else from_u64(raw)

    def put_allocator_mark(self, name: str, mark: int) -> Op:
        return (CF_META, _ALLOCATOR_KEY + name.encode(), u64(mark))

    def stats(self, tenant: str) -> TenantStats:
        raw = self.store.get(CF_META, _STATS_KEY + tenant_prefix(tenant))
        return TenantStats() if raw is None else TenantStats.from_json(raw)

    def put_stats(
        self, tenant: str, stats: TenantStats, deltas: Mapping[str, int] | None = None
    ) -> Op:
        """`stats` as they are after the batch (`deltas`: what the batch added; a shared store
        writes those instead)."""
        return (CF_META, _STATS_KEY + tenant_prefix(tenant), stats.to_json())

    def consistent_reads(self) -> AbstractContextManager[None]:
        """A block whose reads see one state of the store (the embedded store: every read
        already does, for what Suggest reads, since its ceilings rise before a write shows)."""
        return contextlib.nullcontext()

    def snapshot(self, tenant: str) -> tuple[int, bytes] | None:
        """(op log sequence the snapshot includes, index bytes) of the tenant's vector index."""
        raw = self.store.get(CF_META, _SNAPSHOT_KEY + tenant_prefix(tenant))
        return None if raw is None else (from_u64(raw[:8]), raw[8:])

    def put_snapshot(self, tenant: str, seq: int, data: bytes) -> Op:
        return (CF_META, _SNAPSHOT_KEY + tenant_prefix(tenant), u64(seq) + data)

    # ---- idempotency -------------------------------------------------------------------------

    def request_result(self, tenant: str, request_id: str) -> bytes | None:
        return self.store.get(CF_REQUESTS, tenant_key(tenant, request_id))

    def request_results(self, tenant: str, request_ids: Sequence[str]) -> list[bytes | None]:
        """`request_result` of each id, in order, in one multi-get."""
        return self.store.get_many(CF_REQUESTS, [tenant_key(tenant, r) for r in request_ids])

    def put_request_result(self, tenant: str, request_id: str, result: bytes) -> Op:
        return (CF_REQUESTS, tenant_key(tenant, request_id), result)

    def request_rows(self, tenant: str) -> list[tuple[bytes, bytes]]:
        return self.store.scan(CF_REQUESTS, tenant_prefix(tenant))

    def delete_request(self, key: bytes) -> Op:
        return (CF_REQUESTS, key, None)

    # ---- patterns ----------------------------------------------------------------------------

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

    def all_patterns(self, tenant: str) -> list[PatternRecord]:
        rows = self.store.scan(CF_PATTERNS, tenant_prefix(tenant))
        return [PatternRecord.from_json(v) for _, v in rows]

    def pattern_tools(self, tenant: str) -> dict[str, tuple[str, ...]]:
        """Each stored pattern's tools, by pattern id: what rebuilding the lexical index needs.
        Streamed, and only these two fields are kept (`all_patterns` builds every record: a
        sixth of a 100k open). Before anything writes only (`Store.scan_stored`)."""
        tools: dict[str, tuple[str, ...]] = {}
        for _, raw in self.store.scan_stored(CF_PATTERNS, tenant_prefix(tenant)):
            data = json_form.loads(raw)
            tools[data["id"]] = tuple(data["tools_used"])
        return tools

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

    def counters(self, tenant: str, pattern_id: str) -> PatternCounters | None:
        raw = self.store.get(CF_COUNTERS, tenant_key(tenant, pattern_id))
        return None if raw is None else PatternCounters.from_json(raw)

    def counter_ceilings(self, tenant: str) -> tuple[int, int]:
        """(successes, usage) at least as high as those of any pattern of `tenant`, now or
        about to be written (see `_CounterCeilings`)."""
        return self._ceilings.of(tenant)

    def put_counters(self, tenant: str, pattern_id: str, counters: PatternCounters) -> Op:
        self._ceilings.raise_to(tenant, counters)
        return (CF_COUNTERS, tenant_key(tenant, pattern_id), counters.to_json())

    def delete_counters(self, tenant: str, pattern_id: str) -> Op:
        return (CF_COUNTERS, tenant_key(tenant, pattern_id), None)

    # ---- intents -----------------------------------------------------------------------------

    def intents(self, tenant: str, pattern_id: str) -> list[IntentRecord]:
        rows = self.store.scan(CF_INTENTS, tenant_key(tenant, pattern_id, b""))
        return [decode_intent(v) for _, v in rows]

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

    def put_intent(self, tenant: str, intent: IntentRecord) -> Op:
        key = tenant_key(tenant, intent.pattern_id, u64(intent.id))
        return (CF_INTENTS, key, intent.to_json())

    def delete_intent(self, tenant: str, intent: IntentRecord) -> Op:
        return (CF_INTENTS, tenant_key(tenant, intent.pattern_id, u64(intent.id)), None)

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

    # ---- capabilities ------------------------------------------------------------------------

    def capability(self, tenant: str, capability_id: str) -> CapabilityRecord | None:
        raw = self.store.get(CF_CAPABILITIES, tenant_key(tenant, capability_id))
        return None if raw is None else CapabilityRecord.from_json(raw)

    def put_capability(self, tenant: str, record: CapabilityRecord) -> list[Op]:
        link = tenant_key(tenant, tools_digest(record.tools), record.id)
        return [
            (CF_CAPABILITIES, tenant_key(tenant, record.id), encode_capability(record)),
            (CF_CAP_BY_TOOLS, link, b""),
        ]

    def delete_capability(self, tenant: str, record: CapabilityRecord) -> list[Op]:
        link = tenant_key(tenant, tools_digest(record.tools), record.id)
        return [
            (CF_CAPABILITIES, tenant_key(tenant, record.id), None),
            (CF_CAP_BY_TOOLS, link, None),
        ]

    def capabilities_with_tools(self, tenant: str, tools: Sequence[str]) -> list[str]:
        prefix = tenant_key(tenant, tools_digest(tools), b"")
        return [key[len(prefix) :].decode() for key, _ in self.store.scan(CF_CAP_BY_TOOLS, prefix)]

    def capabilities_page(
        self, tenant: str, after: str, size: int
    ) -> tuple[list[CapabilityRecord], str]:
        prefix = tenant_prefix(tenant)
        start = tenant_key(tenant, after) + b"\x00" if after else None
        rows = self.store.scan(CF_CAPABILITIES, prefix, start=start, limit=size + 1)
        records = [CapabilityRecord.from_json(v) for _, v in rows[:size]]
        return records, (records[-1].id if len(rows) > size else "")

    # ---- sessions (docs/ranking.md, Sessions) -------------------------------------------------

    def session_step(self, tenant: str, session_id: str) -> tuple[str, int] | None:
        """(capability id, time in ms) of the session's last successful step, if kept."""
        raw = self.store.get(CF_SESSIONS, tenant_key(tenant, session_id))
        if raw is None:
            return None
        data = json_form.loads(raw)
        return str(data["capability"]), int(data["ms"])

    def put_session_step(self, tenant: str, session_id: str, capability_id: str, ms: int) -> Op:
        value = json_form.dumps({"capability": capability_id, "ms": ms})
        return (CF_SESSIONS, tenant_key(tenant, session_id), value)

    def session_rows(self, tenant: str) -> list[tuple[bytes, int]]:
        """(key, last step time) of every session kept for the tenant."""
        rows = self.store.scan(CF_SESSIONS, tenant_prefix(tenant))
        return [(key, int(json_form.loads(raw)["ms"])) for key, raw in rows]

    def delete_session(self, key: bytes) -> Op:
        return (CF_SESSIONS, key, None)

    def transition(self, tenant: str, previous: str, following: str) -> tuple[int, int] | None:
        """(count, last time in ms) of `previous` -> `following`, if ever seen."""
        raw = self.store.get(CF_TRANSITIONS, tenant_key(tenant, previous, following))
        if raw is None:
            return None
        data = json_form.loads(raw)
        return int(data["count"]), int(data["ms"])

    def put_transition(self, tenant: str, previous: str, following: str, count: int, ms: int) -> Op:
        value = json_form.dumps({"count": count, "ms": ms})
        return (CF_TRANSITIONS, tenant_key(tenant, previous, following), value)

    def transitions_from(
        self, tenant: str, previous: str, limit: int
    ) -> list[tuple[str, int, int]]:
        """(next capability id, count, last time in ms) of at most `limit` transitions out of
        `previous`, in key order."""
        prefix = tenant_key(tenant, previous, b"")
        rows = self.store.scan(CF_TRANSITIONS, prefix, limit=limit)
        out = []
        for key, raw in rows:
            data = json_form.loads(raw)
            out.append((key[len(prefix) :].decode(), int(data["count"]), int(data["ms"])))
        return out

    # ---- failure log, op log, audit log ------------------------------------------------------

    def put_failure(self, tenant: str, seq: int, entry: dict[str, Any]) -> Op:
        return (CF_FAILURES, tenant_key(tenant, u64(seq)), json_form.dumps(entry))

    def oldest_failure_keys(self, tenant: str, count: int) -> list[bytes]:
        return [k for k, _ in self.store.scan(CF_FAILURES, tenant_prefix(tenant), limit=count)]

    def delete_failure(self, key: bytes) -> Op:
        return (CF_FAILURES, key, None)

    def failures_page(
        self, tenant: str, before: int | None, size: int
    ) -> tuple[list[tuple[int, dict[str, Any]]], int | None]:
        """Newest first; `before` is the exclusive sequence bound returned by the previous page."""
        prefix = tenant_prefix(tenant)
        start = tenant_key(tenant, u64(before)) if before is not None else None
        rows = self.store.scan(CF_FAILURES, prefix, start=start, limit=size + 1, reverse=True)
        page = [(from_u64(k[len(prefix) :]), json_form.loads(v)) for k, v in rows[:size]]
        return page, (page[-1][0] if len(rows) > size else None)

    def put_oplog(self, seq: int, op: dict[str, Any]) -> Op:
        return (CF_OPLOG, u64(seq), json_form.dumps(op))

    def oplog_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        rows = self.store.scan(CF_OPLOG, b"", start=u64(seq + 1))
        return [(from_u64(k), json_form.loads(v)) for k, v in rows]

    def delete_oplog_through(self, seq: int) -> list[Op]:
        rows = self.store.scan(CF_OPLOG, b"")
        return [(CF_OPLOG, k, None) for k, _ in rows if from_u64(k) <= seq]

    def put_audit(self, tenant: str, seq: int, entry: dict[str, Any]) -> Op:
        return (CF_AUDIT, tenant_key(tenant, u64(seq)), json_form.dumps(entry))

    def audit_log(self, tenant: str) -> list[dict[str, Any]]:
        return [json_form.loads(v) for _, v in self.store.scan(CF_AUDIT, tenant_prefix(tenant))]


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


class _CounterCeilings:
    """Per tenant, the highest success and usage counts of any pattern: what lets a lazy ranking
    bound every unread candidate's score (the tests' oracle, testing/ranking_oracle/lazy.py;
    the core ranks from its table). Raised when a counters write is built, before it can be
    seen, so a reader never meets counts above the ceiling; never lowered (deleting a pattern
    only makes the bound looser). A tenant's stored counters are scanned once, on first use;
    raises that arrive before or during that scan are kept and merged."""

    def __init__(self, store: StoreBackend) -> None:
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
