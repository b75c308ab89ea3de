"""The write path every change of the engine takes: what one capture or deletion writes (a
`Change`), submitting it with the tenant's stats and failure log as one batch (`commit`), the
op log and audit entries, and waiting for the write to become durable.

Everything a change writes goes to the store as one batch, submitted while the caller's locks
are held (the store's overlay makes it visible to the next holder at once) and awaited after
the inner locks are released, so group commit can merge concurrent captures into one fsync.
A shared store (PostgreSQL) commits the batch in `submit`, in the transaction the caller's
locks opened, and adds the stats deltas in SQL."""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pml_server.capture.rules import tool_failures
from pml_server.domain.model import ExecutionRecord, ToolFailure
from pml_server.domain.records import IntentRecord, PatternCounters, PatternRecord, TenantStats
from pml_server.domain.vectors import Vector
from pml_server.ranking import RankTable
from pml_server.search.tenant import compact_worn
from pml_server.service._state import EngineState, IndexAdd
from pml_server.storage.repo import names_pattern
from pml_server.storage.seam import Op, WriteTicket

# Pattern and capability ids only need to be unique, not secret: a generator seeded from the
# OS once per process draws 64 bits in well under a microsecond, where `secrets` asks the
# kernel each time (tens of microseconds on a loaded machine, twice per new pattern).
_ids = random.Random(os.urandom(32))


def random_id(prefix: str) -> str:
    """`prefix_` + 16 random hex digits (pattern and capability ids)."""
    return f"{prefix}_{_ids.getrandbits(64):016x}"


