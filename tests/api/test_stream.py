"""StreamTraces: acknowledgements, live events interleaved, per-execution refusals, resume
exactly once after a broken stream, and bounded buffering."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server._proto.pml.v1 import resources_pb2 as r
from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.config import config_of
from tests.conftest import StartServer
from tests.support import open_engine

Req = pml_pb2.StreamTracesRequest


def _record(i: int) -> r.ExecutionRecord:
    return make_record(f"task {i}", f"await mcp.tool{i % 5}({{n: {i}}})", tools=[f"tool{i % 5}"])


def test_each_record_is_acknowledged_with_its_sequence(client: PmlClient) -> None:
    requests = [Req(execution_id=f"e{i}", sequence=10 + i, record=_record(i)) for i in range(20)]
    acks = {a.execution_id: a for a in client.stream(requests)}
    assert set(acks) == {f"e{i}" for i in range(20)}
    for i in range(20):
        assert acks[f"e{i}"].sequence == 10 + i
        assert acks[f"e{i}"].HasField("result")
    assert client.stats().executions == 20


def test_live_executions_interleave(client: PmlClient) -> None:
    def started(eid: str, seq: int, intent: str, code: str) -> Req:
        return Req(
            execution_id=eid,
            sequence=seq,
            started=pml_pb2.ExecutionStarted(intent=intent, code=code, language="ts"),
        )

    def tool(eid: str, seq: int, name: str, ok: bool = True) -> Req:
        call = r.ToolCall(tool=name, ok=ok, error="" if ok else "boom")
        return Req(
            execution_id=eid,
            sequence=seq,
            tool_call_finished=pml_pb2.ToolCallFinished(tool_call=call),
        )

    def finished(eid: str, seq: int) -> Req:
        return Req(execution_id=eid, sequence=seq, finished=pml_pb2.ExecutionFinished())

    requests = [
        started("a", 1, "Read JSON file", "await mcp.read_file(); await mcp.parse_json()"),
        started("b", 2, "Mail the boss", "await mcp.gmail_send()"),
        tool("a", 3, "read_file"),
        tool("b", 4, "gmail_send", ok=False),
        tool("a", 5, "parse_json"),
        finished("b", 6),
        finished("a", 7),
    ]
    acks = {a.execution_id: a for a in client.stream(requests)}
    assert acks["a"].sequence == 7
    assert acks["a"].result.outcome == r.CAPTURE_OUTCOME_SAVED
    assert list(client.get_pattern(acks["a"].result.pattern).tools_used) == [
        "read_file",
        "parse_json",
    ]
    assert acks["b"].sequence == 6
    assert acks["b"].result.outcome == r.CAPTURE_OUTCOME_REJECTED
    assert [f.tool for f in acks["b"].result.tool_failures] == ["gmail_send"]


def test_live_executions_left_open_at_half_close_are_refused(client: PmlClient) -> None:
    """The client closes its side after `started` (and a tool call) but before `finished`: the
    stream ended OK with no acknowledgement at all, the execution dropped without a word. Now
    each open execution is acknowledged with an error naming `finished`, under the sequence of
    its `started`, and the finished one beside it is captured as before."""
    code = "await mcp.read_file()"
    requests = [
        Req(
            execution_id="open",
            sequence=1,
            started=pml_pb2.ExecutionStarted(intent="Read a file", code=code, language="ts"),
        ),
        Req(
            execution_id="open",
            sequence=2,
            tool_call_finished=pml_pb2.ToolCallFinished(
                tool_call=r.ToolCall(tool="read_file", ok=True)
            ),
        ),
        Req(execution_id="whole", sequence=3, record=_record(3)),
    ]
    acks = {a.execution_id: a for a in client.stream(requests)}
    assert set(acks) == {"open", "whole"}
    assert acks["whole"].HasField("result")
    assert acks["open"].HasField("error")
    assert acks["open"].sequence == 1
    assert acks["open"].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "finished" in acks["open"].error.message
    assert client.stats().patterns == 1


def test_bad_execution_is_refused_alone(client: PmlClient) -> None:
    requests = [
        Req(execution_id="ok1", sequence=1, record=_record(1)),
        Req(execution_id="bad", sequence=2, record=make_record("", "x", tools=["t"])),
        Req(
            execution_id="ghost",
            sequence=3,
            tool_call_finished=pml_pb2.ToolCallFinished(tool_call=r.ToolCall(tool="t", ok=True)),
        ),
        Req(execution_id="ok2", sequence=4, record=_record(2)),
    ]
    acks = {a.execution_id: a for a in client.stream(requests)}
    assert acks["ok1"].HasField("result")
    assert acks["ok2"].HasField("result")
    assert acks["bad"].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "record.intent" in str(acks["bad"].error.details[0].value)
    assert acks["ghost"].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]


def test_resume_after_a_broken_stream_applies_exactly_once(start: StartServer) -> None:
    server = start()
    records = [_record(i) for i in range(30)]
    for i, rec in enumerate(records):
        rec.request_id = f"req-{i}"
    sent = 0

    def breaking_requests() -> Iterator[Req]:
        nonlocal sent
        for i, rec in enumerate(records[:20]):
            sent += 1
            yield Req(execution_id=rec.request_id, sequence=i + 1, record=rec)
        raise ConnectionError("client lost its connection")  # the stream breaks mid-way

    acked: set[str] = set()
    with PmlClient(f"127.0.0.1:{server.port}") as client:

        def consume() -> None:
            for ack in client.stream(breaking_requests()):
                acked.add(ack.execution_id)

        # the client's own error, once what it sent is acknowledged (not gRPC's UNKNOWN)
        with pytest.raises(ConnectionError):
            consume()
        # Resend everything: those applied before the break come back replayed.
        report = client.upload(records)
        stats = client.stats()
    assert set(report.acks) == {f"req-{i}" for i in range(30)}
    replayed = {e for e, a in report.acks.items() if a.result.replayed}
    assert acked <= replayed  # every execution acknowledged before was applied already
    assert stats.executions == 30  # and nothing twice


def test_a_slow_server_does_not_buffer_without_bound(start: StartServer, data_dir: Path) -> None:
    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    gate = threading.Event()
    original = engine.record_many

    def blocked_record_many(tenant: str, records: object) -> object:
        gate.wait(30)
        return original(tenant, records)  # type: ignore[arg-type]

    engine.record_many = blocked_record_many  # type: ignore[method-assign]
    server = start(engine=engine, stream_window=2, capture_workers=2)
    # 100 records = 20 MB, far more than HTTP/2 windows hold (40, 8 MB, were all sent once, on
    # a loaded machine: gRPC sizes its windows from what it measures)
    big = "x" * 200_000
    total = 100
    produced = 0

    def requests() -> Iterator[Req]:
        nonlocal produced
        for i in range(total):
            produced += 1
            rec = make_record(f"t{i}", f"{big}{i}", tools=["t"])
            yield Req(execution_id=f"e{i}", sequence=i + 1, record=rec)

    acks: list[pml_pb2.StreamTracesResponse] = []
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        consumer = threading.Thread(target=lambda: acks.extend(client.stream(requests())))
        consumer.start()
        gate.wait(1.0)  # let the client push as much as flow control allows
        held_back = total - produced
        gate.set()
        consumer.join(240)  # 100 captures of 200 KB code: slow on a loaded machine
    assert held_back > 0, "the client could send everything while the server was stuck"
    assert len(acks) == total
    assert all(a.HasField("result") for a in acks)


def test_executions_behind_a_running_capture_are_embedded_ahead_once(
    start: StartServer, data_dir: Path
) -> None:
    """While the first batch is held inside the engine, the executions read behind it are
    embedded ahead; their capture finds the vectors (each intent reaches the model once) and
    every outcome is what one stream of captures gives."""
    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    gate = threading.Event()
    batches: list[int] = []
    original = engine.record_many

    def held_record_many(tenant: str, records: object) -> object:
        batches.append(len(records))  # type: ignore[arg-type]
        gate.wait(30)
        return original(tenant, records)  # type: ignore[arg-type]

    engine.record_many = held_record_many  # type: ignore[method-assign]
    server = start(engine=engine, stream_window=64)
    # 30 intents, each code twice: the second record of a code counts against the first
    records = [
        make_record(f"task number {i % 30}", f"await mcp.t{i % 30}({{n: 1}})", tools=[f"t{i % 30}"])
        for i in range(60)
    ]
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        uploading = threading.Thread(target=lambda: acks.update(client.upload(records).acks))
        acks: dict[str, pml_pb2.StreamTracesResponse] = {}
        uploading.start()
        deadline = time.monotonic() + 30
        # everything but the held batch (its first records) is embedded while it is held
        while not batches or engine.embedding_usage().texts < 30 - batches[0]:
            assert time.monotonic() < deadline, "nothing was embedded ahead"
            time.sleep(0.02)
        gate.set()
        uploading.join(30)
        stats = client.stats()
    assert len(acks) == 60
    outcomes = [acks[r.request_id].result.outcome for r in records]
    assert outcomes[:30] == [r.CAPTURE_OUTCOME_SAVED] * 30
    assert outcomes[30:] == [r.CAPTURE_OUTCOME_COUNTED] * 30
    assert (stats.patterns, stats.executions) == (30, 60)
    assert engine.embedding_usage().texts == 30  # each intent embedded once, ahead or not


def test_too_many_open_executions_is_resource_exhausted(start: StartServer) -> None:
    server = start(max_open_executions=3)
    requests = [
        Req(
            execution_id=f"e{i}",
            sequence=i + 1,
            started=pml_pb2.ExecutionStarted(intent="x", code="y", language="ts"),
        )
        for i in range(4)
    ]
    with PmlClient(f"127.0.0.1:{server.port}") as client, pytest.raises(PmlClientError) as err:
        list(client.stream(requests))
    assert err.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED


def test_a_stream_captures_in_order_like_sequential_calls(client: PmlClient) -> None:
    """Executions of one stream are captured in their order (in batches): the same code twice
    is saved then counted, a repeated request id is replayed, a bad record is refused alone."""
    same = "await mcp.read_file({path: 'a.json'})"
    requests = [
        Req(
            execution_id="a",
            sequence=1,
            record=make_record("Read a file", same, tools=["read_file"], request_id="ra"),
        ),
        Req(
            execution_id="b",
            sequence=2,
            record=make_record(
                "Read the file", same.replace("a.json", "b.json"), tools=["read_file"]
            ),
        ),
        Req(execution_id="c", sequence=3, record=make_record("", same, tools=["read_file"])),
        Req(
            execution_id="d",
            sequence=4,
            record=make_record("Read a file", same, tools=["read_file"], request_id="ra"),
        ),
    ]
    acks = {a.execution_id: a for a in client.stream(requests)}
    saved, counted, bad, replay = (acks[e] for e in "abcd")
    assert saved.result.outcome == r.CAPTURE_OUTCOME_SAVED
    assert counted.result.outcome == r.CAPTURE_OUTCOME_COUNTED
    assert counted.result.pattern == saved.result.pattern
    assert bad.HasField("error")
    assert replay.result.replayed
    assert replay.result.pattern == saved.result.pattern
    assert client.stats().executions == 2


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return str(reply.read().decode())


def test_streams_their_clients_cancelled_are_counted_cancelled(start: StartServer) -> None:
    """`pml_requests` counts a stream its client cancelled with executions still in flight as
    CANCELLED (it counted it nowhere), and one cancelled with none in flight once: CANCELLED,
    or OK when grpcio ended its request stream before it saw the cancel (docs/reliability.md,
    Clients that give up, known limits)."""
    server = start(metrics_port=0)
    assert server.metrics_port
    keep_open = threading.Event()

    def count(code: str) -> float:
        line = f'pml_requests_total{{code="{code}",method="StreamTraces"}} '
        text = _metrics(server.metrics_port)
        found = [float(x.split(" ")[-1]) for x in text.splitlines() if x.startswith(line)]
        return found[0] if found else 0.0

    def settled(total: float) -> None:
        for _ in range(200):  # the server ends a lost stream a moment after the client left
            if count("CANCELLED") + count("OK") >= total:
                return
            time.sleep(0.05)

    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        stub = pml_pb2_grpc.PmlServiceStub(channel)
        for n in (200, 1):

            def requests(n: int = n) -> Iterator[Req]:
                yield from (
                    Req(execution_id=f"c{n}-{i}", sequence=i + 1, record=_record(i))
                    for i in range(n)
                )
                keep_open.wait(30)  # the client never half-closes: it cancels

            call = stub.StreamTraces(requests(), timeout=60)
            acks = [next(call)]
            assert acks[0].HasField("result")
            call.cancel()
            if n == 200:
                settled(1)
                assert (count("CANCELLED"), count("OK")) == (1.0, 0.0)
        keep_open.set()
    settled(2)
    assert count("CANCELLED") + count("OK") == 2.0
