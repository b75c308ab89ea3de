"""A tenant's cross-lingual companion index (docs/ranking.md, Other languages): every intent's
vector in a second, multilingual model's space, kept in memory only (computed from the intent
texts at open and after each capture by the service, which owns the model:
service/_companion.py), and the tenant's index as Suggest ranks from it in that space
(`CompanionView`), or for an English request over intents in other languages, each intent
in the space that reads it (`MixedView`), by the same core call as the index itself."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import numpy as np
import numpy.typing as npt

from pml_server import _core
from pml_server.domain.model import FilteredCandidate
from pml_server.domain.vectors import Vector
from pml_server.embedding.language import is_english
from pml_server.ranking import CoreSuggestion, Foreign, LexicalIndex, RankRequest, RankTable
from pml_server.search.vectors import EXACT_SCAN_MIN, new_index


class PrimaryIndex(Protocol):
    """What a view reads of the tenant's own index (`search.tenant.TenantSearchIndex`): its
    vectors in the primary model's space, lexical documents and ranking table."""

    ann: _core.HnswIndex
    lexical: LexicalIndex
    ranks: RankTable

    def semantic(self, query: Vector, limit: int) -> list[tuple[int, float]]: ...

    def semantic_among(
        self, query: Vector, limit: int, intent_ids: Sequence[int]
    ) -> list[tuple[int, float]]: ...

    def exact_scores(self, query: Vector, intent_ids: Sequence[int]) -> dict[int, float]: ...

    def pattern_of(self, intent_id: int) -> str | None: ...

    def intents_of(self, pattern_id: str) -> list[int]: ...

    def lexical_hits(self, text: str, limit: int) -> list[tuple[str, float]]: ...

    def vector_count(self) -> int: ...


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
        # Whether the tenant uses the companion (a request in another language came, or an
        # intent in another language was recorded): only then are its vectors computed
        # (service/_companion.py).
        self.active = False
        # The indexed intents whose text is not English (`embedding.language.is_english`): an
        # English request compares them in this space (docs/ranking.md, Other languages: the
        # reverse direction).
        self._foreign: set[int] = set()

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
        """An intent just indexed (the caller holds the index's write lock). One that is not
        English makes the tenant use the companion."""
        foreign = not is_english(text)
        if foreign or self.active:
            with self._lock:
                if foreign:
                    self._foreign.add(intent_id)
                    if not self.active:  # every intent so far waits for its vector
                        self._pending.update(self._texts)
                        self.active = True
                self._pending[intent_id] = text

    def foreign(self) -> frozenset[int]:
        """The indexed intents that are not English."""
        with self._lock:
            return frozenset(self._foreign)

    def has_foreign(self) -> bool:
        with self._lock:
            return bool(self._foreign)

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
                self._foreign.discard(i)
            present = [i for i in intent_ids if self.vectors.contains(i)]
            if present:
                # compacted by the caller once its lock is released (`TenantSearchIndex.remove`)
                self.vectors.remove(np.array(present, dtype=np.uint64), compact=False)


class _TenantReads:
    """What a view reads from the tenant's own index whatever space it scores in: a pattern's
    intents, the lexical index (text, not vectors) and the ranking table; and its ranking, by
    the same core call as the index's (`RankTable.rank`) in the view's space (`_ranked_in`)."""

    _index: PrimaryIndex

    def _ranked_in(self) -> tuple[_core.HnswIndex, bool, Foreign | None]:
        """The index the core searches, whether it is the primary one (the tool profiles'
        space), and the intents read in the companion's space besides."""
        raise NotImplementedError

    def rank(self, request: RankRequest) -> list[CoreSuggestion]:
        """`TenantSearchIndex.rank` in this view's space."""
        ann, primary, foreign = self._ranked_in()
        return self._index.ranks.rank(
            ann, self._index.lexical, request, primary=primary, foreign=foreign
        )

    def explain(self, request: RankRequest) -> tuple[list[CoreSuggestion], list[FilteredCandidate]]:
        """`TenantSearchIndex.explain` in this view's space."""
        ann, primary, foreign = self._ranked_in()
        return self._index.ranks.explain(
            ann, self._index.lexical, request, primary=primary, foreign=foreign
        )

    def pattern_of(self, intent_id: int) -> str | None:
        return self._index.pattern_of(intent_id)

    def intents_of(self, pattern_id: str) -> list[int]:
        return self._index.intents_of(pattern_id)

    def lexical_hits(self, text: str, limit: int) -> list[tuple[str, float]]:
        return self._index.lexical_hits(text, limit)


