"""What the embedding model costs: runs, texts, and the CPU and wall time spent in it.

Operators read it from /metrics (`pml_embedding_*`), and the service benchmark divides the
model's CPU seconds by the server's to report the share of a capture or Suggest spent
embedding. CPU is the calling thread's (`time.thread_time`), or, for a model that spreads a
batch over helper threads (MiniLM), the sum over every thread that worked on the call, as the
model reports it (`last_call_cpu_seconds`): the model's own work, whatever other threads do
meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from pml_server.domain.model import EmbeddingUsage
from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import Embedder, EmbedderWrapper, SpanPools


class MeteredEmbedder(EmbedderWrapper):
    """Wraps the model itself (inside the cache, so cache hits cost nothing); same
    interface."""

    def __init__(self, inner: Embedder) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._usage = EmbeddingUsage()

    def embed(self, texts: Sequence[str]) -> Matrix:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            return self._inner.embed(texts)
        finally:
            self._count(len(texts), time.thread_time() - cpu, time.perf_counter() - wall)

    def _count(self, texts: int, cpu: float, wall: float) -> None:
        measured = getattr(self._inner, "last_call_cpu_seconds", None)
        if callable(measured):  # the model's helper threads worked for this call too
            cpu = float(measured())
        with self._lock:
            u = self._usage
            self._usage = EmbeddingUsage(
                u.runs + 1, u.texts + texts, u.cpu_seconds + cpu, u.seconds + wall
            )

    def embed_spans(self, text: str, spans: Sequence[tuple[int, int]]) -> SpanPools | None:
        wall, cpu = time.perf_counter(), time.thread_time()
        pools = None
        try:
            pools = super().embed_spans(text, spans)
            return pools
        finally:
            if pools is not None:  # one model run of one text
                self._count(1, time.thread_time() - cpu, time.perf_counter() - wall)

    def usage(self) -> EmbeddingUsage:
        with self._lock:
            return self._usage