@dataclass
class Change:
    """What one capture or deletion changes besides its own ops: tenant stats deltas, failure
    log entries, and in-memory index updates to apply once the batch is submitted."""

    ops: list[Op] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)
    # A user's deletion: (pattern id, code hash) whose failure log entries are erased, and
    # the keys that erased (for `Store.erase_overwritten`).
    erase_failures_of: tuple[str, str] | None = None
    # A merge or a rekey (service/_older_builds.py): the failure log entries at these keys
    # still naming the first pattern, by its id or (a rejected first try) by its code hash,
    # name (id, hash) of the second instead.
    failures_moved: tuple[list[bytes], PatternRecord, PatternRecord] | None = None
    erased: list[tuple[str, bytes]] = field(default_factory=list)
    index_adds: list[tuple[IntentRecord, tuple[str, ...]]] = field(default_factory=list)
    index_removes: list[int] = field(default_factory=list)
    # The ranking table's updates (`TenantSearchIndex.ranks`): pattern records and counters
    # written, patterns deleted.
    rank_patterns: list[PatternRecord] = field(default_factory=list)
    rank_counters: list[tuple[str, PatternCounters]] = field(default_factory=list)
    rank_removes: list[str] = field(default_factory=list)

    def put_counters(self, op: Op, pattern_id: str, counters: PatternCounters) -> None:
        """A counters write and the ranking table's update that goes with it."""
        self.ops.append(op)
        self.rank_counters.append((pattern_id, counters))

    def put_pattern(self, op: Op, record: PatternRecord) -> None:
        """A pattern record write and the ranking table's update that goes with it."""
        self.ops.append(op)
        self.rank_patterns.append(record)

    def ranks_changed(self) -> bool:
        return bool(self.rank_patterns or self.rank_counters or self.rank_removes)

    def count(self, name: str, delta: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + delta


def await_durable(ticket: WriteTicket) -> None:
    """Wait until the write is durable; a store that failed or closed meanwhile raises
    StoreClosedError, an UnavailableError (the capture may be retried with the same id)."""
    ticket.wait()


def failure_entries(
    record: ExecutionRecord, code_hash: str, pattern_id: str, now: int
) -> list[dict[str, Any]]:
    """The failure log entries of a failed run: one per failing tool (or one for the run)."""
    failures = tool_failures(record) or (ToolFailure("", "execution failed"),)
    return [
        {
            "request_id": record.request_id,
            "tool": f.tool,
            "error": f.error,
            "intent": record.intent,
            "code_hash": code_hash,
            "pattern_id": pattern_id,
            "time_ms": now,
        }
        for f in failures
    ]


def commit(state: EngineState, tenant: str, change: Change) -> WriteTicket:
    """Add the tenant's stats and failure log to `change.ops` and submit them as one batch.
    Inside `record_many` the index additions wait in the batch's list (one index call for
    the whole batch); otherwise they are applied at once."""
    repo = state.repo
    log_size = state.config.failure_log_size
    rewrites_log = change.erase_failures_of is not None or change.failures_moved is not None
    if state.store.shared and not change.failures and not rewrites_log:
        # The store adds the stats deltas in SQL and nothing here reads stats: no tenant lock,
        # so this replica's captures of one tenant commit (and wait for the WAL flush) together.
        if change.stats:
            change.ops.append(repo.meta.put_stats(tenant, TenantStats(), change.stats))
        ticket = state.store.submit(change.ops)
        _apply_to_indexes(state, tenant, change)
        return ticket
    # On a shared store the tenant lock is also held against other replicas until the batch
    # commits: the log's bound is counted from `failures_logged`, and an erasure rewrites
    # entries a trim may remove (docs/storage.md, The failure log on a shared store).
    with state.locks.tenant.lock_for(tenant):
        stats = state.submitted_stats.get(tenant)
        # A shared store adds the deltas in SQL; its stats are read again only where the
        # failure log's bound needs them (another replica may have logged failures).
        if stats is None or (state.store.shared and change.failures):
            stats = repo.meta.stats(tenant)
        logged = len(change.failures)
        if logged:
            retained = min(stats.failures_logged, log_size)
            excess = retained + logged - log_size
            for entry in change.failures:
                change.ops.append(repo.logs.put_failure(tenant, state.ids.seq.next(), entry))
            if excess > 0:
                for key in repo.logs.oldest_failure_keys(tenant, excess):
                    change.ops.append(repo.logs.delete_failure(key))
            change.count("failures_logged", logged)
        if change.erase_failures_of is not None:
            # under the lock that trims the log: an entry trimmed meanwhile is not put back
            _erase_failures(state, tenant, change, *change.erase_failures_of)
        if change.failures_moved is not None:  # likewise
            _move_failures(state, tenant, change, *change.failures_moved)
        if change.stats:
            values = {k: getattr(stats, k) + v for k, v in change.stats.items()}
            stats = replace(stats, **values)
            change.ops.append(repo.meta.put_stats(tenant, stats, change.stats))
        ticket = state.store.submit(change.ops)  # StoreClosedError: UNAVAILABLE
        state.submitted_stats[tenant] = stats
    _apply_to_indexes(state, tenant, change)
    return ticket


def _erase_failures(
    state: EngineState, tenant: str, change: Change, pattern_id: str, code_hash: str
) -> None:
    """A user's deletion of a pattern: the failure log's entries of its runs are erased
    (docs/storage.md, Data left on disk)."""
    logs = state.repo.logs
    erased = [logs.erase_failure(key) for key in logs.failures_of(tenant, pattern_id, code_hash)]
    change.ops += erased
    change.erased += [(cf, key) for cf, key, _ in erased]


def _move_failures(
    state: EngineState,
    tenant: str,
    change: Change,
    keys: list[bytes],
    former: PatternRecord,
    now: PatternRecord,
) -> None:
    """A merge or a rekey: the failure log's entries (at `keys`, read again here) of
    `former`'s runs and of its code's rejected first tries name `now` (its id, its hash), so
    that a listing names a pattern that exists and a deletion of `now` erases them
    (docs/storage.md, Migrations)."""
    logs = state.repo.logs
    for key, entry in logs.entries_at(keys):
        if not names_pattern(entry, former.id, former.code_hash):
            continue
        moved = {**entry, "code_hash": now.code_hash}
        if entry.get("pattern_id"):
            moved["pattern_id"] = now.id
        change.ops.append(logs.rewrite_failure(key, moved))


def _apply_to_indexes(state: EngineState, tenant: str, change: Change) -> None:
    """The in-memory side of a submitted change: cached views, ranking table, then search
    indexes."""
    if state.views is not None:  # the batch is readable: no view read from now on is stale
        state.views.invalidate(state.repo.views.patterns_written(change.ops))
    if change.ranks_changed():  # before the index adds: a new intent finds its row
        apply_rank_changes(state.indexes.for_tenant(tenant).ranks, change)
    staged: list[IndexAdd] | None = getattr(state.batching.staged_adds, "adds", None)
    if staged is not None and not change.index_removes:
        if change.index_adds:  # inserted at the end of the batch (`apply_staged_adds`)
            state.indexes.for_tenant(tenant).staged.add(change.index_adds)
            staged += change.index_adds
    elif change.index_adds or change.index_removes:
        index = state.indexes.for_tenant(tenant)
        if change.index_removes:  # a capture removes nothing: no write lock taken for it
            index.remove(change.index_removes)
        for intent, tools in change.index_adds:
            index.add(intent, tools)


def compact_index(state: EngineState, tenant: str) -> None:
    """After a change that removed intents, once the caller's locks are released: the tenant's
    vector indexes are compacted when their tombstones wear them, on a copy, so that no capture
    (which may wait for those locks) waits for a compaction (docs/ranking.md, Retention)."""
    compact_worn(state.indexes.for_tenant(tenant))


def apply_rank_changes(table: RankTable, change: Change) -> None:
    """The ranking table's side of a submitted change (the pattern's lock is held)."""
    for record in change.rank_patterns:
        table.set_pattern(
            record.id,
            record.capability_id,
            record.tools_used,
            record.flagged_for_removal,
            bool(record.superseded_by),
        )
    for pattern_id, counters in change.rank_counters:
        table.set_counters(
            pattern_id,
            counters.success,
            counters.failure,
            counters.usage,
            counters.last_used_ms,
            counters.tags,
        )
    for pattern_id in change.rank_removes:
        table.remove_pattern(pattern_id)


def apply_staged_adds(state: EngineState, tenant: str) -> None:
    """Index what this thread's batch has staged so far (see `record_many`)."""
    staged: list[IndexAdd] | None = getattr(state.batching.staged_adds, "adds", None)
    if staged:
        state.indexes.for_tenant(tenant).add_many(staged)
        staged.clear()


def oplog(state: EngineState, tenant: str, op: str, ids: Sequence[int]) -> Op:
    """An op log entry (what the next restore replays into a vector snapshot)."""
    return state.repo.logs.put_oplog(
        state.ids.seq.next(), {"tenant": tenant, "op": op, "ids": list(ids)}
    )


def audit(state: EngineState, tenant: str, change: Change, entry: dict[str, Any]) -> None:
    """Add an audit log entry (retention actions, deletions) to `change`."""
    stamped = {**entry, "time_ms": state.clock()}
    change.ops.append(state.repo.logs.put_audit(tenant, state.ids.seq.next(), stamped))


def new_intent(
    state: EngineState, pattern_id: str, text: str, vector: Vector, now: int
) -> IntentRecord:
    return IntentRecord(
        id=state.ids.intent.next(),
        pattern_id=pattern_id,
        text=text,
        hit_count=1,
        last_seen_ms=now,
        model_id=state.embedder.model_id,
        vector=vector,
    )
