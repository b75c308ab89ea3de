"""An embedding cache keyed by (model id, text): repeated intents are embedded once."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pml_server.domain.lru import ENTRY_BYTES, Lru
from pml_server.domain.vectors import Matrix, Vector
from pml_server.embedding.base import Embedder, EmbedderWrapper, SpanPools

# Requests whose span pools are kept, by the bytes they hold (`_span_bytes`; at most
# `embedding_cache_bytes` too): a short request's about 14 kB, the longest's about 45 kB.
# Counted by entries (1,024), the longest requests could hold 46 MB.
SPAN_CACHE_BYTES = 16 * 1024 * 1024
# The defaults of `engine.embedding_cache_size` and `engine.embedding_cache_bytes`.
CACHE_ENTRIES = 10_000
CACHE_BYTES = 32 * 1024 * 1024
# What an entry holds besides its text: the (model, text) key, the vector (a float32 array of
# its own, never a view that would keep its batch's whole matrix alive) and its place in the
# LRU (docs/configuration.md, embedding_cache_bytes).
_KEY_BYTES = sys.getsizeof(("", ""))
_VECTOR_HEADER = sys.getsizeof(np.zeros(0, np.float32))


def _text_entry_bytes(text: str, vector_bytes: int) -> int:
    """An entry of the vector cache for `text` whose vector's data takes `vector_bytes`."""
    return ENTRY_BYTES + _KEY_BYTES + sys.getsizeof(text) + _VECTOR_HEADER + vector_bytes


def _entry_bytes(key: tuple[str, str], vector: Vector) -> int:
    return _text_entry_bytes(key[1], vector.nbytes)


_SpanKey = tuple[str, str, tuple[tuple[int, int], ...]]
_SPAN_BYTES = sys.getsizeof((0, 0)) + 2 * sys.getsizeof(2**40)  # a span and its two offsets


def _span_bytes(key: _SpanKey, pools: SpanPools) -> int:
    """An entry of the span cache: its key (the text, the spans), the pools' arrays (each with
    the header of the array it may be a row of), the record and its place in the LRU."""
    _model, text, spans = key
    arrays = sum(2 * _VECTOR_HEADER + a.nbytes for a in (pools.vector, pools.mean, pools.spans))
    record = sys.getsizeof(pools) + sys.getsizeof(vars(pools)) + sys.getsizeof(pools.found)
    keys = sys.getsizeof(key) + sys.getsizeof(text) + sys.getsizeof(spans)
    return ENTRY_BYTES + keys + _SPAN_BYTES * len(spans) + arrays + record


class CachedEmbedder(EmbedderWrapper):
    """Wraps an Embedder with an LRU cache bounded both in entries (`capacity`) and in the bytes
    they hold (`capacity_bytes`: a text of 4,096 characters takes up to 16 KB, so entries alone
    bound nothing); same interface. A text another caller is
    embedding at the moment is waited for, not embedded twice: a stream embeds its next
    batch ahead (`Engine.embed_ahead`) while the batch before it is written, and the
    capture of that next batch may ask for the same texts before the model is done."""

    def __init__(
        self, inner: Embedder, capacity: int = CACHE_ENTRIES, capacity_bytes: int = CACHE_BYTES
    ) -> None:
        super().__init__(inner)
        self._capacity = capacity
        self._cache: Lru[tuple[str, str], Vector] = Lru(capacity_bytes, weigh=_entry_bytes)
        self._spans: Lru[_SpanKey, SpanPools] = Lru(
            min(capacity_bytes, SPAN_CACHE_BYTES), weigh=_span_bytes
        )
        self._lock = threading.Lock()
        # (model, text) -> set once its vector is cached (or its embedding failed)
        self._computing: dict[tuple[str, str], threading.Event] = {}
        self.hits = 0
        self.misses = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def capacity_bytes(self) -> int:
        return self._cache.bound

    @property
    def weight(self) -> int:
        """The bytes its vectors and texts hold, counted as `_entry_bytes` does."""
        with self._lock:
            return self._cache.weight

    def holds(self, texts: Sequence[str]) -> bool:
        """Whether the vectors of `texts` all fit in the cache at once (a stream embeds its
        next batch ahead only when they do: `service/_capture.py`, `embed_ahead`)."""
        vector = np.dtype(np.float32).itemsize * self.dim  # as `_keep` copies it
        size = sum(_text_entry_bytes(t, vector) for t in texts)
        return len(texts) <= self._capacity and size <= self.capacity_bytes

    def _keep(self, model: str, text: str, vector: Vector) -> None:
        """Cache a copy of `vector`, then evict past the count; the caller holds the lock."""
        self._cache.put((model, text), np.array(vector, dtype=np.float32))
        _trim(self._cache, self._capacity)

    def embed(self, texts: Sequence[str]) -> Matrix:
        model = self._inner.model_id
        rows: list[Vector | None] = []
        claimed: set[str] = set()  # missing texts this call embeds
        awaited: dict[str, threading.Event] = {}  # missing texts another call is embedding
        with self._lock:
            for text in texts:
                key = (model, text)
                vector = self._cache.get(key)
                if vector is None and text not in claimed and text not in awaited:
                    running = self._computing.get(key)
                    if running is not None:
                        awaited[text] = running
                    else:
                        claimed.add(text)
                        self._computing[key] = threading.Event()
                rows.append(vector)
        computed = self._embed_claimed(model, sorted(claimed))
        for text, running in awaited.items():
            running.wait()
            with self._lock:
                vector = self._cache.peek((model, text))
            if vector is None:  # its embedding failed, or it was evicted already: ours
                vector = self._inner.embed([text])[0]
            computed[text] = vector
        with self._lock:
            self.hits += len(texts) - len(claimed)
            self.misses += len(claimed)
        out = [v if v is not None else computed[t] for t, v in zip(texts, rows, strict=True)]
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(out).astype(np.float32)

    def embed_spans(self, text: str, spans: Sequence[tuple[int, int]]) -> SpanPools | None:
        """The model's run of `text` pooled over `spans`, cached by (model, text, spans) in a
        smaller cache of its own (`SPAN_CACHE_BYTES` at most); its vector is also cached like
        `embed`'s."""
        key = (self._inner.model_id, text, tuple(spans))
        with self._lock:
            cached = self._spans.get(key)
        if cached is not None:
            return cached
        pools = super().embed_spans(text, spans)
        if pools is not None:
            with self._lock:
                self._spans.put(key, pools)
                _trim(self._spans, self._capacity)
                self._keep(self._inner.model_id, text, pools.vector)
        return pools

    def _embed_claimed(self, model: str, claimed: list[str]) -> dict[str, Vector]:
        """Embed the texts this call claimed, cache them, and wake whoever waits for them
        (also when the model fails: a waiter then embeds its text itself)."""
        if not claimed:
            return {}
        try:
            computed = dict(zip(claimed, self._inner.embed(claimed), strict=True))
            with self._lock:
                for text, vector in computed.items():
                    self._keep(model, text, vector)
            return computed
        finally:
            with self._lock:
                for text in claimed:
                    self._computing.pop((model, text)).set()


def _trim(cache: Lru[Any, Any], count: int) -> None:
    """Evict the least recently used entries past `count`."""
    while len(cache) > count:
        cache.pop(next(iter(cache)))
