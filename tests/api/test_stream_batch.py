"""StreamTraces batches (`StreamTracesRequest.batch`): a batch is its messages sent one after
another (the same acknowledgements, the same store), acknowledgements come back batched only
to a client that sent a batch, and a malformed batch ends the stream naming the field."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from google.rpc import error_details_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server._proto.pml.v1 import resources_pb2 as r
from pml_server.client import (
    UPLOAD_BATCH_BYTES,
    PmlClient,
    PmlClientError,
    batched_messages,
    make_record,
)
from tests.conftest import StartServer

Req = pml_pb2.StreamTracesRequest
Ack = pml_pb2.StreamTracesResponse


def _messages(tag: str) -> list[Req]:
    """A stream of whole records (new, counted, a refused one, a request id repeated) and two
    interleaved live executions; `tag` keeps each run's patterns and ids its own."""

    def record(i: int, intent: str | None = None, request_id: str = "") -> r.ExecutionRecord:
        tool = f"{tag}_tool{i % 4}"
        rec = make_record(
            f"task {i} of {tag}" if intent is None else intent,
            f"await mcp.{tool}({{n: {i}}})",
            tools=[tool],
        )
        rec.request_id = request_id
        return rec

    out = [Req(execution_id=f"{tag}-r{i}", record=record(i)) for i in range(12)]
    out.append(Req(execution_id=f"{tag}-bad", record=record(99, intent="  ")))  # refused alone
    out.append(Req(execution_id=f"{tag}-again", record=record(3, request_id=f"{tag}-rid")))
    out.append(Req(execution_id=f"{tag}-again2", record=record(3, request_id=f"{tag}-rid")))
    code = f"await mcp.{tag}_read(); await mcp.{tag}_parse()"
    for eid in ("live1", "live2"):
        started = pml_pb2.ExecutionStarted(intent=f"{eid} of {tag}", code=code, language="ts")
        out.insert(4, Req(execution_id=f"{tag}-{eid}", started=started))
    for name in (f"{tag}_read", f"{tag}_parse"):
        for eid in ("live1", "live2"):
            call = pml_pb2.ToolCallFinished(tool_call=r.ToolCall(tool=name, ok=True))
            out.insert(9, Req(execution_id=f"{tag}-{eid}", tool_call_finished=call))
    for eid in ("live2", "live1"):
        out.append(Req(execution_id=f"{tag}-{eid}", finished=pml_pb2.ExecutionFinished()))
    for seq, message in enumerate(out, 1):
        message.sequence = seq
    return out


def _in_batches(messages: list[Req], cuts: list[int]) -> list[Req]:
    """`messages` sent as batches ending at `cuts` (a piece of one is still a batch of one)."""
    bounds = sorted({c % len(messages) for c in cuts} | {0, len(messages)})
    return [Req(batch=messages[a:b]) for a, b in itertools.pairwise(bounds)]


def _answers(acks: list[Ack], tag: str) -> dict[str, tuple[object, ...]]:
    """What each execution was answered, without the run's own tag and random ids."""
    out: dict[str, tuple[object, ...]] = {}
    for ack in acks:
        key = ack.execution_id.removeprefix(f"{tag}-")
        if ack.HasField("error"):
            out[key] = ("error", ack.sequence, ack.error.code)
        else:
            res = ack.result
            out[key] = (res.outcome, ack.sequence, res.new_pattern, res.replayed)
    return out


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8))
def test_a_batch_is_its_messages_sent_one_by_one(client: PmlClient, cuts: list[int]) -> None:
    tag = f"t{abs(hash(tuple(cuts))) % 10**9}"
    before = client.stats()
    alone = _answers(list(client.stream(_messages(f"{tag}a"))), f"{tag}a")
    middle = client.stats()
    batched = _answers(list(client.stream(_in_batches(_messages(f"{tag}b"), cuts))), f"{tag}b")
    after = client.stats()
    assert batched == alone
    assert len(alone) == len({m.execution_id for m in _messages(tag)})
    for name in ("executions", "patterns", "intents", "capabilities"):
        assert getattr(after, name) - getattr(middle, name) == getattr(middle, name) - getattr(
            before, name
        ), name


def test_acks_are_batched_only_for_a_client_that_batched(channel: grpc.Channel) -> None:
    stub = pml_pb2_grpc.PmlServiceStub(channel)
    alone = list(stub.StreamTraces(iter(_messages("single"))))
    assert all(not ack.batch and ack.execution_id for ack in alone)
    raw = list(stub.StreamTraces(iter(_in_batches(_messages("multi"), [5, 11]))))
    flat = [inner for ack in raw for inner in (ack.batch or (ack,))]
    assert any(ack.batch for ack in raw)  # the captures' acks, several at a time
    assert all(not inner.batch and inner.execution_id for inner in flat)  # never nested
    assert len(flat) == len(alone)


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (Req(execution_id="x", batch=[Req(execution_id="a", sequence=1)]), "batch"),
        (Req(sequence=3, batch=[Req(execution_id="a", sequence=1)]), "batch"),
        (Req(batch=[Req(batch=[Req(execution_id="a", sequence=1)])]), "batch[0].batch"),
        (Req(batch=[Req(execution_id=f"e{i}", sequence=i + 1) for i in range(257)]), "batch"),
        (Req(batch=[Req(execution_id="", sequence=1)]), "execution_id"),
    ],
)
def test_a_malformed_batch_ends_the_stream_naming_the_field(
    client: PmlClient, request_: Req, field: str
) -> None:
    with pytest.raises(PmlClientError) as err:
        list(client.stream([request_]))
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert {name for name, _ in err.value.violations} == {field}


