"""A trace stream's captures: the complete executions waiting, and the one task of the shared
capture pool at a time that captures them.

The task takes every waiting execution (up to the batch bound) and captures them in order
with one `record_many` call (one embedding call, one index insertion, one durability wait),
then queues itself again behind the other streams' tasks while executions wait. Each batch's
acknowledgements go to `deliver` as one list, in completion order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pml_server._proto.pml.v1 import pml_pb2
from pml_server.api import convert, errors
from pml_server.domain import model
from pml_server.domain.engine import EngineProtocol
from pml_server.domain.errors import PmlError, UnavailableError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Waiting:
    """A complete execution waiting for the stream's capture task."""

    execution_id: str
    sequence: int
    record: model.ExecutionRecord


class CaptureScheduler:
    """Captures one stream's complete executions on the shared pool, in arrival order."""

    def __init__(
        self,
        engine: EngineProtocol,
        tenant: str,
        pool: ThreadPoolExecutor,
        batch: int,
        deliver: Callable[[object], None],
        on_capture: Callable[[model.CaptureResult], None] | None = None,
    ) -> None:
        self._engine = engine
        self._tenant = tenant
        self._pool = pool
        self._batch = batch
        self._deliver = deliver
        self._on_capture = on_capture
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []  # guarded by _lock
        self._capturing = False  # a capture task of this stream is queued or running
        # Records that arrived while a capture ran and need the model, for the embed-ahead
        # task (one per stream at a time): the next batch is embedded while this one is
        # written and awaited, instead of leaving the model idle meanwhile.
        self._ahead: list[model.ExecutionRecord] = []  # guarded by _lock
        self._embedding_ahead = False  # guarded by _lock

    def has_waiting(self) -> bool:
        with self._lock:
            return bool(self._waiting)

    def add(self, execution_id: str, sequence: int, record: model.ExecutionRecord) -> None:
        """Queue a complete execution (its window slot is already reserved)."""
        with self._lock:
            self._waiting.append(_Waiting(execution_id, sequence, record))
            if self._capturing:  # the running task takes it with its next batch
                if record.intent_embedding is None:
                    self._ahead.append(record)
                    if not self._embedding_ahead:
                        self._embedding_ahead = True
                        self._submit_or_forget(self._embed_ahead)
                return
            self._capturing = True
        self._schedule_capture()

    def _submit_or_forget(self, task: Callable[[], None]) -> None:
        try:
            self._pool.submit(task)
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._embedding_ahead = False

    def _embed_ahead(self) -> None:
        """Embed the intents of the executions waiting behind the running capture, until none
        is left (`Engine.embed_ahead`: the capture then finds their vectors cached)."""
        while True:
            with self._lock:
                records, self._ahead = self._ahead, []
                if not records:
                    self._embedding_ahead = False
                    return
            try:
                self._engine.embed_ahead(self._tenant, records)
            except Exception as err:  # the capture embeds them itself and meets the error
                log.debug("embedding ahead failed: %r", err)

    def _schedule_capture(self) -> None:
        try:
            self._pool.submit(self._capture_next_batch)
        except RuntimeError:  # the pool is shut down: the server is stopping
            with self._lock:
                self._capturing = False
            self._answer_all_waiting(UnavailableError("the server is shutting down; resend"))

    def _answer_all_waiting(self, error: PmlError) -> None:
        with self._lock:
            batch, self._waiting = self._waiting, []
        for waiting in batch:
            self._deliver(self._ack(waiting.execution_id, waiting.sequence, error))

    def _capture_next_batch(self) -> None:
        """Capture the waiting executions (up to the batch bound), then queue the next batch
        behind the other streams' tasks rather than keep the pool thread: a busy stream must
        not starve streams waiting for a capture thread."""
        with self._lock:
            batch = self._waiting[: self._batch]
            del self._waiting[: self._batch]
        try:
            outcomes = self._engine.record_many(self._tenant, [w.record for w in batch])
        except Exception as err:  # e.g. not ready: every execution of the batch gets it
            outcomes = [err] * len(batch)
        # One queue item for the batch's acks: one wake-up of the response thread per batch,
        # not per execution.
        self._deliver(
            [
                self._ack(waiting.execution_id, waiting.sequence, outcome)
                for waiting, outcome in zip(batch, outcomes, strict=True)
            ]
        )
        with self._lock:
            self._capturing = bool(self._waiting)
            if not self._capturing:
                return
        self._schedule_capture()

    def _ack(
        self, eid: str, seq: int, outcome: model.CaptureResult | Exception
    ) -> pml_pb2.StreamTracesResponse:
        reply = pml_pb2.StreamTracesResponse(execution_id=eid, sequence=seq)
        if isinstance(outcome, Exception):
            if not errors.is_client_facing(outcome):
                log.error("capture failed on a trace stream", exc_info=outcome)
            reply.error.CopyFrom(errors.to_rpc_status(outcome))
            return reply
        result = outcome
        if self._on_capture is not None:
            self._on_capture(result)
        reply.result.CopyFrom(convert.capture_result(result))
        return reply
