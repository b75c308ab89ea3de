"""Concurrent embedding calls share model runs.

Callers that arrive while the model is busy are served together: a caller queues its texts
and, whenever one of the model's slots is free, a caller holding it runs every queued text (up
to `max_batch`) as one batch and hands each caller its rows. Nobody waits for a batch to fill:
with no contention a call runs at once, alone. (MiniLM runs each text of a batch alone, so that
no vector depends on its neighbours: a shared batch saves the calls' overhead and keeps the
model's runs at one per slot, not the model's work per text.)
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pml_server.domain.vectors import Matrix
from pml_server.embedding.base import Embedder, EmbedderWrapper


@dataclass
class _Request:
    texts: list[str]
    wake: threading.Condition  # on the embedder's lock: only this request's caller waits on it
    rows: Matrix | None = None
    error: BaseException | None = None
    done: bool = False
    leads: bool = False  # holds one of the slots: its caller runs the next queued batch


class CoalescingEmbedder(EmbedderWrapper):
    """Wraps an Embedder; same interface. `slots` model runs may be in flight at once (one per
    core for a single-threaded model).

    Every caller waits on its own condition and is woken only for what concerns it: its rows
    are ready, or a slot was handed to it to run the queue's next batch. (One shared condition
    woke every waiting caller at the end of every run: at 8 Suggest callers about six threads a
    run, each taking the lock and the GIL to find nothing to do.) A caller that ran a batch
    while its own texts are still queued runs the next batch on the same slot, without a
    hand-off; one whose texts are done hands its slot to the oldest queued caller."""

    def __init__(self, inner: Embedder, max_batch: int = 32, slots: int = 2) -> None:
        if max_batch < 1 or slots < 1:
            raise ValueError("max_batch and slots must be >= 1")
        super().__init__(inner)
        self._max_batch = max_batch
        self._free = slots
        self._queue: list[_Request] = []
        self._lock = threading.Lock()
        self.runs = 0  # model calls made, for tests and stats
        self.idle_wakeups = 0  # callers woken with neither rows nor a slot (for tests: none)

    def embed(self, texts: Sequence[str]) -> Matrix:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        mine = _Request(list(texts), threading.Condition(self._lock))
        with self._lock:
            self._queue.append(mine)
            if self._free > 0:
                self._free -= 1
                mine.leads = True
            while True:
                if mine.leads and self._queue and not mine.done:
                    self._run_next()  # keeps the slot: the loop looks again
                    continue
                if mine.leads:  # nothing left for this caller to run: the slot goes on
                    mine.leads = False
                    self._free += 1
                    self._hand_off()
                if mine.done:
                    break
                mine.wake.wait()
                if not (mine.done or mine.leads):
                    self.idle_wakeups += 1
        if mine.error is not None:
            raise mine.error
        assert mine.rows is not None
        return mine.rows

    def _run_next(self) -> None:
        """Run the queue's next batch (lock held, released while the model runs)."""
        batch = self._take_batch()
        rows: Matrix | None = None
        error: BaseException | None = None
        self._lock.release()
        try:
            rows, error = self._run(batch)
        finally:
            self._lock.acquire()
            self.runs += 1
            if rows is None and error is None:  # interrupted: nobody may hang
                error = RuntimeError("the embedding run was interrupted")
            self._deliver(batch, rows, error)

    def _hand_off(self) -> None:
        """Give free slots to the oldest queued callers not leading yet, as long as the queue
        holds more texts than the leaders already woken will take (lock held)."""
        leaders = sum(1 for request in self._queue if request.leads)
        queued = sum(len(request.texts) for request in self._queue)
        for request in self._queue:
            if self._free == 0 or queued <= leaders * self._max_batch:
                return
            if not request.leads:
                request.leads = True
                leaders += 1
                self._free -= 1
                request.wake.notify()

    def _take_batch(self) -> list[_Request]:
        """Queued requests in arrival order, at least one, up to `max_batch` texts."""
        batch = [self._queue.pop(0)]
        size = len(batch[0].texts)
        while self._queue and size + len(self._queue[0].texts) <= self._max_batch:
            size += len(self._queue[0].texts)
            batch.append(self._queue.pop(0))
        return batch

    def _run(self, batch: list[_Request]) -> tuple[Matrix | None, BaseException | None]:
        texts = [t for request in batch for t in request.texts]
        try:
            return self._inner.embed(texts), None
        except Exception as error:  # handed to every caller of the batch
            return None, error

    def _deliver(
        self, batch: list[_Request], rows: Matrix | None, error: BaseException | None
    ) -> None:
        """Hand each request of the batch its rows (or the error) and wake its caller (lock
        held; the caller that ran the batch is awake already)."""
        start = 0
        for request in batch:
            if rows is not None:
                request.rows = rows[start : start + len(request.texts)]
                start += len(request.texts)
            request.error = error
            request.done = True
            request.wake.notify()