def test_sequences_must_increase_across_batches(client: PmlClient) -> None:
    first = _messages("seq")[:3]
    again = Req(execution_id="seq-late", sequence=2, record=first[0].record)
    with pytest.raises(PmlClientError) as err:
        list(client.stream([Req(batch=first), Req(batch=[again])]))
    assert {name for name, _ in err.value.violations} == {"sequence"}


def _plain(n: int, size: int = 0) -> list[Req]:
    out = []
    for i in range(n):
        rec = make_record(f"task {i}", f"await mcp.t({{n: {i}}})" + " " * size, tools=["t"])
        out.append(Req(execution_id=f"e{i}", sequence=i + 1, record=rec))
    return out


def test_batched_groups_in_order_within_the_count_and_bytes() -> None:
    plain = _plain(37)
    sent = list(batched_messages(iter(plain), 16))
    assert [len(m.batch) for m in sent] == [16, 16, 5]
    assert [inner for m in sent for inner in m.batch] == plain
    large = _plain(6, size=UPLOAD_BATCH_BYTES // 3)
    big = list(batched_messages(iter(large), 16))
    assert len(big) > 1
    assert all(m.ByteSize() <= UPLOAD_BATCH_BYTES + 64 for m in big)
    assert [inner for m in big for inner in (m.batch or (m,))] == large
    one = _plain(1)
    assert list(batched_messages(iter(one), 16)) == one  # a group of one goes as the message itself


@pytest.mark.parametrize("batch", [1, 7, 16])
def test_upload_in_batches_acknowledges_each_record_once(client: PmlClient, batch: int) -> None:
    records = [
        make_record(f"upload {batch} {i}", f"await mcp.u{i % 3}()", tools=[f"u{i % 3}"])
        for i in range(40)
    ]
    report = client.upload(records, batch=batch)
    assert len(report.acks) == 40
    assert all(ack.HasField("result") for ack in report.acks.values())
    with pytest.raises(PmlClientError) as err:
        client.upload(records, batch=0)
    assert [field for field, _ in err.value.violations] == ["batch"]


@pytest.mark.parametrize("batch", [1, 16])
def test_upload_never_drops_a_record_whose_request_id_repeats(
    client: PmlClient, batch: int
) -> None:
    """Two different records under one request id: the upload keyed what it had sent by id, so
    the second replaced the first, the first's ack answered both and the server's refusal of
    the second was dropped as a repeat. The report said SAVED; the second record was stored
    nowhere and no error was seen. Now the id's answer is an error naming the field."""
    rid = f"repeated-{batch}"
    first = make_record("Read JSON file", "await mcp.read_file({p: 'a'})", tools=["read_file"])
    second = make_record("Send an email", "await mcp.send_mail({to: 'b'})", tools=["send_mail"])
    first.request_id = second.request_id = rid
    seen: list[Ack] = []
    report = client.upload([first, second], batch=batch, on_ack=seen.append)
    ack = report.acks[rid]
    assert ack.HasField("error"), ack
    assert ack.error.code in (
        grpc.StatusCode.INVALID_ARGUMENT.value[0],
        grpc.StatusCode.ALREADY_EXISTS.value[0],
    )
    assert any(a.HasField("result") for a in seen), seen  # the first was captured
    assert len(seen) == 2, seen
    assert [list(p.tools_used) for p in client.iter_patterns()] == [["read_file"]]


@pytest.mark.parametrize("batch", [1, 16])
def test_upload_raises_the_callers_own_error_after_storing_what_came_before(
    client: PmlClient, batch: int
) -> None:
    """The caller's records raised mid-upload (a source that broke): gRPC ran it in its request
    thread and the caller got PmlClientError UNKNOWN "Exception iterating requests!", its own
    error gone. Now the records read before it are acknowledged, then its error is raised."""

    def records() -> Iterator[r.ExecutionRecord]:
        for i in range(3):
            yield make_record(f"before the break {i}", f"await mcp.b{i}()", tools=[f"b{i}"])
        raise ValueError("the source broke at record 4")

    seen: list[Ack] = []
    with pytest.raises(ValueError, match="the source broke at record 4"):
        client.upload(records(), batch=batch, on_ack=seen.append)
    assert len(seen) == 3
    assert all(ack.HasField("result") for ack in seen), seen
    assert client.stats().patterns == 3


def test_raw_stream_raises_the_callers_own_error_after_the_acks(client: PmlClient) -> None:
    def requests() -> Iterator[Req]:
        rec = make_record("raw before the break", "await mcp.raw()", tools=["raw"])
        yield Req(execution_id="raw-1", sequence=1, record=rec)
        raise KeyError("the caller's bug")

    acks: list[Ack] = []
    with pytest.raises(KeyError, match="the caller's bug"):
        acks.extend(client.stream(requests()))
    assert [a.execution_id for a in acks] == ["raw-1"]
    assert acks[0].HasField("result")


class _OlderServer(pml_pb2_grpc.PmlServiceServicer):
    """A server from before batches: its GetServerInfo has no `stream_batch_limit` (or no
    GetServerInfo at all), and a batch message reaches it as one without an execution id."""

    def __init__(self, knows_server_info: bool) -> None:
        self.knows_server_info = knows_server_info
        self.messages = 0

    def GetServerInfo(  # noqa: N802 (the proto's method name)
        self, request: pml_pb2.GetServerInfoRequest, context: grpc.ServicerContext
    ) -> pml_pb2.GetServerInfoResponse:
        if not self.knows_server_info:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
        return pml_pb2.GetServerInfoResponse(server_version="0.0.9")

    def StreamTraces(  # noqa: N802 (the proto's method name)
        self, request_iterator: Iterator[Req], context: grpc.ServicerContext
    ) -> Iterator[Ack]:
        saved = r.CaptureResult(outcome=r.CAPTURE_OUTCOME_SAVED)
        for message in request_iterator:
            self.messages += 1
            if not message.execution_id:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "execution_id: must not be empty")
            yield Ack(execution_id=message.execution_id, sequence=message.sequence, result=saved)


