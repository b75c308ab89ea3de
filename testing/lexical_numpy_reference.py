"""The numpy BM25 index that `pml_server.ranking.LexicalIndex` used before the Rust index
replaced it, kept verbatim as a test reference (and as the baseline of
`benches/profile/lexical_core.py`)."""

from __future__ import annotations

import heapq
import math
import threading

import numpy as np
from numpy.typing import NDArray

from pml_server.ranking.lexical import tokenize


def _check_id(doc_id: str) -> None:
    if not isinstance(doc_id, str) or not doc_id:
        raise ValueError("doc_id must be a non-empty string")


def _counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for term in tokenize(text):
        counts[term] = counts.get(term, 0) + 1
    return counts


class NumpyLexicalIndex:
    """The former pure-Python/numpy `LexicalIndex`, unchanged: search scores must match it bit
    for bit (same float64 operations in the same order)."""

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        if not k1 >= 0 or not 0.0 <= b <= 1.0:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        self._k1 = k1
        self._b = b
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}
        self._names: list[str] = []  # internal number -> doc id ("" once removed)
        self._lengths: list[int] = []  # internal number -> number of terms
        self._doc_terms: dict[int, dict[str, int]] = {}
        self._postings: dict[str, dict[int, int]] = {}  # term -> {internal number: tf}
        self._total_length = 0
        self._free: list[int] = []
        # Numpy mirrors for `search`, which scores a term's whole posting at once instead of
        # one Python step per document: document lengths (grown by doubling), and per-term
        # (numbers, tfs) arrays built on first use and dropped whenever the term's posting changes.
        self._length_array: NDArray[np.float64] = np.zeros(64)
        self._term_arrays: dict[str, tuple[NDArray[np.intp], NDArray[np.float64]]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)

    def __contains__(self, doc_id: object) -> bool:
        with self._lock:
            return doc_id in self._ids

    def add(self, doc_id: str, text: str) -> None:
        """Index `text` under `doc_id`, replacing what that id held before."""
        _check_id(doc_id)
        counts = _counts(text)
        with self._lock:
            self._remove_locked(doc_id)
            self._insert_locked(doc_id, counts)

    def add_terms(self, doc_id: str, text: str) -> None:
        """Add the words of `text` to the document `doc_id` (created if new)."""
        _check_id(doc_id)
        counts = _counts(text)
        with self._lock:
            old = self._take_locked(doc_id)
            for term, tf in counts.items():
                old[term] = old.get(term, 0) + tf
            self._insert_locked(doc_id, old)

    def remove_terms(self, doc_id: str, text: str) -> None:
        """Take the words of `text` (added before with `add_terms`) out of `doc_id`; the
        document disappears once it holds no term. Unknown ids and words do nothing."""
        counts = _counts(text)
        with self._lock:
            if doc_id not in self._ids:
                return
            old = self._take_locked(doc_id)
            for term, tf in counts.items():
                left = old.get(term, 0) - tf
                if left > 0:
                    old[term] = left
                else:
                    old.pop(term, None)
            if old:
                self._insert_locked(doc_id, old)

    def _take_locked(self, doc_id: str) -> dict[str, int]:
        number = self._ids.get(doc_id)
        counts = dict(self._doc_terms[number]) if number is not None else {}
        self._remove_locked(doc_id)
        return counts

    def _insert_locked(self, doc_id: str, counts: dict[str, int]) -> None:
        number = self._free.pop() if self._free else len(self._names)
        if number == len(self._names):
            self._names.append(doc_id)
            self._lengths.append(0)
        self._names[number] = doc_id
        length = sum(counts.values())
        self._lengths[number] = length
        self._ids[doc_id] = number
        self._doc_terms[number] = counts
        self._total_length += length
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[number] = tf
            self._term_arrays.pop(term, None)
        if number >= len(self._length_array):
            grown = np.zeros(max(2 * len(self._length_array), number + 1))
            grown[: len(self._length_array)] = self._length_array
            self._length_array = grown
        self._length_array[number] = length

    def remove(self, doc_id: str) -> None:
        """Forget `doc_id`; removing an unknown id does nothing (deletions may be replayed)."""
        with self._lock:
            self._remove_locked(doc_id)

    def _remove_locked(self, doc_id: str) -> None:
        number = self._ids.pop(doc_id, None)
        if number is None:
            return
        for term in self._doc_terms.pop(number):
            posting = self._postings[term]
            del posting[number]
            self._term_arrays.pop(term, None)
            if not posting:
                del self._postings[term]
        self._total_length -= self._lengths[number]
        self._lengths[number] = 0
        self._length_array[number] = 0.0
        self._names[number] = ""
        self._free.append(number)

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """The `limit` best documents for `query` with their raw BM25 scores (> 0), best first;
        ties broken by doc id so results are deterministic."""
        if limit <= 0:
            return []
        terms = dict.fromkeys(tokenize(query))
        with self._lock:
            n_docs = len(self._ids)
            if n_docs == 0 or not terms:
                return []
            k1, b = self._k1, self._b
            length_scale = k1 * b / (self._total_length / n_docs or 1.0)
            length_base = k1 * (1.0 - b)
            scores = np.zeros(len(self._names))
            for term in terms:
                posting = self._postings.get(term)
                if not posting:
                    continue
                df = len(posting)
                idf = math.log1p((n_docs - df + 0.5) / (df + 0.5))
                gain = idf * (k1 + 1.0)
                numbers, tfs = self._arrays_of(term, posting)
                # the same float64 operations, in the same order, as one document at a time
                norm = length_base + length_scale * self._length_array[numbers]
                scores[numbers] += gain * tfs / (tfs + norm)
            hit = np.flatnonzero(scores > 0.0)  # idf > 0, so every matched document scores
            if len(hit) > limit:
                # everything tied with the limit-th score stays, for the doc-id tie-break below
                kth = np.partition(scores[hit], len(hit) - limit)[len(hit) - limit]
                hit = hit[scores[hit] >= kth]
            best = heapq.nsmallest(
                limit,
                ((int(number), float(scores[number])) for number in hit),
                key=lambda item: (-item[1], self._names[item[0]]),
            )
            return [(self._names[number], score) for number, score in best]

    def _arrays_of(
        self, term: str, posting: dict[int, int]
    ) -> tuple[NDArray[np.intp], NDArray[np.float64]]:
        cached = self._term_arrays.get(term)
        if cached is None:
            numbers = np.fromiter(posting.keys(), dtype=np.intp, count=len(posting))
            tfs = np.fromiter(posting.values(), dtype=np.float64, count=len(posting))
            cached = self._term_arrays[term] = (numbers, tfs)
        return cached
