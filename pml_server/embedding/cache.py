"""An embedding cache keyed by (model id, text): repeated intents are embedded once."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from pml_server.domain.lru import Lru
from pml_server.domain.vectors import Matrix, Vector
from pml_server.embedding.base import Embedder, EmbedderWrapper, SpanPools

SPAN_CACHE = 1024  # requests whose span pools are kept (each a few kB)


class CachedEmbedder(EmbedderWrapper):
    """Wraps an Embedder with a bounded LRU cache; same interface. A text another caller is
    embedding at the moment is waited for, not embedded twice: a stream embeds its next
    batch ahead (`Engine.embed_ahead`) while the batch before it is written, and the
    capture of that next batch may ask for the same texts before the model is done."""

    def __init__(self, inner: Embedder, capacity: int = 10_000) -> None:
        super().__init__(inner)
        self._capacity = capacity
        self._cache: Lru[tuple[str, str], Vector] = Lru(capacity)
        self._spans: Lru[tuple[str, str, tuple[tuple[int, int], ...]], SpanPools] = Lru(
            max(1, min(capacity, SPAN_CACHE))
        )
        self._lock = threading.Lock()
        # (model, text) -> set once its vector is cached (or its embedding failed)
        self._computing: dict[tuple[str, str], threading.Event] = {}
        self.hits = 0
        self.misses = 0

    @property
    def capacity(self) -> int:
        return self._capacity

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
        smaller cache of its own (`SPAN_CACHE` entries at most); its vector is also cached like
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
                self._cache.put((self._inner.model_id, text), pools.vector)
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
                    self._cache.put((model, text), vector)
            return computed
        finally:
            with self._lock:
                for text in claimed:
                    self._computing.pop((model, text)).set()
