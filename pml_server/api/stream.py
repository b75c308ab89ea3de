"""StreamTraces: whole records and live execution events on one bidirectional stream.

Design:
- A reader thread consumes the request stream and assembles executions (whole `record`, or
  `started` + `tool_call_finished`* + `finished`, interleaved by `execution_id`). A message
  may carry a batch of messages (`StreamTracesRequest.batch`), read one after another exactly
  as if each had come alone: gRPC's cost is per message, a record's own is far less. Once a
  client has sent a batch, a capture batch's acknowledgements go back as one message too.
- Completed executions wait in the stream's queue; one task of the shared capture pool at a time
  takes every waiting execution (up to half the window, within the engine's batch bound) and
  captures them in order with one `record_many` call (one embedding call, one index insertion,
  one durability wait). While it works the reader keeps assembling the next batch (the other
  half of the window), so batches grow with the load.
  Acknowledgements come back in completion order, each naming its execution id and the
  sequence number of the message that completed it; a batch's acks reach the response thread
  as one queue item.
- Flow control: every acknowledgement not yet handed to gRPC holds one slot of a per-stream
  window. When the window is full the reader stops reading, so HTTP/2 flow control pushes back on
  the client; at most `max_open_executions` live executions are buffered. Nothing grows without
  bound when the server or the client's ack reader is slow.
- Exactly once: an execution's idempotency key is its request id (default: its execution id). A
  client that reconnects resends every execution not acknowledged; the engine answers a key it
  has already applied with the stored result (`replayed`), counting nothing twice.
- A malformed execution is refused alone (an acknowledgement carrying `error`); only a protocol
  violation (no execution id, sequence not increasing, no event, too many open executions) ends
  the stream with a status. A live execution still open when the client closes its side is
  refused alone too (`ExecutionAssembler.abandon`).

The parts: `stream_assembly.ExecutionAssembler` (what each message means: no thread, no
transport), `stream_capture.CaptureScheduler` (the capture task on the shared pool); this
module is the transport (reader thread, response iterator) and its flow control.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

from pml_server._proto.pml.v1 import pml_pb2
from pml_server.api import errors
from pml_server.api.stream_assembly import Complete, ExecutionAssembler, Refused
from pml_server.api.stream_capture import CaptureScheduler
from pml_server.domain import model
from pml_server.domain.engine import EngineProtocol
from pml_server.domain.errors import (
    FieldViolation,
    InvalidArgumentError,
    PmlError,
    UnavailableError,
)
from pml_server.domain.limits import Limits

log = logging.getLogger(__name__)

_DONE = object()


@dataclass(frozen=True)
class _Fatal:
    error: PmlError


class TraceStream:
    def __init__(
        self,
        engine: EngineProtocol,
        tenant: str,
        limits: Limits,
        pool: ThreadPoolExecutor,
        window: int,
        on_capture: Callable[[model.CaptureResult], None] | None = None,
        draining: threading.Event | None = None,
        idle_seconds: float | None = None,
        authorize: Callable[[], None] | None = None,
    ) -> None:
        self._limits = limits
        # Checks the caller's key again (raises UNAUTHENTICATED or PERMISSION_DENIED): a stream
        # lives for minutes, and a key revoked meanwhile must stop writing, as unary calls do.
        self._authorize = authorize
        self._slots = threading.Semaphore(window)
        self._acks: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._assembler = ExecutionAssembler(limits, engine.embedding_dim())
        # At most half the window per capture batch: while one batch is embedded the reader
        # still has free slots to read and convert the next one (a batch as large as the
        # window stops reading until its acks are out, so nothing overlaps the model).
        self._captures = CaptureScheduler(
            engine,
            tenant,
            pool,
            batch=max(1, min(limits.capture_batch.bound, window // 2)),
            deliver=self._acks.put,
            on_capture=on_capture,
        )
        self._stop = threading.Event()
        self._draining = draining or threading.Event()
        self._idle_seconds = idle_seconds
        self._open_live = 0  # live executions open (written by the reader)
        self._last_message = time.monotonic()  # when the reader last got a message
        # Set by the reader once the client sent a batch: it reads batched acks, so a capture
        # batch's acks go out as one message (`StreamTracesResponse.batch`).
        self._batched_acks = False

    # ---- the response side (runs in the gRPC handler thread) --------------------------------

    def run(self, requests: Iterator[pml_pb2.StreamTracesRequest]) -> Iterator[object]:
        reader = threading.Thread(
            target=self._read, args=(requests,), daemon=True, name="pml-stream-reader"
        )
        reader.start()
        reader_done = False
        fatal: PmlError | None = None
        try:
            while True:
                with self._lock:
                    if reader_done and self._pending == 0:
                        break
                try:
                    item = self._acks.get(timeout=self._idle_check_seconds())
                except queue.Empty:
                    if self._idle():
                        raise UnavailableError(self._idle_message()) from None
                    continue
                if item is _DONE:
                    reader_done = True
                    continue
                if isinstance(item, _Fatal):
                    fatal = item.error
                    reader_done = True
                    continue
                replies = cast(
                    list[pml_pb2.StreamTracesResponse], item if isinstance(item, list) else [item]
                )
                # (acks it carries, message): a slot is freed as its ack is handed to gRPC
                sends = (
                    [(len(replies), pml_pb2.StreamTracesResponse(batch=replies))]
                    if self._batched_acks and len(replies) > 1
                    else [(1, reply) for reply in replies]
                )
                for acks, message in sends:
                    with self._lock:
                        self._pending -= acks
                    self._slots.release(acks)
                    yield message
        finally:
            self._stop.set()
        if fatal is not None:
            raise fatal

    def _idle_check_seconds(self) -> float | None:
        return None if self._idle_seconds is None else max(0.05, self._idle_seconds / 4)

    def _idle(self) -> bool:
        """Nothing read for `idle_seconds` and nothing waiting for an answer. A live execution
        left open (started, then nothing) does not keep the stream: none of it was acknowledged,
        so closing loses nothing the client was told is stored (docs/reliability.md, Idle
        streams)."""
        if self._idle_seconds is None:
            return False
        with self._lock:
            busy = self._pending > 0
        busy = busy or self._captures.has_waiting()
        return not busy and time.monotonic() - self._last_message > self._idle_seconds

    def _idle_message(self) -> str:
        with self._lock:
            live = self._open_live
        dropped = (
            f"; its {live} live execution(s), started and never finished, were not captured "
            "(none was acknowledged): send them again whole"
            if live
            else ""
        )
        return (
            f"the stream sent nothing for {self._idle_seconds:g} s with nothing in flight: "
            f"closed to free its RPC thread; open a new one when needed{dropped}"
        )

    # ---- the request side (runs in the reader thread) ---------------------------------------

    def _read(self, requests: Iterator[pml_pb2.StreamTracesRequest]) -> None:
        try:
            for received in requests:
                self._last_message = time.monotonic()
                if self._authorize is not None:
                    self._authorize()
                if received.batch:
                    _check_batch(received, self._limits)
                    self._batched_acks = True
                for msg in received.batch or (received,):
                    if self._stop.is_set():
                        break
                    self._read_one(msg)
                if self._stop.is_set():
                    break
            else:  # the client closed its side: what it left open is refused, not dropped
                for refused in self._assembler.abandon():
                    self._refuse(refused)
                self._open_live = 0
        except PmlError as err:
            self._acks.put(_Fatal(err))
            return
        except Exception as err:  # the call was cancelled or the client went away
            log.debug("trace stream reader ended: %r", err)
        self._acks.put(_DONE)

    def _read_one(self, msg: pml_pb2.StreamTracesRequest) -> None:
        """Handle one message (alone or of a batch)."""
        if self._draining.is_set():
            # Acks of the executions already read still go out; the rest is resent by the
            # client to another server (or this one after its restart).
            raise UnavailableError("the server is shutting down; resend what was not acked")
        outcome = self._assembler.accept(msg)
        if isinstance(outcome, Refused):
            self._refuse(outcome)
        elif isinstance(outcome, Complete):
            self._reserve()
            self._captures.add(outcome.execution_id, outcome.sequence, outcome.record)
        self._open_live = self._assembler.open_count

    def _reserve(self) -> None:
        # Blocks while the window is full: this is the stream's flow control.
        while not self._slots.acquire(timeout=0.5):
            if self._stop.is_set():
                raise InvalidArgumentError(FieldViolation("stream", "closed"))
        with self._lock:
            self._pending += 1

    def _refuse(self, refused: Refused) -> None:
        self._reserve()
        self._acks.put(
            pml_pb2.StreamTracesResponse(
                execution_id=refused.execution_id,
                sequence=refused.sequence,
                error=errors.to_rpc_status(refused.error),
            )
        )


def _check_batch(msg: pml_pb2.StreamTracesRequest, limits: Limits) -> None:
    """A batch message carries only its batch, of messages that are not batches themselves."""
    if msg.execution_id or msg.sequence or msg.WhichOneof("event") is not None:
        raise InvalidArgumentError(
            FieldViolation("batch", "a message with a batch sets no other field")
        )
    too_many = limits.stream_batch.excess(msg.batch)
    if too_many is not None:
        raise InvalidArgumentError(FieldViolation("batch", too_many))
    for i, inner in enumerate(msg.batch):
        if inner.batch:
            raise InvalidArgumentError(
                FieldViolation(f"batch[{i}].batch", "a message of a batch holds no batch")
            )
