"""Filling a benchmark store in-process.

`record_all`: `record_many` batches instead of one `record` per execution. Each `record` waits
for its own write (group commit) and indexes its intent alone; a batch embeds once, indexes
once and waits once.

`bulk_record_new`: the same store for a workload whose every execution creates its own pattern
and capability (the service bench's: distinct code, distinct tool pair, client vector, run
succeeded), at a fraction of the cost, for the 1M store of `--large`. Each execution goes
through the engine's own capture of a new pattern (`_insert_pattern`: the same records, ids,
counters, capability, op log entry and request answer a capture writes) with the engine's
state and locks, but what `record_many` does per batch of 64 is done per chunk of thousands:
one store batch and one stats write per chunk (the stats deltas add up), one vector index
insert per chunk on two threads (the graph does not depend on the thread count), code
normalized on a second thread ahead of the capture (the normalizer releases the GIL), and the
index insert of one chunk overlapping the capture of the next. The per-record reads that
cannot find anything in such a workload (request id applied before, pattern of the code hash)
are replaced by checks over the whole fill that raise if the workload is not of that kind.
`python -m benches.harness.check_fill` compares the stores both fills make.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from pml_server.capture.normalize import NormalizedCode
from pml_server.capture.rules import run_succeeded, tool_signature, tools_used, validate_record
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import CaptureResult, ExecutionRecord
from pml_server.domain.records import IntentRecord
from pml_server.domain.vectors import client_vector
from pml_server.service import Engine

# The engine's own capture of a new pattern and write path (private to the service package:
# the bulk fill is the one caller outside it, and keeps to what `record_many` does).
from pml_server.service._capture import _insert_pattern, _prepare
from pml_server.service._idempotency import encode_result, record_digest
from pml_server.service._writes import Change, await_durable, commit

IndexAdds = list[tuple[IntentRecord, tuple[str, ...]]]

# Executions per store batch and vector index insert in `bulk_record_new`. An insert links
# each new node against every earlier node of its batch (exact distances), so the batch's
# extra work grows with its square: 2,048 keeps it under a tenth of the searches' at 384-d.
BULK_CHUNK = 2048
BULK_INDEX_THREADS = 2
PROGRESS_EVERY = 100_000  # executions between two progress lines on stderr


def record_all(
    engine: Engine,
    tenant: str,
    count: int,
    make: Callable[[int], ExecutionRecord],
    threads: int = 2,
    batch: int = LIMITS.capture_batch.bound,
) -> list[CaptureResult]:
    """Capture `make(i)` for i in 0..count, in batches of `batch` consecutive executions; batch
    b runs on thread b % threads (two threads: one fills its next batch while the other waits
    for its write; one thread captures in order, which decides grouping). Raises if any
    execution was refused: a bench store must hold them all. Returns each capture's result, in
    the order of i."""
    starts = range(0, count, batch)
    errors: list[BaseException] = []
    results: list[CaptureResult | None] = [None] * count

    def worker(first: int) -> None:
        try:
            for start in starts[first::threads]:
                records = [make(i) for i in range(start, min(start + batch, count))]
                outcomes = engine.record_many(tenant, records)
                for n, (record, outcome) in enumerate(zip(records, outcomes, strict=True)):
                    if isinstance(outcome, Exception):
                        raise RuntimeError(f"fill: {record.request_id} refused") from outcome
                    results[start + n] = outcome
        except BaseException as error:  # re-raised in the caller's thread below
            errors.append(error)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def bulk_record_new(
    engine: Engine,
    tenant: str,
    count: int,
    make: Callable[[int], ExecutionRecord],
    chunk: int = BULK_CHUNK,
) -> None:
    """Capture `make(i)` for i in 0..count into a tenant that holds no pattern yet, each
    execution a new pattern of a tool signature of its own (see the module docstring). Raises
    ValueError, before writing its chunk, at the first execution not of that kind."""
    state = engine._state  # the engine's own capture, chunk by chunk
    state.readiness.require()
    if engine.stats(tenant).patterns:
        raise ValueError(f"bulk fill: tenant {tenant!r} already holds patterns")
    seen_requests: set[str] = set()
    seen_hashes: set[str] = set()
    seen_signatures: set[tuple[str, ...]] = set()
    index = state.indexes.for_tenant(tenant)

    def chunks() -> Iterator[list[ExecutionRecord]]:
        for start in range(0, count, chunk):
            yield [make(i) for i in range(start, min(start + chunk, count))]

    def prepared(records: list[ExecutionRecord]) -> list[tuple[ExecutionRecord, NormalizedCode]]:
        """Each record redacted with its code normalized (rule 7b, `_capture`'s one core call
        a batch); the first refused record fails the fill."""
        out = []
        for item in _prepare(state, records):
            if isinstance(item, Exception):
                raise item
            out.append(item)
        return out

    def capture_chunk(
        records: list[ExecutionRecord], ready: list[tuple[ExecutionRecord, NormalizedCode]]
    ) -> IndexAdds:
        change = Change()
        now = state.clock()
        for original, (execution, code) in zip(records, ready, strict=True):
            validate_record(original, state.rules.limits)
            if execution.intent_embedding is None or not run_succeeded(execution):
                raise ValueError(f"bulk fill: {execution.request_id} has no vector to save")
            vector = client_vector(
                execution.intent_embedding, state.embedder.dim, "intent_embedding"
            )
            signature = tool_signature(tools_used(execution))
            repeated = (
                "request id"
                if execution.request_id in seen_requests
                else "code hash"
                if code.code_hash in seen_hashes
                else "tool signature"
                if signature in seen_signatures
                else None
            )
            if repeated is not None:
                raise ValueError(f"bulk fill: {execution.request_id} repeats a {repeated}")
            seen_requests.add(execution.request_id)
            seen_hashes.add(code.code_hash)
            seen_signatures.add(signature)
            with contextlib.ExitStack() as held:
                held.enter_context(state.locks.pattern.lock_for(tenant, code.code_hash))
                result = _insert_pattern(state, tenant, execution, code, vector, change, held, now)
            answer = encode_result(result, now, record_digest(execution))
            change.ops.append(
                state.repo.requests.put_request_result(tenant, execution.request_id, answer)
            )
        staged = change.index_adds
        change.index_adds = []  # indexed by the caller, on the index thread
        await_durable(commit(state, tenant, change))
        return staged

    to_index: queue.Queue[IndexAdds | None] = queue.Queue(maxsize=1)
    index_errors: list[BaseException] = []

    def indexer() -> None:
        while (adds := to_index.get()) is not None:
            if not index_errors:
                try:
                    index.add_many(adds, threads=BULK_INDEX_THREADS)
                except BaseException as error:  # re-raised in the caller's thread below
                    index_errors.append(error)

    index_thread = threading.Thread(target=indexer, name="bulk-fill-index")
    index_thread.start()
    started, done = time.monotonic(), 0
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="bulk-fill-normalize") as normalizer:
            pending: (
                tuple[list[ExecutionRecord], list[tuple[ExecutionRecord, NormalizedCode]]] | None
            ) = None
            for records in chunks():
                ahead = normalizer.submit(prepared, records)
                if pending is not None:
                    to_index.put(capture_chunk(*pending))
                    done += len(pending[0])
                    if done % PROGRESS_EVERY < chunk:
                        seconds = time.monotonic() - started
                        print(f"[fill] {done} in {seconds:.0f} s", file=sys.stderr, flush=True)
                pending = (records, ahead.result())
                if index_errors:
                    break
            if pending is not None and not index_errors:
                to_index.put(capture_chunk(*pending))
    finally:
        to_index.put(None)
        index_thread.join()
    if index_errors:
        raise index_errors[0]
