"""What a trace stream's messages mean, one at a time, with no thread and no transport:
executions assembled from whole `record`s or live events (`started` + `tool_call_finished`* +
`finished`, interleaved by `execution_id`), each turned into a record to capture or a refusal.

`ExecutionAssembler.accept` answers each message with `Complete`, `Refused` or nothing (an
event that only adds to an open execution). A malformed execution is refused alone; a protocol
violation (no execution id, sequence not increasing, no event, too many open executions or
bytes buffered) raises the error that ends the stream. The stream (`api/stream.py`) does the
rest: flow control, capture and acknowledgements.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from pml_server._proto.pml.v1 import pml_pb2, resources_pb2
from pml_server.api import convert
from pml_server.api.validate import Violations
from pml_server.domain import model
from pml_server.domain.errors import (
    FieldViolation,
    InvalidArgumentError,
    PmlError,
    ResourceExhaustedError,
)
from pml_server.domain.limits import Limits

# Execution ids remembered per stream to tell a resend from a reused id (16 bytes each).
MAX_REMEMBERED_EXECUTIONS = 65_536


@dataclass(frozen=True)
class Complete:
    """An execution complete and valid: capture `record`, acknowledge (`execution_id`,
    `sequence`) of the message that completed it."""

    execution_id: str
    sequence: int
    record: model.ExecutionRecord


@dataclass(frozen=True)
class Refused:
    """An execution refused alone: acknowledge the message with `error`."""

    execution_id: str
    sequence: int
    error: PmlError


@dataclass
class _OpenExecution:
    started: pml_pb2.ExecutionStarted
    sequence: int  # of its `started` message
    tool_calls: list[resources_pb2.ToolCall] = field(default_factory=list)
    # The first problem seen as its messages arrived: nothing more is buffered, and the
    # execution is refused with it when it finishes.
    refused: InvalidArgumentError | None = None
    buffered_bytes: int = 0


class ExecutionAssembler:
    """One stream's executions as its messages arrive (one thread calls it: the reader)."""

    def __init__(self, limits: Limits, dim: int) -> None:
        self._limits = limits
        self._dim = dim
        self._open: dict[str, _OpenExecution] = {}
        self._last_sequence = -1
        self._buffered_bytes = 0  # of the open live executions
        self._seen: dict[str, bytes] = {}  # execution id -> digest of what it captured

    @property
    def open_count(self) -> int:
        """Live executions started and not finished."""
        return len(self._open)

    def accept(self, msg: pml_pb2.StreamTracesRequest) -> Complete | Refused | None:
        """Handle one message (alone or of a batch)."""
        if not msg.execution_id:
            raise InvalidArgumentError(FieldViolation("execution_id", "must not be empty"))
        if msg.sequence <= self._last_sequence:
            raise InvalidArgumentError(
                FieldViolation(
                    "sequence",
                    f"must increase on a stream: got {msg.sequence} after {self._last_sequence}",
                )
            )
        too_long = self._limits.execution_id.excess(msg.execution_id)
        if too_long is not None:
            # refused alone, and neither opened nor remembered: what it holds stays bounded
            outcome: Complete | Refused | None = _refused(
                msg, InvalidArgumentError(FieldViolation("execution_id", too_long))
            )
        else:
            outcome = self._handle(msg)
        self._last_sequence = msg.sequence
        return outcome

    def abandon(self) -> list[Refused]:
        """The client closed its side with live executions still open: each is refused (acked
        with an error naming `finished`, under its `started` message's sequence), never dropped
        without a word while the stream ends OK."""
        refused = [
            Refused(
                eid,
                execution.sequence,
                InvalidArgumentError(
                    FieldViolation(
                        "finished",
                        "the stream was closed before this live execution finished: nothing "
                        "of it was captured; send it again whole",
                    )
                ),
            )
            for eid, execution in self._open.items()
        ]
        self._open.clear()
        self._buffered_bytes = 0
        return refused

    def _handle(self, msg: pml_pb2.StreamTracesRequest) -> Complete | Refused | None:
        kind = msg.WhichOneof("event")
        eid = msg.execution_id
        if kind is None:
            raise InvalidArgumentError(
                FieldViolation("event", "set one of record, started, tool_call_finished, finished")
            )
        if kind == "record":
            if eid in self._open:
                return _refused(msg, _already_open(eid))
            return self._reused(msg, eid, msg.record) or self._complete(msg, msg.record)
        if kind == "started":
            if eid in self._open:
                return _refused(msg, _already_open(eid))
            if len(self._open) >= self._limits.open_executions.bound:
                raise ResourceExhaustedError(
                    f"more than {self._limits.open_executions.bound} live executions open on one "
                    "stream: finish some first"
                )
            problems = _check_started(msg.started, self._limits, self._dim)
            if problems is not None:
                return _refused(msg, problems)
            opened = _OpenExecution(started=msg.started, sequence=msg.sequence)
            self._open[eid] = opened
            self._buffer(opened, msg.started.ByteSize())
            return None
        execution = self._open.get(eid)
        if execution is None:
            return _refused(
                msg,
                InvalidArgumentError(
                    FieldViolation("execution_id", f"no live execution {eid!r} is open")
                ),
            )
        if kind == "tool_call_finished":
            self._add_tool_call(execution, msg.tool_call_finished.tool_call)
            return None
        del self._open[eid]
        self._buffered_bytes -= execution.buffered_bytes
        if execution.refused is not None:
            return _refused(msg, execution.refused)
        problems = _check_finished(msg.finished, self._limits)
        if problems is not None:
            return _refused(msg, problems)
        record = _assemble(execution, msg.finished)
        return self._reused(msg, eid, record) or self._complete(msg, record)

    def _complete(
        self, msg: pml_pb2.StreamTracesRequest, record_msg: resources_pb2.ExecutionRecord
    ) -> Complete | Refused:
        try:
            record = convert.execution_record(
                record_msg, "record", self._limits, self._dim, msg.execution_id
            )
        except PmlError as err:
            return _refused(msg, err)
        return Complete(msg.execution_id, msg.sequence, record)

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
    ) -> Refused | None:
        """An execution id used again on this stream for a different execution is refused (it
        would otherwise be answered `replayed`, its record silently dropped). The same
        execution resent is fine: that is how a client retries."""
        digest = _digest(record)
        earlier = self._seen.get(eid)
        if earlier is None:
            if len(self._seen) < MAX_REMEMBERED_EXECUTIONS:
                self._seen[eid] = digest
            return None
        if earlier == digest or record.request_id:
            return None  # an explicit request id decides replays itself
        return _refused(
            msg,
            InvalidArgumentError(
                FieldViolation(
                    "execution_id",
                    f"execution {eid!r} was already used on this stream for another execution; "
                    "give each execution its own id (or a request_id)",
                )
            ),
        )