class CompanionView(_TenantReads):
    """A tenant's index with the vector searches in the companion's space: the same patterns,
    intents, lexical documents and ranking table, other cosines (docs/ranking.md, Other
    languages). Ranked by the same core call as the index itself (`rank`, `explain`); the
    retrieval methods serve the tests' oracle (`testing/ranking_oracle/path.py`)."""

    def __init__(
        self,
        index: PrimaryIndex,
        companion: _core.HnswIndex,
        read_lock: AbstractContextManager[object],
    ) -> None:
        self._index = index
        self.vectors = companion
        self._read_lock = read_lock
        self.lexical = index.lexical
        self.ranks = index.ranks

    def semantic(self, query: Vector, limit: int) -> list[tuple[int, float]]:
        size = len(self.vectors)
        if size == 0 or limit <= 0:
            return []
        with self._read_lock:
            ids, scores = self.vectors.search(query.astype(np.float32), min(limit, size))
        return [(int(i), float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]

    def semantic_among(
        self, query: Vector, limit: int, intent_ids: Sequence[int]
    ) -> list[tuple[int, float]]:
        if limit <= 0 or not intent_ids or len(self.vectors) == 0:
            return []
        allow = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
        with self._read_lock:
            ids, scores = self.vectors.search(query.astype(np.float32), limit, allow=allow)
        return [(int(i), float(s)) for i, s in zip(ids.tolist(), scores.tolist(), strict=True)]

    def exact_scores(self, query: Vector, intent_ids: Sequence[int]) -> dict[int, float]:
        out: dict[int, float] = {}
        wanted = np.fromiter(intent_ids, dtype=np.uint64, count=len(intent_ids))
        for first in range(0, len(wanted), EXACT_SCAN_MIN):
            chunk = wanted[first : first + EXACT_SCAN_MIN]
            with self._read_lock:
                ids, scores = self.vectors.search(query.astype(np.float32), len(chunk), allow=chunk)
            out.update(zip(ids.tolist(), scores.tolist(), strict=True))
        return out

    def _ranked_in(self) -> tuple[_core.HnswIndex, bool, Foreign | None]:
        return self.vectors, False, None

    def companion_profiles(self, query: Vector) -> tuple[_core.HnswIndex, Vector]:
        """The index whose vectors the tool profiles a request ranked here reads are means of,
        and its vector in that space (the tests' oracle)."""
        return self.vectors, query


class MixedView(_TenantReads):
    """A tenant's index for an English request when some intents were recorded in another
    language (docs/ranking.md, Other languages: the reverse direction): each intent is
    compared in the space that reads it, its English intents by the primary model (the
    `vector` the methods are given, so English pairs score exactly as without this view), the
    others by the companion (`companion_query`, the same request embedded by the companion
    model). Ranked in the core (`rank`, `explain`); the retrieval methods serve the tests'
    oracle."""

    def __init__(
        self,
        index: PrimaryIndex,
        companion: CompanionView,
        foreign: frozenset[int],
        companion_query: Vector,
    ) -> None:
        self._index = index
        self._companion = companion
        self._foreign = foreign
        self._query = companion_query
        self.lexical = index.lexical
        self.ranks = index.ranks

    def _split(self, intent_ids: Sequence[int]) -> tuple[list[int], list[int]]:
        """(English intents, intents in another language) of `intent_ids`."""
        english: list[int] = []
        foreign: list[int] = []
        for intent_id in intent_ids:
            (foreign if intent_id in self._foreign else english).append(intent_id)
        return english, foreign

    def _merged(
        self, primary: list[tuple[int, float]], other: list[tuple[int, float]], limit: int
    ) -> list[tuple[int, float]]:
        hits = [(i, s) for i, s in primary if i not in self._foreign] + other
        hits.sort(key=lambda hit: -hit[1])
        return hits[:limit]

    def semantic(self, query: Vector, limit: int) -> list[tuple[int, float]]:
        foreign = len(self._foreign)
        if foreign >= self._index.vector_count():  # all in another language: no allow-list
            return self._companion.semantic(self._query, limit)
        # the primary space's hits on foreign intents are dropped: over-fetch by their number
        primary = self._index.semantic(query, limit + min(foreign, limit))
        other = self._companion.semantic_among(self._query, limit, list(self._foreign))
        return self._merged(primary, other, limit)

    def semantic_among(
        self, query: Vector, limit: int, intent_ids: Sequence[int]
    ) -> list[tuple[int, float]]:
        english, foreign = self._split(intent_ids)
        primary = self._index.semantic_among(query, limit, english)
        other = self._companion.semantic_among(self._query, limit, foreign)
        return self._merged(primary, other, limit)

    def exact_scores(self, query: Vector, intent_ids: Sequence[int]) -> dict[int, float]:
        english, foreign = self._split(intent_ids)
        out = self._index.exact_scores(query, english) if english else {}
        if foreign:
            out.update(self._companion.exact_scores(self._query, foreign))
        return out

    def companion_profiles(self, query: Vector) -> tuple[_core.HnswIndex, Vector]:
        """The companion's index and the request's companion vector: the tool profiles are
        read in the space that reads every intent (docs/ranking.md, Other languages)."""
        return self._companion.vectors, self._query

    def _ranked_in(self) -> tuple[_core.HnswIndex, bool, Foreign | None]:
        foreign = Foreign(self._companion.vectors, self._query, sorted(self._foreign))
        return self._index.ann, True, foreign
