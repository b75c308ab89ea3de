"""Small parts of a tenant's search index (`search.tenant.TenantSearchIndex`), each with its own
lock: the intents a batch committed but has not inserted yet, the batches waiting for the
tenant's writer, and the change count that says whether a snapshot is due."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pml_server.domain.records import IntentRecord
from pml_server.domain.vectors import Vector

Adds = Sequence[tuple[IntentRecord, Sequence[str]]]


class StagedIntents:
    """Intents a batch has committed whose insert comes at the end of the batch (`add`, then
    the index's `add_many`), by pattern, with their vectors: a search for near duplicates must
    see them although the vector index does not have them yet."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_pattern: dict[str, dict[int, Vector]] = {}

    def add(self, adds: Adds) -> None:
        """Note intents committed now and inserted later by `add_many` (a batch's)."""
        with self._lock:
            for intent, _ in adds:
                self._by_pattern.setdefault(intent.pattern_id, {})[intent.id] = intent.vector

    def settle(self, adds: Adds) -> None:
        """These intents are indexed and linked to their pattern now."""
        with self._lock:
            for intent, _ in adds:
                staged = self._by_pattern.get(intent.pattern_id)
                if staged is not None:
                    staged.pop(intent.id, None)
                    if not staged:
                        del self._by_pattern[intent.pattern_id]

    def among(self, pattern_ids: Sequence[str]) -> dict[int, tuple[str, Vector]]:
        """intent id -> (pattern id, vector) of the staged intents of these patterns."""
        with self._lock:
            return {
                intent_id: (pattern_id, vector)
                for pattern_id in pattern_ids
                for intent_id, vector in self._by_pattern.get(pattern_id, {}).items()
            }


@dataclass
class _PendingAdds:
    """One caller's batch of `add_many`, waiting for the tenant's writer."""

    adds: Adds
    done: bool = False
    error: BaseException | None = None


class InsertQueue:
    """Group insertion: the batches of concurrent callers (one per stream) wait for the
    tenant's one writer (`write_lock`); whoever gets the lock inserts every batch waiting by
    then in one call, and the others find theirs done. One lock hand-off (and its wait for the
    GIL) per group rather than per batch: the insertion is serial per tenant, so every
    hand-off lengthened it."""

    def __init__(self, write_lock: threading.Lock) -> None:
        self._write_lock = write_lock
        self._lock = threading.Lock()
        self._pending: list[_PendingAdds] = []

    def insert(self, adds: Adds, insert_locked: Callable[[Adds], None]) -> None:
        """`insert_locked` (called with the write lock held) of `adds`, alone or with other
        callers' batches; raises what inserting them raised."""
        mine = _PendingAdds(adds)
        with self._lock:
            self._pending.append(mine)
        with self._write_lock:
            if mine.done:
                if mine.error is not None:
                    raise mine.error
                return
            with self._lock:
                group, self._pending = self._pending, []
            try:
                insert_locked([add for pending in group for add in pending.adds])
            except BaseException as error:
                for pending in group:
                    pending.error = error
                raise
            finally:
                for pending in group:
                    pending.done = True


class SaveMarks:
    """Vector additions and removals so far, and how many of them the stored snapshot holds
    (None: no snapshot of this index yet), so an unchanged index is not written again: a
    snapshot of the 100k bench store is 156 MiB."""

    def __init__(self, saved: int | None = None) -> None:
        self._lock = threading.Lock()
        self.changes = 0
        self._saved = saved

    def changed(self) -> None:
        """One more change (the caller holds the index's write lock)."""
        self.changes += 1

    def unsaved(self) -> bool:
        return self._saved != self.changes

    def mark_saved(self, changes: int) -> None:
        """A snapshot holding the first `changes` changes is durable in the store."""
        with self._lock:
            if self._saved is None or changes > self._saved:
                self._saved = changes
