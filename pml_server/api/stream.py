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
  the stream with a status.
"""

from __future__ import annotations

import hashlib
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import cast

from pml_server._proto.pml.v1 import pml_pb2, resources_pb2
from pml_server.api import convert, errors
from pml_server.api.validate import Violations
from pml_server.domain import model
from pml_server.domain.engine import EngineProtocol
from pml_server.domain.errors import (
    FieldViolation,
    InvalidArgumentError,
    PmlError,
    ResourceExhaustedError,
    UnavailableError,
)
from pml_server.domain.limits import Limits

log = logging.getLogger(__name__)

_DONE = object()
# Execution ids remembered per stream to tell a resend from a reused id (16 bytes each).
MAX_REMEMBERED_EXECUTIONS = 65_536


@dataclass
class _OpenExecution:
    started: pml_pb2.ExecutionStarted
    tool_calls: list[resources_pb2.ToolCall] = field(default_factory=list)
    # The first problem seen as its messages arrived: nothing more is buffered, and the
    # execution is refused with it when it finishes.
    refused: InvalidArgumentError | None = None
    buffered_bytes: int = 0


@dataclass(frozen=True)
class _Waiting:
    """A complete execution waiting for the stream's capture task."""

    execution_id: str
    sequence: int
    record: model.ExecutionRecord


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
    ) -> None:
        self._engine = engine
        self._tenant = tenant
        self._limits = limits
        self._pool = pool
        self._slots = threading.Semaphore(window)
        # At most half the window per capture batch: while one batch is embedded the reader
        # still has free slots to read and convert the next one (a batch as large as the
        # window stops reading until its acks are out, so nothing overlaps the model).
        self._batch = max(1, min(limits.capture_batch.bound, window // 2))
        self._acks: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []  # guarded by _lock
        self._capturing = False  # a capture task of this stream is queued or running
        # Records that arrived while a capture ran and need the model, for the embed-ahead
        # task (one per stream at a time): the next batch is embedded while this one is
        # written and awaited, instead of leaving the model idle meanwhile.
        self._ahead: list[model.ExecutionRecord] = []  # guarded by _lock
        self._embedding_ahead = False  # guarded by _lock
        self._stop = threading.Event()
        self._dim = engine.embedding_dim()
        self._on_capture = on_capture
        self._draining = draining or threading.Event()
        self._idle_seconds = idle_seconds
        self._open_live = 0  # live executions open (written by the reader)
        self._last_message = time.monotonic()  # when the reader last got a message
        self._buffered_bytes = 0  # of the open live executions (reader thread only)
        self._seen: dict[str, bytes] = {}  # execution id -> digest of what it captured
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
            busy = self._pending > 0 or bool(self._waiting)
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
        open_executions: dict[str, _OpenExecution] = {}
        last_sequence = -1
        try:
            for received in requests:
                self._last_message = time.monotonic()
                if received.batch:
                    _check_batch(received, self._limits)
                    self._batched_acks = True
                for msg in received.batch or (received,):
                    if self._stop.is_set():
                        break
                    last_sequence = self._read_one(msg, open_executions, last_sequence)
                if self._stop.is_set():
                    break
        except PmlError as err:
            self._acks.put(_Fatal(err))
            return
        except Exception as err:  # the call was cancelled or the client went away
            log.debug("trace stream reader ended: %r", err)
        self._acks.put(_DONE)

    def _read_one(
        self,
        msg: pml_pb2.StreamTracesRequest,
        open_executions: dict[str, _OpenExecution],
        last_sequence: int,
    ) -> int:
        """Handle one message (alone or of a batch); returns its sequence."""
        if self._draining.is_set():
            # Acks of the executions already read still go out; the rest is resent by the
            # client to another server (or this one after its restart).
            raise UnavailableError("the server is shutting down; resend what was not acked")
        if not msg.execution_id:
            raise InvalidArgumentError(FieldViolation("execution_id", "must not be empty"))
        if msg.sequence <= last_sequence:
            raise InvalidArgumentError(
                FieldViolation(
                    "sequence",
                    f"must increase on a stream: got {msg.sequence} after {last_sequence}",
                )
            )
        self._handle(msg, open_executions)
        self._open_live = len(open_executions)
        return msg.sequence

    def _handle(
        self, msg: pml_pb2.StreamTracesRequest, open_executions: dict[str, _OpenExecution]
    ) -> None:
        kind = msg.WhichOneof("event")
        eid = msg.execution_id
        if kind is None:
            raise InvalidArgumentError(
                FieldViolation("event", "set one of record, started, tool_call_finished, finished")
            )
        if kind == "record":
            if eid in open_executions:
                self._refuse(msg, _already_open(eid))
                return
            if self._reused(msg, eid, msg.record):
                return
            self._capture(msg, msg.record, default_request_id=eid)
        elif kind == "started":
            if eid in open_executions:
                self._refuse(msg, _already_open(eid))
                return
            if len(open_executions) >= self._limits.open_executions.bound:
                raise ResourceExhaustedError(
                    f"more than {self._limits.open_executions.bound} live executions open on one "
                    "stream: finish some first"
                )
            problems = _check_started(msg.started, self._limits, self._dim)
            if problems is not None:
                self._refuse(msg, problems)
                return
            opened = _OpenExecution(started=msg.started)
            open_executions[eid] = opened
            self._buffer(opened, msg.started.ByteSize())
        else:
            execution = open_executions.get(eid)
            if execution is None:
                self._refuse(
                    msg,
                    InvalidArgumentError(
                        FieldViolation("execution_id", f"no live execution {eid!r} is open")
                    ),
                )
                return
            if kind == "tool_call_finished":
                self._add_tool_call(execution, msg.tool_call_finished.tool_call)
                return
            del open_executions[eid]
            self._buffered_bytes -= execution.buffered_bytes
            if execution.refused is not None:
                self._refuse(msg, execution.refused)
                return
            problems = _check_finished(msg.finished, self._limits)
            if problems is not None:
                self._refuse(msg, problems)
                return
            record = _assemble(execution, msg.finished)
            if self._reused(msg, eid, record):
                return
            self._capture(msg, record, default_request_id=eid)

    def _add_tool_call(self, execution: _OpenExecution, call: resources_pb2.ToolCall) -> None:
        """Check a live tool call as it arrives; buffer it only if the execution is still good."""
        if execution.refused is not None:
            return
        index = len(execution.tool_calls)
        if index >= self._limits.tool_calls.bound:
            execution.refused = InvalidArgumentError(
                FieldViolation(
                    "tool_call_finished", f"more than {self._limits.tool_calls.bound} tool calls"
                )
            )
        else:
            out = Violations()
            convert.tool_call(call, "tool_call_finished.tool_call", out, self._limits)
            if out.items:
                execution.refused = InvalidArgumentError(out.items)
        if execution.refused is not None:
            # stop holding what it buffered: it will only be refused
            self._buffered_bytes -= execution.buffered_bytes
            execution.buffered_bytes = 0
            execution.tool_calls.clear()
            return
        execution.tool_calls.append(call)
        self._buffer(execution, call.ByteSize())

    def _buffer(self, execution: _OpenExecution, size: int) -> None:
        execution.buffered_bytes += size
        self._buffered_bytes += size
        if self._buffered_bytes > self._limits.stream_buffered.bound:
            raise ResourceExhaustedError(
                f"the live executions open on this stream hold more than "
                f"{self._limits.stream_buffered.bound} bytes: finish some first"
            )

    def _reused(
        self, msg: pml_pb2.StreamTracesRequest, eid: str, record: resources_pb2.ExecutionRecord
    ) -> bool:
        """An execution id used again on this stream for a different execution is refused (it
        would otherwise be answered `replayed`, its record silently dropped). The same
        execution resent is fine: that is how a client retries."""
        digest = _digest(record)
        earlier = self._seen.get(eid)
        if earlier is None:
            if len(self._seen) < MAX_REMEMBERED_EXECUTIONS:
                self._seen[eid] = digest
            return False
        if earlier == digest or record.request_id:
            return False  # an explicit request id decides replays itself
        self._refuse(
            msg,
            InvalidArgumentError(
                FieldViolation(
                    "execution_id",
                    f"execution {eid!r} was already used on this stream for another execution; "
                    "give each execution its own id (or a request_id)",
                )
            ),
        )
        return True

    def _reserve(self) -> None:
        # Blocks while the window is full: this is the stream's flow control.
        while not self._slots.acquire(timeout=0.5):
            if self._stop.is_set():
                raise InvalidArgumentError(FieldViolation("stream", "closed"))
        with self._lock:
            self._pending += 1

    def _refuse(self, msg: pml_pb2.StreamTracesRequest, error: PmlError) -> None:
        self._reserve()
        self._acks.put(
            pml_pb2.StreamTracesResponse(
                execution_id=msg.execution_id,
                sequence=msg.sequence,
                error=errors.to_rpc_status(error),
            )
        )

    def _capture(
        self,
        msg: pml_pb2.StreamTracesRequest,
        record_msg: resources_pb2.ExecutionRecord,
        default_request_id: str,
    ) -> None:
        try:
            record = convert.execution_record(
                record_msg, "record", self._limits, self._dim, default_request_id
            )
        except PmlError as err:
            self._refuse(msg, err)
            return
        self._reserve()
        with self._lock:
            self._waiting.append(_Waiting(msg.execution_id, msg.sequence, record))
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
            self._acks.put(self._ack(waiting.execution_id, waiting.sequence, error))

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
        self._acks.put(
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


def _digest(record: resources_pb2.ExecutionRecord) -> bytes:
    return hashlib.blake2b(record.SerializeToString(deterministic=True), digest_size=16).digest()


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


def _check_finished(
    finished: pml_pb2.ExecutionFinished, limits: Limits
) -> InvalidArgumentError | None:
    out = Violations()
    trace_excess = limits.trace.excess(finished.trace)
    if trace_excess is not None:
        out.add("finished.trace", trace_excess)
    if not math.isfinite(finished.duration_ms) or finished.duration_ms < 0:
        out.add("finished.duration_ms", "must be a finite number >= 0")
    return InvalidArgumentError(out.items) if out.items else None


def _already_open(eid: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        FieldViolation("execution_id", f"execution {eid!r} is already open on this stream")
    )


def _check_started(
    started: pml_pb2.ExecutionStarted, limits: Limits, dim: int
) -> InvalidArgumentError | None:
    """Validate the parts known at start, so a bad execution is refused before it buffers."""
    from pml_server.api import validate

    out = Violations()
    validate.check_text(out, "started.request_id", started.request_id, limits.request_id)
    validate.check_intent(out, "started.intent", started.intent, limits)
    validate.check_code(out, "started.code", started.code, limits)
    validate.check_text(out, "started.language", started.language, limits.language, True)
    validate.check_embedding(out, "started.intent_embedding", started.intent_embedding, dim)
    validate.check_tags(out, "started.tags", started.tags, limits)
    return InvalidArgumentError(out.items) if out.items else None


def _assemble(
    execution: _OpenExecution, finished: pml_pb2.ExecutionFinished
) -> resources_pb2.ExecutionRecord:
    s = execution.started
    return resources_pb2.ExecutionRecord(
        request_id=s.request_id,
        intent=s.intent,
        code=s.code,
        language=s.language,
        tool_calls=execution.tool_calls,
        status=finished.status,
        start_time=s.start_time,
        duration_ms=finished.duration_ms,
        trace=finished.trace,
        intent_embedding=s.intent_embedding,
        tags=s.tags,
    )
