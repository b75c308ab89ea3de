"""An embedding cache keyed by (model id, text): repeated intents are embedded once."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from pml_server.domain.vectors import Matrix, Vector
from pml_server.embedding.base import Embedder, EmbedderWrapper


class CachedEmbedder(EmbedderWrapper):
    """Wraps an Embedder with a bounded LRU cache; same interface."""

    def __init__(self, inner: Embedder, capacity: int = 10_000) -> None:
        super().__init__(inner)
        self._capacity = capacity
        self._cache: OrderedDict[tuple[str, str], Vector] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def embed(self, texts: Sequence[str]) -> Matrix:
        model = self._inner.model_id
        rows: list[Vector | None] = []
        with self._lock:
            for text in texts:
                vector = self._cache.get((model, text))
                if vector is not None:
                    self._cache.move_to_end((model, text))
                rows.append(vector)
        missing = sorted({t for t, v in zip(texts, rows, strict=True) if v is None})
        computed = dict(zip(missing, self._inner.embed(missing), strict=True)) if missing else {}
        with self._lock:
            self.hits += len(texts) - len(missing)
            self.misses += len(missing)
            for text, vector in computed.items():
                self._cache[(model, text)] = vector
                if len(self._cache) > self._capacity:
                    self._cache.popitem(last=False)
        out = [v if v is not None else computed[t] for t, v in zip(texts, rows, strict=True)]
        if not out:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack(out).astype(np.float32)
