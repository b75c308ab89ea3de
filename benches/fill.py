"""Filling a benchmark store in-process: `record_many` batches instead of one `record` per
execution. Each `record` waits for its own write (group commit) and indexes its intent alone; a
batch embeds once, indexes once and waits once (`python -m benches.check_fill` measures both)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pml_server.domain.limits import LIMITS
from pml_server.domain.model import ExecutionRecord
from pml_server.service import Engine


def record_all(
    engine: Engine,
    tenant: str,
    count: int,
    make: Callable[[int], ExecutionRecord],
    threads: int = 2,
    batch: int = LIMITS.capture_batch.bound,
) -> None:
    """Capture `make(i)` for i in 0..count, in batches of `batch` consecutive executions; batch
    b runs on thread b % threads (two threads: one fills its next batch while the other waits
    for its write). Raises if any execution was refused: a bench store must hold them all."""
    starts = range(0, count, batch)
    errors: list[BaseException] = []

    def worker(first: int) -> None:
        try:
            for start in starts[first::threads]:
                records = [make(i) for i in range(start, min(start + batch, count))]
                outcomes = engine.record_many(tenant, records)
                for record, outcome in zip(records, outcomes, strict=True):
                    if isinstance(outcome, Exception):
                        raise RuntimeError(f"fill: {record.request_id} refused") from outcome
        except BaseException as error:  # re-raised in the caller's thread below
            errors.append(error)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