@pytest.mark.parametrize("knows_server_info", [True, False])
def test_upload_to_a_server_older_than_batches_sends_a_record_a_message(
    knows_server_info: bool,
) -> None:
    older = _OlderServer(knows_server_info)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pml_pb2_grpc.add_PmlServiceServicer_to_server(older, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with PmlClient(f"127.0.0.1:{port}") as client:
            records = [make_record(f"old {i}", "await mcp.t()", tools=["t"]) for i in range(20)]
            report = client.upload(records)
        assert len(report.acks) == 20
        assert report.reconnects == 0
        assert older.messages == 20
    finally:
        server.stop(grace=None)


def test_upload_batches_to_the_servers_limit(client: PmlClient) -> None:
    assert client.server_info().stream_batch_limit == 256
    records = [make_record(f"lim {i}", "await mcp.t()", tools=["t"]) for i in range(300)]
    report = client.upload(records, batch=1000)  # more than the server takes: its 256
    assert len(report.acks) == 300


def test_a_record_over_the_servers_message_limit_is_refused_alone(start: StartServer) -> None:
    """A record whose message is larger than the server's `--max-message-bytes` (each of its
    fields within its own limit) is held back by the client and answered RESOURCE_EXHAUSTED,
    naming the field; the others go through on one stream. Before, the server ended the whole
    stream, and every reconnect sent the record again until the upload failed."""
    server = start(max_message_bytes=64 * 1024)
    big_arguments = '{"x": "' + "a" * 30_000 + '"}'
    records = [make_record(f"fits {i}", f"await mcp.fit{i}()", tools=[f"fit{i}"]) for i in range(6)]
    huge = make_record("huge", "await mcp.h()", tools=["h"] * 3, arguments_json=big_arguments)
    records.insert(3, huge)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert client.server_info().max_message_bytes == 64 * 1024
        report = client.upload(records)
        stats = client.stats()
    assert report.reconnects == 0
    assert len(report.acks) == 7
    refused = report.acks[huge.request_id]
    assert refused.error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert "over the server's --max-message-bytes of 65536" in refused.error.message
    [details] = refused.error.details
    bad = error_details_pb2.BadRequest()
    assert details.Unpack(bad)
    assert [v.field for v in bad.field_violations] == ["record"]
    others = [a for eid, a in report.acks.items() if eid != huge.request_id]
    assert all(a.HasField("result") for a in others)
    assert int(stats.executions) == 6


def test_batches_stay_under_a_small_message_limit(start: StartServer) -> None:
    """Batches are cut at the server's message limit when it is below `UPLOAD_BATCH_BYTES`:
    200 records of about 5 KiB into a 64 KiB limit all go through, batched."""
    server = start(max_message_bytes=64 * 1024)
    arguments = '{"x": "' + "b" * 5_000 + '"}'
    records = [
        make_record(f"mid {i}", f"await mcp.mid{i}()", tools=[f"mid{i}"], arguments_json=arguments)
        for i in range(200)
    ]
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        report = client.upload(records)
        stats = client.stats()
    assert report.reconnects == 0
    assert all(a.HasField("result") for a in report.acks.values())
    assert int(stats.executions) == 200


def test_a_batch_is_cut_at_its_byte_budget() -> None:
    messages = [
        Req(execution_id=f"e{i}", record=make_record(f"r{i}", "x" * 900)) for i in range(40)
    ]
    budget = 10_000
    sent = list(batched_messages(iter(messages), size=1000, max_bytes=budget))
    assert len(sent) > 1
    assert all(m.ByteSize() <= budget for m in sent)
    assert [e.execution_id for m in sent for e in (m.batch or [m])] == [f"e{i}" for i in range(40)]
