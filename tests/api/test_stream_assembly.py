"""The stream's execution assembler on its own, without threads or a server: what each message
means (a record to capture, a refusal, or nothing yet) and which messages end the stream."""

from __future__ import annotations

import dataclasses

import pytest

from pml_server._proto.pml.v1 import pml_pb2
from pml_server._proto.pml.v1 import resources_pb2 as r
from pml_server.api.stream_assembly import Complete, ExecutionAssembler, Refused
from pml_server.client import make_record
from pml_server.domain.errors import InvalidArgumentError, ResourceExhaustedError
from pml_server.domain.limits import LIMITS, Limit

Req = pml_pb2.StreamTracesRequest
DIM = 8


def _started(eid: str, seq: int, intent: str = "Read JSON file") -> Req:
    code = "await mcp.read_file(); await mcp.parse_json()"
    return Req(
        execution_id=eid,
        sequence=seq,
        started=pml_pb2.ExecutionStarted(intent=intent, code=code, language="ts"),
    )


def _tool(eid: str, seq: int, name: str, ok: bool = True) -> Req:
    call = r.ToolCall(tool=name, ok=ok, error="" if ok else "boom")
    return Req(
        execution_id=eid, sequence=seq, tool_call_finished=pml_pb2.ToolCallFinished(tool_call=call)
    )


def _finished(eid: str, seq: int, duration_ms: float = 5.0) -> Req:
    return Req(
        execution_id=eid, sequence=seq, finished=pml_pb2.ExecutionFinished(duration_ms=duration_ms)
    )


def _record(intent: str, code: str) -> r.ExecutionRecord:
    """A whole record without a request id of its own (its execution id is its default)."""
    record = make_record(intent, code)
    record.request_id = ""
    return record


def _violated_fields(error: InvalidArgumentError | object) -> list[str]:
    assert isinstance(error, InvalidArgumentError)
    return [v.field for v in error.violations]


def test_live_events_interleaved_assemble_each_execution() -> None:
    assembler = ExecutionAssembler(LIMITS, DIM)
    assert assembler.accept(_started("a", 1)) is None
    assert assembler.accept(_started("b", 2, "Mail the boss")) is None
    assert assembler.accept(_tool("a", 3, "read_file")) is None
    assert assembler.accept(_tool("b", 4, "gmail_send", ok=False)) is None
    assert assembler.open_count == 2
    done_b = assembler.accept(_finished("b", 5))
    assert isinstance(done_b, Complete)
    assert (done_b.execution_id, done_b.sequence) == ("b", 5)
    assert done_b.record.intent == "Mail the boss"
    assert [(c.tool, c.ok) for c in done_b.record.tool_calls] == [("gmail_send", False)]
    assert done_b.record.request_id == "b"  # the execution id is the default request id
    assert assembler.accept(_tool("a", 6, "parse_json")) is None
    done_a = assembler.accept(_finished("a", 7))
    assert isinstance(done_a, Complete)
    assert [c.tool for c in done_a.record.tool_calls] == ["read_file", "parse_json"]
    assert assembler.open_count == 0


def test_a_whole_record_completes_at_once() -> None:
    assembler = ExecutionAssembler(LIMITS, DIM)
    done = assembler.accept(Req(execution_id="e1", sequence=1, record=_record("t", "x()")))
    assert isinstance(done, Complete)
    assert done.record.request_id == "e1"


def test_protocol_violations_raise() -> None:
    assembler = ExecutionAssembler(LIMITS, DIM)
    with pytest.raises(InvalidArgumentError) as empty_id:
        assembler.accept(_started("", 1))
    assert _violated_fields(empty_id.value) == ["execution_id"]
    assembler.accept(_started("a", 5))
    with pytest.raises(InvalidArgumentError) as backwards:
        assembler.accept(_tool("a", 5, "read_file"))
    assert _violated_fields(backwards.value) == ["sequence"]
    with pytest.raises(InvalidArgumentError) as no_event:
        assembler.accept(Req(execution_id="a", sequence=6))
    assert _violated_fields(no_event.value) == ["event"]


def test_a_bad_execution_is_refused_alone() -> None:
    assembler = ExecutionAssembler(LIMITS, DIM)
    unknown = assembler.accept(_finished("nobody", 1))
    assert isinstance(unknown, Refused)
    assert (unknown.execution_id, unknown.sequence) == ("nobody", 1)
    assert _violated_fields(unknown.error) == ["execution_id"]
    assembler.accept(_started("a", 2))
    again = assembler.accept(_started("a", 3))
    assert isinstance(again, Refused)
    bad_duration = assembler.accept(_finished("a", 4, duration_ms=-1.0))
    assert isinstance(bad_duration, Refused)
    assert _violated_fields(bad_duration.error) == ["finished.duration_ms"]
    assert assembler.open_count == 0
    ok = assembler.accept(Req(execution_id="b", sequence=5, record=_record("t", "x()")))
    assert isinstance(ok, Complete)


def test_an_execution_id_reused_for_another_execution_is_refused_a_resend_is_not() -> None:
    assembler = ExecutionAssembler(LIMITS, DIM)
    first = _record("task one", "one()")
    assert isinstance(assembler.accept(Req(execution_id="e", sequence=1, record=first)), Complete)
    resent = assembler.accept(Req(execution_id="e", sequence=2, record=first))
    assert isinstance(resent, Complete)
    other = assembler.accept(Req(execution_id="e", sequence=3, record=_record("task two", "two()")))
    assert isinstance(other, Refused)
    assert _violated_fields(other.error) == ["execution_id"]


def test_too_many_tool_calls_refuse_the_execution_when_it_finishes() -> None:
    assembler = ExecutionAssembler(LIMITS.with_bounds(tool_calls=2), DIM)
    assembler.accept(_started("a", 1))
    for seq in (2, 3, 4):
        assert assembler.accept(_tool("a", seq, f"tool{seq}")) is None
    refused = assembler.accept(_finished("a", 5))
    assert isinstance(refused, Refused)
    assert _violated_fields(refused.error) == ["tool_call_finished"]


def test_open_executions_and_buffered_bytes_are_bounded() -> None:
    assembler = ExecutionAssembler(LIMITS.with_bounds(open_executions=2), DIM)
    assembler.accept(_started("a", 1))
    assembler.accept(_started("b", 2))
    with pytest.raises(ResourceExhaustedError):
        assembler.accept(_started("c", 3))

    small = dataclasses.replace(LIMITS, stream_buffered=Limit("stream", 300, "bytes"))
    assembler = ExecutionAssembler(small, DIM)
    assembler.accept(_started("a", 1))

    def feed_tool_calls() -> None:
        for seq in range(2, 40):  # 38 calls hold far more than 300 bytes
            assembler.accept(_tool("a", seq, "read_file"))

    with pytest.raises(ResourceExhaustedError):
        feed_tool_calls()
