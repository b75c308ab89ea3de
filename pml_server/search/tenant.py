"""One tenant's in-memory search state: the vector index over intent vectors, the lexical index
(one document per pattern: all its intent texts + its tool names, docs/ranking.md), and the
intent id <-> pattern id maps, and the ranking table Suggest ranks from in the core
(`ranking.table`: each pattern's counters, capability, tools, tags and marks, and its intents).
Derived from the store (rebuilt or restored from a snapshot at open), updated by every capture
and deletion (the table also by every counters, marks or grouping change:
`service._writes.commit`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pml_server import _core
from pml_server.domain.model import FilteredCandidate
from pml_server.domain.records import IntentRecord
from pml_server.domain.vectors import Vector
from pml_server.ranking import (
    CoreSuggestion,
    FilterSettings,
    LexicalIndex,
    RankingConfig,
    RankTable,
)
from pml_server.search.vectors import EXACT_SCAN_MIN, index_from_bytes, new_index

# Threads inserting a batch of new vectors (the graph is the same whatever the number, see
# pml_core_rs/src/index/batch_insert.rs). One: on the two cores this is tuned for, the load
# client, gRPC and the other streams' captures want the second core, and two threads cost
# more CPU per vector (0.39 against 0.28 ms at 4,000 vectors of 384-d; StreamTraces with
# client vectors, 8 streams: 1.50 against 1.85 to 1.91 ms of server CPU per capture).
INSERT_THREADS = 1


@dataclass
class _PendingAdds:
    """One caller's batch of `add_many`, waiting for the tenant's writer."""

    adds: Sequence[tuple[IntentRecord, Sequence[str]]]
    done: bool = False
    error: BaseException | None = None


class TenantSearchIndex:
    def __init__(
        self, kind: str, dim: int, ann: _core.HnswIndex | None = None, companion_dim: int = 0
    ) -> None:
        self.kind = kind
        self.dim = dim
        self.ann = ann if ann is not None else new_index(kind, dim)
        # The cross-lingual companion (docs/ranking.md, Other languages): every intent's vector
        # in a second, multilingual model's space, kept in memory only (computed from the
        # intent texts at open and after each capture by the service, which owns the model).
        # `_companion_pending`: intents indexed here whose companion vector is not in yet
        # (once the tenant uses the companion).
        self.companion: _core.HnswIndex | None = (
            new_index(kind, companion_dim) if companion_dim > 0 else None
        )
        self._companion_pending: dict[int, str] = {}
        self._companion_lock = threading.Lock()
        # Whether the tenant uses the companion (a request in another language came): only
        # then are its vectors computed (service/_companion.py).
        self.companion_active = False
        # Vector additions and removals so far, and how many of them the stored snapshot holds
        # (None: no snapshot of this index yet), so an unchanged index is not written again:
        # a snapshot of the 100k bench store is 156 MiB.
        self._vector_changes = 0
        self._saved_changes: int | None = None
        self.lexical = LexicalIndex()
        # The intent id <-> pattern id links live in the ranking table (in Rust: Python dicts
        # of them had cost several hundred bytes an intent).
        self.ranks = RankTable()
        # What each intent put into its pattern's lexical document, to take it out again on
        # removal (tool names count once per pattern, not once per intent, and go with it).
        self._lexical_text: dict[int, str] = {}
        # Writers are serialized here (contains + add of one intent stays atomic). Readers do
        # not take it: the Rust HNSW index has its own reader/writer lock and searches in
        # parallel with the GIL released.
        self._write_lock = threading.Lock()
        # Batches waiting for `_write_lock` in `add_many` (inserted together by whoever gets it).
        self._pending_lock = threading.Lock()
        self._pending: list[_PendingAdds] = []
        self._read_lock: AbstractContextManager[object] = contextlib.nullcontext()
        # Intents a batch has committed whose insert comes at the end of the batch (`stage`,
        # then `add_many`), by pattern, with their vectors: `closest_candidates` must see them
        # although the vector index does not have them yet.
        self._unindexed: dict[str, dict[int, Vector]] = {}
        self._unindexed_lock = threading.Lock()

    @classmethod
    def restore(cls, kind: str, dim: int, data: bytes, companion_dim: int = 0) -> TenantSearchIndex:
        index = cls(kind, dim, index_from_bytes(kind, dim, data), companion_dim)
        index._saved_changes = 0  # the stored snapshot is exactly this state
        return index

    def add(self, intent: IntentRecord, tools: Sequence[str]) -> None:
        with self._write_lock:
            if not self.ann.contains(intent.id):
                ids = np.array([intent.id], dtype=np.uint64)
                self.ann.add(ids, intent.vector.reshape(1, -1).astype(np.float32))
                self._vector_changes += 1
            self._add_lexical_locked(intent, tools)

    def add_many(
        self, adds: Sequence[tuple[IntentRecord, Sequence[str]]], threads: int = INSERT_THREADS
    ) -> None:
        """`add` for each, in order, with one vector index call for all the new vectors: the
        Rust index runs the batch's searches on `threads` threads, GIL released (a bulk load
        with the machine to itself may take both cores).

        Group insertion: the batches of concurrent callers (one per stream) wait here for the
        tenant's one writer; whoever gets the lock inserts every batch waiting by then in one
        call, and the others find theirs done. One lock hand-off (and its wait for the GIL)
        per group rather than per batch: the insertion is serial per tenant, so every
        hand-off lengthened it."""
        mine = _PendingAdds(adds)
        with self._pending_lock:
            self._pending.append(mine)
        with self._write_lock:
            if mine.done:
                if mine.error is not None:
                    raise mine.error
                return
            with self._pending_lock:
                group, self._pending = self._pending, []
            try:
                self._add_many_locked([add for pending in group for add in pending.adds], threads)
            except BaseException as error:
                for pending in group:
                    pending.error = error
                raise
            finally:
                for pending in group:
                    pending.done = True

    def _add_many_locked(
        self, adds: Sequence[tuple[IntentRecord, Sequence[str]]], threads: int
    ) -> None:
        fresh = {i.id: i for i, _ in adds if not self.ann.contains(i.id)}
        if fresh:
            ids = np.fromiter(fresh, dtype=np.uint64, count=len(fresh))
            rows = np.stack([i.vector for i in fresh.values()]).astype(np.float32)
            self.ann.add(ids, rows, threads=threads)
            self._vector_changes += 1
        for intent, tools in adds:
            self._add_lexical_locked(intent, tools)
        with self._unindexed_lock:  # indexed and linked to its pattern by now
            for intent, _ in adds:
                staged = self._unindexed.get(intent.pattern_id)
                if staged is not None:
                    staged.pop(intent.id, None)
                    if not staged:
                        del self._unindexed[intent.pattern_id]

    def stage(self, adds: Sequence[tuple[IntentRecord, Sequence[str]]]) -> None:
        """Note intents committed now and inserted later by `add_many` (a batch's)."""
        with self._unindexed_lock:
            for intent, _ in adds:
                self._unindexed.setdefault(intent.pattern_id, {})[intent.id] = intent.vector

    def closest_candidates(
        self, pattern_ids: Sequence[str], query: Vector, threshold: float
    ) -> list[tuple[str, int]] | None:
        """(pattern id, intent id), in the order given then by id, of the intents of the
        patterns among which lies the one closest to `query` by exact cosine, whenever that
        one is within `threshold`: the vector index scores every indexed intent (within
        `HNSW_SCORE_ERROR` of the exact cosine), the staged ones are scored exactly, and only
        those whose exact cosine could still be both the best and within the threshold are
        named. Every committed intent of a pattern is indexed or staged."""
        # Staged ones first: `_add_many_locked` links an intent to its pattern before it
        # unstages it, so one read or the other finds it.
        with self._unindexed_lock:
            staged = {
                intent_id: (pattern_id, vector)
                for pattern_id in pattern_ids
                for intent_id, vector in self._unindexed.get(pattern_id, {}).items()
            }
        pattern_of = {i: p for p in pattern_ids for i in self.intents_of(p)}
        ids, scores = self._exact_arrays(query, list(pattern_of))
        if staged:
            ids = np.concatenate([ids, np.fromiter(staged, dtype=np.uint64, count=len(staged))])
            exact = [float(vector @ query) for _, vector in staged.values()]
            scores = np.concatenate([scores, np.array(exact, dtype=np.float32)])
        if len(ids) == 0:
            return []
        error = _core.HNSW_SCORE_ERROR
        # The closest's exact cosine c is within `threshold` and at least the best score less
        # the error; its own score is at most the error below c.
        floor = max(threshold, float(scores.max()) - error) - error
        for intent_id, (pattern_id, _) in staged.items():
            pattern_of.setdefault(intent_id, pattern_id)
        order = {p: n for n, p in enumerate(pattern_ids)}
        near = {(pattern_of[i], i) for i in ids[scores >= floor].tolist()}
        return sorted(near, key=lambda named: (order[named[0]], named[1]))

    def _exact_arrays(
        self, query: Vector, intent_ids: Sequence[int]
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
        """`exact_scores` as two arrays, ids and scores (none for an id no longer indexed)."""
        wanted = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
        query32 = query.astype(np.float32)
        id_parts, score_parts = [np.zeros(0, np.uint64)], [np.zeros(0, np.float32)]
        for first in range(0, len(wanted), EXACT_SCAN_MIN):
            chunk = wanted[first : first + EXACT_SCAN_MIN]
            with self._read_lock:
                found, scores = self.ann.search(query32, len(chunk), allow=chunk)
            id_parts.append(found.astype(np.uint64))
            score_parts.append(scores.astype(np.float32))
        return np.concatenate(id_parts), np.concatenate(score_parts)

    def _add_lexical_locked(self, intent: IntentRecord, tools: Sequence[str]) -> None:
        if intent.id in self._lexical_text:
            return  # replayed: already indexed (an intent never changes pattern)
        pattern_id = intent.pattern_id
        words = intent.text
        if not self.ranks.intents_of(pattern_id):
            # One update of the document: words separated by a space tokenize apart, so this
            # indexes exactly the terms of the two texts added one after the other.
            words = f"{' '.join(tools)} {intent.text}"
        self.lexical.add_terms(pattern_id, words)
        self._lexical_text[intent.id] = intent.text
        self.ranks.link_intent(intent.id, pattern_id)
        if self.companion_active:
            with self._companion_lock:
                self._companion_pending[intent.id] = intent.text

    def remove(self, intent_ids: Sequence[int]) -> None:
        with self._write_lock:
            if intent_ids:
                self.ann.remove(np.array(list(intent_ids), dtype=np.uint64))
                self._vector_changes += 1
                self._remove_companion(intent_ids)
            for intent_id in intent_ids:
                pattern_id = self.ranks.pattern_of(intent_id)
                text = self._lexical_text.pop(intent_id, None)
                if pattern_id is None or text is None:
                    continue
                self.lexical.remove_terms(pattern_id, text)
                self.ranks.unlink_intents([intent_id])
                if not self.ranks.intents_of(pattern_id):
                    self.lexical.remove(pattern_id)

    def semantic(self, query: Vector, limit: int) -> list[tuple[int, float]]:
        with self._read_lock:
            size = len(self.ann)
            if size == 0:
                return []
            ids, scores = self.ann.search(query.astype(np.float32), min(limit, size))
        return [(int(i), float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]

    def semantic_among(
        self, query: Vector, limit: int, intent_ids: Sequence[int]
    ) -> list[tuple[int, float]]:
        """`semantic` among the listed intents alone (an allow-list: scanned exactly when at
        most `EXACT_SCAN_MIN` of them, docs/ranking.md, Context filters)."""
        if limit <= 0 or not intent_ids:
            return []
        allow = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
        with self._read_lock:
            if len(self.ann) == 0:
                return []
            ids, scores = self.ann.search(query.astype(np.float32), limit, allow=allow)
        return [(int(i), float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]

    def permitted(
        self, settings: FilterSettings, config: RankingConfig
    ) -> tuple[list[str], list[int]] | None:
        """The patterns the request's context filters permit, with their intents
        (`RankTable.permitted`); None: retrieval is not restricted."""
        return self.ranks.permitted(settings, config)

    def exact_scores(self, query: Vector, intent_ids: Sequence[int]) -> dict[int, float]:
        """The exact cosine of `query` to each listed intent still indexed, in one index call
        per chunk: an allow-list no larger than the index's exact-scan size is scanned exactly,
        not walked approximately."""
        ids, scores = self._exact_arrays(query, intent_ids)
        return dict(zip(ids.tolist(), scores.tolist(), strict=True))

    def pattern_of(self, intent_id: int) -> str | None:
        """The pattern an indexed intent stands for."""
        return self.ranks.pattern_of(intent_id)

    def intents_of(self, pattern_id: str) -> list[int]:
        """The indexed intents of a pattern (empty if none)."""
        return self.ranks.intents_of(pattern_id)

    def rank(
        self,
        vector: Vector,
        text: str,
        limit: int,
        k: int,
        settings: FilterSettings,
        config: RankingConfig,
        now_ms: int,
        transitions: Mapping[str, float] | None = None,
    ) -> list[CoreSuggestion]:
        """The top `k` for the query ranked in the core (`RankTable.rank`)."""
        return self.ranks.rank(
            self.ann, self.lexical, vector, text, limit, k, settings, config, now_ms, transitions
        )

    def explain(
        self,
        vector: Vector,
        text: str,
        limit: int,
        k: int,
        settings: FilterSettings,
        config: RankingConfig,
        now_ms: int,
        transitions: Mapping[str, float] | None = None,
    ) -> tuple[list[CoreSuggestion], list[FilteredCandidate]]:
        """`rank` and every other candidate with its rule (`RankTable.explain`)."""
        return self.ranks.explain(
            self.ann, self.lexical, vector, text, limit, k, settings, config, now_ms, transitions
        )

    def renumber_lexical(self, pattern_ids: list[str]) -> None:
        """Number the lexical documents of `pattern_ids` first, in that order (a rebuilt index:
        its patterns' capture order, as a live index numbers them); answers do not change."""
        with self._write_lock:
            self.lexical.renumber(pattern_ids)

    def lexical_hits(self, text: str, limit: int) -> list[tuple[str, float]]:
        """(pattern id, raw BM25 score of its document), best first."""
        return self.lexical.search(text, limit)

    # ---- the cross-lingual companion (docs/ranking.md, Other languages) ----------------------

    def activate_companion(self) -> None:
        """From now on this tenant uses the companion: every intent indexed so far, and every
        one indexed later, waits for its companion vector (nothing is kept for a tenant that
        never asks in another language)."""
        if self.companion is None or self.companion_active:
            return
        with self._write_lock, self._companion_lock:
            if not self.companion_active:
                self._companion_pending.update(self._lexical_text)
                self.companion_active = True

    def companion_missing(self) -> int:
        """How many indexed intents have no companion vector yet."""
        with self._companion_lock:
            return len(self._companion_pending)

    def companion_pending(self) -> list[tuple[int, str]]:
        """(intent id, text) of the indexed intents whose companion vector is missing."""
        with self._companion_lock:
            return list(self._companion_pending.items())

    def add_companion(self, intent_ids: Sequence[int], vectors: npt.NDArray[np.float32]) -> None:
        """The companion vectors of intents `companion_pending` named; those removed since
        (or added by a concurrent caller) are skipped."""
        companion = self.companion
        if companion is None:
            return
        with self._write_lock, self._companion_lock:
            keep = [
                n
                for n, i in enumerate(intent_ids)
                if i in self._companion_pending and not companion.contains(i)
            ]
            if keep:
                ids = np.array([intent_ids[n] for n in keep], dtype=np.uint64)
                companion.add(ids, vectors[keep].astype(np.float32), threads=INSERT_THREADS)
            for i in intent_ids:
                self._companion_pending.pop(i, None)

    def _remove_companion(self, intent_ids: Sequence[int]) -> None:
        companion = self.companion
        if companion is None:
            return
        with self._companion_lock:
            for i in intent_ids:
                self._companion_pending.pop(i, None)
            present = [i for i in intent_ids if companion.contains(i)]
            if present:
                companion.remove(np.array(present, dtype=np.uint64))

    @property
    def read_lock(self) -> AbstractContextManager[object]:
        """What a reader of the vector indexes holds: nothing (the core's index locks itself)."""
        return self._read_lock

    def cross_lingual(self) -> CompanionView:
        """This index searched in the companion's space (`companion` must be set)."""
        assert self.companion is not None
        return CompanionView(self, self.companion)

    def remove_vectors(self, intent_ids: Sequence[int]) -> None:
        """Take vectors out of the vector index alone (replaying the op log's removals into a
        restored snapshot, before the intents are indexed)."""
        with self._write_lock:
            present = [i for i in intent_ids if self.ann.contains(i)]
            if present:
                self.ann.remove(np.array(present, dtype=np.uint64))
                self._vector_changes += 1
            self._remove_companion(intent_ids)

    def snapshot(self) -> tuple[bytes, int]:
        """The vector index's bytes and the change count they hold (for `mark_saved`)."""
        # Read before the bytes, and counted after each change is made: the bytes hold at
        # least `changes` changes (a later one only leaves the index marked unsaved), and
        # captures never wait for the copy.
        changes = self._vector_changes
        with self._read_lock:
            return self.ann.to_bytes(), changes

    def has_unsaved_changes(self) -> bool:
        return self._saved_changes != self._vector_changes

    def mark_saved(self, changes: int) -> None:
        """A snapshot holding the first `changes` changes is durable in the store."""
        with self._write_lock:
            if self._saved_changes is None or changes > self._saved_changes:
                self._saved_changes = changes

    def vector_count(self) -> int:
        with self._read_lock:
            return len(self.ann)


class CompanionView:
    """A tenant's index with the vector searches in the companion's space: the same patterns,
    intents, lexical documents and ranking table, other cosines (docs/ranking.md, Other
    languages). Ranked by the same core call as the index itself."""

    def __init__(self, index: TenantSearchIndex, companion: _core.HnswIndex) -> None:
        self._index = index
        self._companion = companion
        self.lexical = index.lexical
        self.ranks = index.ranks

    def semantic(self, query: Vector, limit: int) -> list[tuple[int, float]]:
        size = len(self._companion)
        if size == 0 or limit <= 0:
            return []
        with self._index.read_lock:
            ids, scores = self._companion.search(query.astype(np.float32), min(limit, size))
        return [(int(i), float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]

    def semantic_among(
        self, query: Vector, limit: int, intent_ids: Sequence[int]
    ) -> list[tuple[int, float]]:
        if limit <= 0 or not intent_ids or len(self._companion) == 0:
            return []
        allow = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
        with self._index.read_lock:
            ids, scores = self._companion.search(query.astype(np.float32), limit, allow=allow)
        return [(int(i), float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]

    def exact_scores(self, query: Vector, intent_ids: Sequence[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        wanted = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
        for first in range(0, len(wanted), EXACT_SCAN_MIN):
            chunk = wanted[first : first + EXACT_SCAN_MIN]
            with self._index.read_lock:
                ids, scores = self._companion.search(
                    query.astype(np.float32), len(chunk), allow=chunk
                )
            out.update(zip(ids.tolist(), scores.tolist(), strict=True))
        return out

    def pattern_of(self, intent_id: int) -> str | None:
        return self._index.pattern_of(intent_id)

    def intents_of(self, pattern_id: str) -> list[int]:
        return self._index.intents_of(pattern_id)

    def lexical_hits(self, text: str, limit: int) -> list[tuple[str, float]]:
        return self._index.lexical_hits(text, limit)

    def rank(
        self,
        vector: Vector,
        text: str,
        limit: int,
        k: int,
        settings: FilterSettings,
        config: RankingConfig,
        now_ms: int,
        transitions: Mapping[str, float] | None = None,
    ) -> list[CoreSuggestion]:
        """`TenantSearchIndex.rank` in the companion's space."""
        return self.ranks.rank(
            self._companion,
            self.lexical,
            vector,
            text,
            limit,
            k,
            settings,
            config,
            now_ms,
            transitions,
        )

    def explain(
        self,
        vector: Vector,
        text: str,
        limit: int,
        k: int,
        settings: FilterSettings,
        config: RankingConfig,
        now_ms: int,
        transitions: Mapping[str, float] | None = None,
    ) -> tuple[list[CoreSuggestion], list[FilteredCandidate]]:
        """`TenantSearchIndex.explain` in the companion's space."""
        return self.ranks.explain(
            self._companion,
            self.lexical,
            vector,
            text,
            limit,
            k,
            settings,
            config,
            now_ms,
            transitions,
        )
