"""One tenant's in-memory search state: the vector index over intent vectors, the lexical index
(one document per pattern: all its intent texts + its tool names, docs/ranking.md), and the
intent id <-> pattern id maps, and the ranking table Suggest ranks from in the core
(`ranking.table`: each pattern's counters, capability, tools, tags and marks, and its intents).
Derived from the store (rebuilt or restored from a snapshot at open), updated by every capture
and deletion (the table also by every counters, marks or grouping change:
`service._writes.commit`).

Its parts: the cross-lingual companion (`search.companion`), and the staged intents, the
insert queue and the snapshot marks (`search._index_parts`), and the lexical documents
(`_LexicalDocuments`, below)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager

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
    RankRequest,
    RankTable,
)
from pml_server.search._index_parts import InsertQueue, SaveMarks, StagedIntents
from pml_server.search.companion import CompanionIndex, CompanionView, MixedView
from pml_server.search.vectors import EXACT_SCAN_MIN, index_from_bytes, new_index

# Threads inserting a batch of new vectors (the graph is the same whatever the number, see
# pml_core_rs/src/index/batch_insert.rs). One: on the two cores this is tuned for, the load
# client, gRPC and the other streams' captures want the second core, and two threads cost
# more CPU per vector (0.39 against 0.28 ms at 4,000 vectors of 384-d; StreamTraces with
# client vectors, 8 streams: 1.50 against 1.85 to 1.91 ms of server CPU per capture).
INSERT_THREADS = 1


class TenantSearchIndex:
    def __init__(
        self, kind: str, dim: int, ann: _core.HnswIndex | None = None, companion_dim: int = 0
    ) -> None:
        self.kind = kind
        self.dim = dim
        self.ann = ann if ann is not None else new_index(kind, dim)
        self.lexical = LexicalIndex()
        # The intent id <-> pattern id links live in the ranking table (in Rust: Python dicts
        # of them had cost several hundred bytes an intent).
        self.ranks = RankTable()
        # Writers are serialized here (contains + add of one intent stays atomic). Readers do
        # not take it: the Rust HNSW index has its own reader/writer lock and searches in
        # parallel with the GIL released.
        self._write_lock = threading.Lock()
        self._read_lock: AbstractContextManager[object] = contextlib.nullcontext()
        self._documents = _LexicalDocuments(self.lexical, self.ranks)
        # The cross-lingual companion (search/companion.py), if the service has the model.
        self.companion: CompanionIndex | None = (
            CompanionIndex(
                kind, companion_dim, self._write_lock, self._documents.texts, INSERT_THREADS
            )
            if companion_dim > 0
            else None
        )
        self.saves = SaveMarks()
        self.staged = StagedIntents()
        self._inserts = InsertQueue(self._write_lock)

    def add(self, intent: IntentRecord, tools: Sequence[str]) -> None:
        with self._write_lock:
            if not self.ann.contains(intent.id):
                ids = np.array([intent.id], dtype=np.uint64)
                self.ann.add(ids, intent.vector.reshape(1, -1).astype(np.float32))
                self.saves.changed()
            self._documents.add(intent, tools, self.companion)

    def add_many(
        self, adds: Sequence[tuple[IntentRecord, Sequence[str]]], threads: int = INSERT_THREADS
    ) -> None:
        """`add` for each, in order, with one vector index call for all the new vectors: the
        Rust index runs the batch's searches on `threads` threads, GIL released (a bulk load
        with the machine to itself may take both cores). Concurrent callers' batches are
        inserted together (`InsertQueue`)."""
        self._inserts.insert(adds, lambda group: self._add_many_locked(group, threads))

    def _add_many_locked(
        self, adds: Sequence[tuple[IntentRecord, Sequence[str]]], threads: int
    ) -> None:
        fresh = {i.id: i for i, _ in adds if not self.ann.contains(i.id)}
        if fresh:
            ids = np.fromiter(fresh, dtype=np.uint64, count=len(fresh))
            rows = np.stack([i.vector for i in fresh.values()]).astype(np.float32)
            self.ann.add(ids, rows, threads=threads)
            self.saves.changed()
        for intent, tools in adds:
            self._documents.add(intent, tools, self.companion)
        self.staged.settle(adds)  # indexed and linked to its pattern by now

    def closest_candidates(
        self, pattern_ids: Sequence[str], query: Vector, threshold: float
    ) -> list[tuple[str, int]] | None:
        """(pattern id, intent id), in the order given then by id, of the intents of the
        patterns among which lies the one closest to `query` by exact cosine, whenever that
        one is within `threshold`: the vector index scores every indexed intent (within
        `HNSW_SCORE_ERROR` of the exact cosine), the staged ones are scored exactly, and only
        those whose exact cosine could still be both the best and within the threshold are
        named. Every committed intent of a pattern is indexed or staged."""
        pattern_of, ids, scores = _scored(self, pattern_ids, query)
        if len(ids) == 0:
            return []
        error = _core.HNSW_SCORE_ERROR
        # The closest's exact cosine c is within `threshold` and at least the best score less
        # the error; its own score is at most the error below c.
        floor = max(threshold, float(scores.max()) - error) - error
        order = {p: n for n, p in enumerate(pattern_ids)}
        near = {(pattern_of[i], i) for i in ids[scores >= floor].tolist()}
        return sorted(near, key=lambda named: (order[named[0]], named[1]))

    def remove(self, intent_ids: Sequence[int]) -> None:
        """The intents leave the index. Their tombstones stay until `compact_if_worn`, which
        the caller runs once its locks are released (`compact_worn`)."""
        with self._write_lock:
            if intent_ids:
                self.ann.remove(np.array(list(intent_ids), dtype=np.uint64), compact=False)
                self.saves.changed()
                if self.companion is not None:
                    self.companion.remove(intent_ids)
            self._documents.remove(intent_ids)

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
        ids, scores = _exact_arrays(self.ann, self._read_lock, query, intent_ids)
        return dict(zip(ids.tolist(), scores.tolist(), strict=True))

    def pattern_of(self, intent_id: int) -> str | None:
        """The pattern an indexed intent stands for."""
        return self.ranks.pattern_of(intent_id)

    def intents_of(self, pattern_id: str) -> list[int]:
        """The indexed intents of a pattern (empty if none)."""
        return self.ranks.intents_of(pattern_id)

    def rank(self, request: RankRequest) -> list[CoreSuggestion]:
        """The top `k` for the request ranked in the core (`RankTable.rank`)."""
        return self.ranks.rank(self.ann, self.lexical, request)

    def explain(self, request: RankRequest) -> tuple[list[CoreSuggestion], list[FilteredCandidate]]:
        """`rank` and every other candidate with its rule (`RankTable.explain`)."""
        return self.ranks.explain(self.ann, self.lexical, request)

    def renumber_lexical(self, pattern_ids: list[str]) -> None:
        """Number the lexical documents of `pattern_ids` first, in that order (a rebuilt index:
        its patterns' capture order, as a live index numbers them); answers do not change."""
        with self._write_lock:
            self.lexical.renumber(pattern_ids)

    def lexical_hits(self, text: str, limit: int) -> list[tuple[str, float]]:
        """(pattern id, raw BM25 score of its document), best first."""
        return self.lexical.search(text, limit)

    def cross_lingual(self, companion_query: Vector | None = None) -> CompanionView | MixedView:
        """This index searched in the companion's space (`companion` must be set); with
        `companion_query` (an English request embedded by the companion), its English intents
        in the primary space and the others in the companion's (`MixedView`)."""
        assert self.companion is not None
        view = CompanionView(self, self.companion.vectors, self._read_lock)
        if companion_query is None:
            return view
        return MixedView(self, view, self.companion.foreign(), companion_query)

    def remove_vectors(self, intent_ids: Sequence[int]) -> None:
        """Take vectors out of the vector index alone (replaying the op log's removals into a
        restored snapshot, before the intents are indexed)."""
        with self._write_lock:
            present = [i for i in intent_ids if self.ann.contains(i)]
            if present:
                self.ann.remove(np.array(present, dtype=np.uint64))
                self.saves.changed()
            if self.companion is not None:
                self.companion.remove(intent_ids)

    def snapshot(self) -> tuple[bytes, int]:
        """The vector index's bytes and the change count they hold (for `saves.mark_saved`)."""
        # Read before the bytes, and counted after each change is made: the bytes hold at
        # least `changes` changes (a later one only leaves the index marked unsaved), and
        # captures never wait for the copy.
        changes = self.saves.changes
        with self._read_lock:
            return self.ann.to_bytes(), changes

    def vector_count(self) -> int:
        with self._read_lock:
            return len(self.ann)


def restore_index(kind: str, dim: int, data: bytes, companion_dim: int = 0) -> TenantSearchIndex:
    """A tenant's index from its vector index snapshot (`TenantSearchIndex.snapshot`); the
    caller indexes the intents' documents."""
    index = TenantSearchIndex(kind, dim, index_from_bytes(kind, dim, data), companion_dim)
    index.saves = SaveMarks(saved=0)  # the stored snapshot is exactly this state
    return index


class _LexicalDocuments:
    """The lexical index's documents, one per pattern (its tools' names and every intent
    text), and what each intent put into its pattern's document, to take it out again on
    removal (tool names count once per pattern, not once per intent, and go with it). Links
    each intent to its pattern in the ranking table. Called with the index's write lock held."""

    def __init__(self, lexical: LexicalIndex, ranks: RankTable) -> None:
        self._lexical = lexical
        self._ranks = ranks
        self.texts: dict[int, str] = {}

    def add(
        self, intent: IntentRecord, tools: Sequence[str], companion: CompanionIndex | None
    ) -> None:
        """Index the intent's text, and note it for the `companion`'s vectors (nothing when it
        is indexed already: replayed, an intent never changes pattern)."""
        if intent.id in self.texts:
            return
        pattern_id = intent.pattern_id
        words = intent.text
        if not self._ranks.intents_of(pattern_id):
            # One update of the document: words separated by a space tokenize apart, so this
            # indexes exactly the terms of the two texts added one after the other.
            words = f"{' '.join(tools)} {intent.text}"
        self._lexical.add_terms(pattern_id, words)
        self.texts[intent.id] = intent.text
        self._ranks.link_intent(intent.id, pattern_id)
        if companion is not None:
            companion.note(intent.id, intent.text)

    def remove(self, intent_ids: Sequence[int]) -> None:
        for intent_id in intent_ids:
            pattern_id = self._ranks.pattern_of(intent_id)
            text = self.texts.pop(intent_id, None)
            if pattern_id is None or text is None:
                continue
            self._lexical.remove_terms(pattern_id, text)
            self._ranks.unlink_intents([intent_id])
            if not self._ranks.intents_of(pattern_id):
                self._lexical.remove(pattern_id)


def compact_worn(index: TenantSearchIndex) -> bool:
    """Compact `index`'s vector indexes that tombstones wear, each on a copy: no lock of the
    index is held meanwhile, so searches and writes go on (docs/ranking.md, Retention). Run
    after `TenantSearchIndex.remove`, once the caller's locks are released; returns whether
    one was compacted."""
    compacted = index.ann.compact_if_worn()
    if index.companion is not None:
        compacted = index.companion.vectors.compact_if_worn() or compacted
    return compacted


def best_score(index: TenantSearchIndex, pattern_ids: Sequence[str], query: Vector) -> float | None:
    """The best score of `query` among the intents of `pattern_ids` (None: they have none),
    within `HNSW_SCORE_ERROR` of the best exact cosine: the index's scores for indexed
    intents, exact ones for staged intents. Reads nothing from the store."""
    _, _, scores = _scored(index, pattern_ids, query)
    return float(scores.max()) if len(scores) else None


def _scored(
    index: TenantSearchIndex, pattern_ids: Sequence[str], query: Vector
) -> tuple[dict[int, str], npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
    """Each intent of `pattern_ids` with its pattern, and the ids and scores of those scored
    (`TenantSearchIndex.closest_candidates`)."""
    # Staged ones first: `_add_many_locked` links an intent to its pattern before it settles
    # it, so one read or the other finds it.
    staged = index.staged.among(pattern_ids)
    pattern_of = {i: p for p in pattern_ids for i in index.intents_of(p)}
    ids, scores = _exact_arrays(index.ann, index._read_lock, query, list(pattern_of))
    if staged:
        ids = np.concatenate([ids, np.fromiter(staged, dtype=np.uint64, count=len(staged))])
        exact = [float(vector @ query) for _, vector in staged.values()]
        scores = np.concatenate([scores, np.array(exact, dtype=np.float32)])
    for intent_id, (pattern_id, _) in staged.items():
        pattern_of.setdefault(intent_id, pattern_id)
    return pattern_of, ids, scores


def _exact_arrays(
    ann: _core.HnswIndex,
    read_lock: AbstractContextManager[object],
    query: Vector,
    intent_ids: Sequence[int],
) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.float32]]:
    """`exact_scores` as two arrays, ids and scores (none for an id no longer indexed)."""
    wanted = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
    query32 = query.astype(np.float32)
    id_parts, score_parts = [np.zeros(0, np.uint64)], [np.zeros(0, np.float32)]
    for first in range(0, len(wanted), EXACT_SCAN_MIN):
        chunk = wanted[first : first + EXACT_SCAN_MIN]
        with read_lock:
            found, scores = ann.search(query32, len(chunk), allow=chunk)
        id_parts.append(found.astype(np.uint64))
        score_parts.append(scores.astype(np.float32))
    return np.concatenate(id_parts), np.concatenate(score_parts)
