"""A tenant's cross-lingual companion index (docs/ranking.md, Other languages): every intent's
vector in a second, multilingual model's space, kept in memory only (computed from the intent
texts at open and after each capture by the service, which owns the model:
service/_companion.py), and the tenant's index as Suggest ranks from it in that space, by the
same core call (`CompanionView`)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from pml_server import _core
from pml_server.domain.model import FilteredCandidate
from pml_server.domain.vectors import Vector
from pml_server.ranking import CoreSuggestion, FilterSettings, RankingConfig
from pml_server.search.vectors import EXACT_SCAN_MIN, new_index

if TYPE_CHECKING:
    from pml_server.search.tenant import TenantSearchIndex


class CompanionIndex:
    """The companion vectors of one tenant's indexed intents. `texts` is the tenant index's own
    map of indexed intent texts and `write_lock` its writers' lock: activation reads the
    texts, and additions exclude the index's writers, under it."""

    def __init__(
        self,
        kind: str,
        dim: int,
        write_lock: threading.Lock,
        texts: Mapping[int, str],
        insert_threads: int,
    ) -> None:
        self.vectors: _core.HnswIndex = new_index(kind, dim)
        self._write_lock = write_lock
        self._texts = texts
        self._insert_threads = insert_threads
        # Intents indexed whose companion vector is not in yet (once the tenant uses it).
        self._pending: dict[int, str] = {}
        self._lock = threading.Lock()
        # Whether the tenant uses the companion (a request in another language came): only
        # then are its vectors computed (service/_companion.py).
        self.active = False

    def __len__(self) -> int:
        return len(self.vectors)

    def activate(self) -> None:
        """From now on this tenant uses the companion: every intent indexed so far, and every
        one indexed later, waits for its companion vector (nothing is kept for a tenant that
        never asks in another language)."""
        if self.active:
            return
        with self._write_lock, self._lock:
            if not self.active:
                self._pending.update(self._texts)
                self.active = True

    def note(self, intent_id: int, text: str) -> None:
        """An intent just indexed (the caller holds the index's write lock)."""
        if self.active:
            with self._lock:
                self._pending[intent_id] = text

    def missing(self) -> int:
        """How many indexed intents have no companion vector yet."""
        with self._lock:
            return len(self._pending)

    def pending(self) -> list[tuple[int, str]]:
        """(intent id, text) of the indexed intents whose companion vector is missing."""
        with self._lock:
            return list(self._pending.items())

    def add(self, intent_ids: Sequence[int], vectors: npt.NDArray[np.float32]) -> None:
        """The companion vectors of intents `pending` named; those removed since (or added by
        a concurrent caller) are skipped."""
        with self._write_lock, self._lock:
            keep = [
                n
                for n, i in enumerate(intent_ids)
                if i in self._pending and not self.vectors.contains(i)
            ]
            if keep:
                ids = np.array([intent_ids[n] for n in keep], dtype=np.uint64)
                self.vectors.add(
                    ids, vectors[keep].astype(np.float32), threads=self._insert_threads
                )
            for i in intent_ids:
                self._pending.pop(i, None)

    def remove(self, intent_ids: Sequence[int]) -> None:
        """Intents gone from the index (the caller holds the index's write lock)."""
        with self._lock:
            for i in intent_ids:
                self._pending.pop(i, None)
            present = [i for i in intent_ids if self.vectors.contains(i)]
            if present:
                self.vectors.remove(np.array(present, dtype=np.uint64))


class CompanionView:
    """A tenant's index with the vector searches in the companion's space: the same patterns,
    intents, lexical documents and ranking table, other cosines (docs/ranking.md, Other
    languages). Ranked by the same core call as the index itself (`rank`, `explain`); the
    retrieval methods serve the tests' oracle (`testing/ranking_oracle/path.py`)."""

    def __init__(
        self,
        index: TenantSearchIndex,
        companion: _core.HnswIndex,
        read_lock: AbstractContextManager[object],
    ) -> None:
        self._index = index
        self._companion = companion
        self._read_lock = read_lock
        self.lexical = index.lexical
        self.ranks = index.ranks

    def semantic(self, query: Vector, limit: int) -> list[tuple[int, float]]:
        size = len(self._companion)
        if size == 0 or limit <= 0:
            return []
        with self._read_lock:
            ids, scores = self._companion.search(query.astype(np.float32), min(limit, size))
        return [(int(i), float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]

    def semantic_among(
        self, query: Vector, limit: int, intent_ids: Sequence[int]
    ) -> list[tuple[int, float]]:
        if limit <= 0 or not intent_ids or len(self._companion) == 0:
            return []
        allow = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
        with self._read_lock:
            ids, scores = self._companion.search(query.astype(np.float32), limit, allow=allow)
        return [(int(i), float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]

    def exact_scores(self, query: Vector, intent_ids: Sequence[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        wanted = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
        for first in range(0, len(wanted), EXACT_SCAN_MIN):
            chunk = wanted[first : first + EXACT_SCAN_MIN]
            with self._read_lock:
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
