"""Concurrent RecordExecution calls share one `record_many` batch.

A capture alone costs far more than its share of a batch: its own index insertion, its own
commit and durability wait, its own embedding call, and, with 8 callers, 8 RPC threads running
the capture's Python at once and passing the GIL between them (on 2 cores the server spent
about 2.9 ms of CPU a capture outside the model, against 1.3 ms for the same executions over
StreamTraces in batches). So, like `embedding.CoalescingEmbedder` for model runs: a call
queues its record and, whenever one of the `slots` is free, the caller that finds it free
captures every queued record of the first waiting tenant (up to the engine's batch bound, in
arrival order) with one `record_many` call and hands each caller its outcome. Nobody waits for
a batch to fill: a call with no company runs at once, alone.

`record_many` gives each record the outcome and counters of as many consecutive `record` calls,
so concurrent calls batched in arrival order get what some order of separate calls would have
given them (concurrent calls have no order of their own). Two slots: while one batch waits for
its write to become durable, the next one runs the model.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from pml_server.domain import model
from pml_server.domain.engine import EngineProtocol
from pml_server.domain.limits import LIMITS


@dataclass
class _Pending:
    tenant: str
    record: model.ExecutionRecord
    outcome: model.CaptureResult | Exception | None = None
    done: bool = False


class CaptureCoalescer:
    """`record` with the engine's `record` contract (the result, or the refusal raised), run in
    batches of the calls waiting at the same time."""

    def __init__(
        self, engine: EngineProtocol, slots: int = 2, max_batch: int = LIMITS.capture_batch.bound
    ) -> None:
        if slots < 1 or not 1 <= max_batch <= LIMITS.capture_batch.bound:
            raise ValueError(
                f"slots must be >= 1 and max_batch within 1..{LIMITS.capture_batch.bound}"
            )
        self._engine = engine
        self._free = slots
        self._max_batch = max_batch
        self._queue: list[_Pending] = []
        self._changed = threading.Condition()
        self.batches = 0  # record_many calls made, for tests and stats

    def record(self, tenant: str, record: model.ExecutionRecord) -> model.CaptureResult:
        mine = _Pending(tenant, record)
        with self._changed:
            self._queue.append(mine)
            while not mine.done:
                if self._free == 0 or not self._queue:
                    self._changed.wait()
                    continue
                self._free -= 1
                batch = self._take_batch()
                outcomes: list[model.CaptureResult | Exception] | None = None
                self._changed.release()
                try:
                    outcomes = self._run(batch)
                finally:
                    self._changed.acquire()
                    self._free += 1
                    self.batches += 1
                    if outcomes is None:  # interrupted: nobody may hang
                        outcomes = [RuntimeError("the capture batch was interrupted")] * len(batch)
                    for pending, outcome in zip(batch, outcomes, strict=True):
                        pending.outcome = outcome
                        pending.done = True
                    self._changed.notify_all()
        if isinstance(mine.outcome, Exception):
            raise mine.outcome
        assert mine.outcome is not None
        return mine.outcome

    def _take_batch(self) -> list[_Pending]:
        """The first queued call and the others of its tenant behind it, up to `max_batch`."""
        tenant = self._queue[0].tenant
        batch: list[_Pending] = []
        rest: list[_Pending] = []
        for pending in self._queue:
            if pending.tenant == tenant and len(batch) < self._max_batch:
                batch.append(pending)
            else:
                rest.append(pending)
        self._queue = rest
        return batch

    def _run(self, batch: list[_Pending]) -> list[model.CaptureResult | Exception]:
        if len(batch) == 1:  # alone: `record` itself (no batch bookkeeping to pay for)
            try:
                return [self._engine.record(batch[0].tenant, batch[0].record)]
            except Exception as error:
                return [error]
        try:
            return self._engine.record_many(batch[0].tenant, [p.record for p in batch])
        except Exception as error:  # refused the whole batch (e.g. not ready): every caller
            return [error] * len(batch)