def _refused(msg: pml_pb2.StreamTracesRequest, error: PmlError) -> Refused:
    return Refused(msg.execution_id, msg.sequence, error)


def _digest(record: resources_pb2.ExecutionRecord) -> bytes:
    return hashlib.blake2b(record.SerializeToString(deterministic=True), digest_size=16).digest()


def _check_finished(
    finished: pml_pb2.ExecutionFinished, limits: Limits
) -> InvalidArgumentError | None:
    out = Violations()
    trace_excess = limits.trace.excess(finished.trace)
    if trace_excess is not None:
        out.add("finished.trace", trace_excess)
    if not math.isfinite(finished.duration_ms) or finished.duration_ms < 0:
        out.add("finished.duration_ms", "must be a finite number >= 0")
    convert.check_status(out, "finished.status", finished.status)
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
    validate.check_request_id(out, "started.request_id", started.request_id, required=False)
    validate.check_intent(out, "started.intent", started.intent, limits)
    validate.check_code(out, "started.code", started.code, limits)
    validate.check_language(out, "started.language", started.language)
    validate.check_embedding(out, "started.intent_embedding", started.intent_embedding, dim)
    validate.check_tags(out, "started.tags", started.tags, limits)
    validate.check_session_id(out, "started.session_id", started.session_id)
    validate.check_timestamp(out, "started.start_time", started.start_time)
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
        session_id=s.session_id,
    )
