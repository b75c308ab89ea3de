"""Every status code the API promises, with field paths in BadRequest for invalid input.
A client mistake never comes back UNKNOWN or INTERNAL."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc
from pml_server._proto.pml.v1 import resources_pb2 as r
from pml_server.api.logs import JsonFormatter
from pml_server.api.security.page_tokens import PageTokens
from pml_server.client import PmlClient, PmlClientError, make_record
from pml_server.config import config_of
from tests.conftest import StartServer
from tests.support import open_engine

OK_CODE = "await mcp.read_file({path: 'a'})"


def _fails(call: object, code: grpc.StatusCode) -> PmlClientError:
    assert callable(call)
    with pytest.raises(PmlClientError) as err:
        call()
    assert err.value.code is code, err.value
    return err.value


def _fields(err: PmlClientError) -> set[str]:
    return {field for field, _ in err.violations}


def test_empty_intent_names_the_field(client: PmlClient) -> None:
    err = _fails(
        lambda: client.record(make_record("  ", OK_CODE, tools=["read_file"])),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _fields(err) == {"record.intent"}


def test_every_bad_field_is_listed_at_once(client: PmlClient) -> None:
    record = make_record("", "", language="")
    err = _fails(lambda: client.record(record), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"record.intent", "record.code", "record.language"}


@pytest.mark.parametrize("duration", [-1.0, math.inf, math.nan])
def test_duration_must_be_finite_and_not_negative(client: PmlClient, duration: float) -> None:
    record = make_record("x", OK_CODE, tools=["read_file"])
    record.duration_ms = duration
    err = _fails(lambda: client.record(record), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"record.duration_ms"}


def test_oversized_code_uses_the_configured_limit(start: StartServer) -> None:
    server = start(max_code_bytes=1024)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        client.record(make_record("fits", "x" * 1024, tools=["t"]))
        err = _fails(
            lambda: client.record(make_record("big", "x" * 1025, tools=["t"])),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
    assert _fields(err) == {"record.code"}
    assert "1025 bytes" in err.violations[0][1]


def test_too_many_tool_calls(start: StartServer) -> None:
    server = start(max_tool_calls=4)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        err = _fails(
            lambda: client.record(make_record("many", OK_CODE, tools=["t"] * 5)),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
    assert _fields(err) == {"record.tool_calls"}


def test_bad_tool_call_fields_have_indexed_paths(client: PmlClient) -> None:
    record = make_record("x", OK_CODE, tools=["read_file"])
    record.tool_calls.add(tool="", ok=True, arguments_json="{not json")
    err = _fails(lambda: client.record(record), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"record.tool_calls[1].tool", "record.tool_calls[1].arguments_json"}


def test_embedding_dimension_and_finite_values(client: PmlClient) -> None:
    dim = client.server_info().embedding_dimension
    wrong = make_record("x", OK_CODE, tools=["t"])
    wrong.intent_embedding.extend([0.1] * (dim + 1))
    err = _fails(lambda: client.record(wrong), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"record.intent_embedding"}
    nan = make_record("x", OK_CODE, tools=["t"])
    nan.intent_embedding.extend([0.1] * (dim - 1) + [math.nan])
    err = _fails(lambda: client.record(nan), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {f"record.intent_embedding[{dim - 1}]"}
    err = _fails(
        lambda: client.suggest("x", intent_embedding=[math.inf] * dim),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _fields(err) == {"intent_embedding[0]"}


def test_an_unknown_execution_status_is_refused(client: PmlClient, channel: grpc.Channel) -> None:
    """Status 7 (no such ExecutionStatus; a newer client's, say) was read as unset: the
    execution was counted a success because its tool calls succeeded."""
    record = make_record("read a file", OK_CODE, tools=["read_file"])
    record.status = 7
    err = _fails(lambda: client.record(record), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"record.status"}
    assert client.stats().executions == 0
    started = pml_pb2.ExecutionStarted(intent="read a file", code=OK_CODE, language="typescript")
    messages = [
        pml_pb2.StreamTracesRequest(execution_id="live", sequence=1, started=started),
        pml_pb2.StreamTracesRequest(
            execution_id="live",
            sequence=2,
            tool_call_finished=pml_pb2.ToolCallFinished(
                tool_call=r.ToolCall(tool="read_file", ok=True)
            ),
        ),
        pml_pb2.StreamTracesRequest(
            execution_id="live",
            sequence=3,
            finished=pml_pb2.ExecutionFinished(status=r.ExecutionStatus.ValueType(5)),
        ),
    ]
    (ack,) = pml_pb2_grpc.PmlServiceStub(channel).StreamTraces(iter(messages), timeout=30)
    assert ack.HasField("error"), ack
    assert "finished.status" in ack.error.message
    assert client.stats().executions == 0


@pytest.mark.parametrize(
    ("seconds", "nanos"), [(0, -1), (0, 1_000_000_000), (2**62, 0), (-62_135_596_801, 0)]
)
def test_a_timestamp_out_of_range_is_refused_by_name(
    client: PmlClient, channel: grpc.Channel, seconds: int, nanos: int
) -> None:
    """A Timestamp outside its range (nanos -1, seconds 2^62, before year 1) was taken without a
    word, on a record, a tool call and a live execution alike; each is refused naming it."""
    bad = Timestamp(seconds=seconds, nanos=nanos)
    record = make_record("read a file", OK_CODE, tools=["read_file"])
    record.start_time.CopyFrom(bad)
    record.tool_calls[0].start_time.CopyFrom(bad)
    err = _fails(lambda: client.record(record), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"record.start_time", "record.tool_calls[0].start_time"}
    started = pml_pb2.ExecutionStarted(
        intent="read a file", code=OK_CODE, language="typescript", start_time=bad
    )
    message = pml_pb2.StreamTracesRequest(execution_id="live", sequence=1, started=started)
    (ack,) = pml_pb2_grpc.PmlServiceStub(channel).StreamTraces(iter([message]), timeout=30)
    assert ack.error.message.startswith("started.start_time: is not a valid Timestamp"), ack
    assert client.stats().executions == 0


@pytest.mark.parametrize("k", [-1, 101])
def test_k_out_of_range(client: PmlClient, k: int) -> None:
    err = _fails(lambda: client.suggest("read", k=k), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"page_size"}


def test_suggest_checks_intent_and_thresholds(client: PmlClient) -> None:
    err = _fails(lambda: client.suggest("", min_success=1.5), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"intent", "min_success"}


@pytest.mark.parametrize(
    ("tools", "field"),
    [
        (["read_file", ""], "available_tools.tools[1]"),
        (["  "], "available_tools.tools[0]"),
        (["read_file", "t" * 257], "available_tools.tools[1]"),
    ],
)
def test_available_tool_names_are_checked_one_by_one(
    client: PmlClient, tools: list[str], field: str
) -> None:
    """Each name of `available_tools` is a tool name (not blank, at most as long as a recorded
    tool's), named by its index like `context.previous_tools[i]`."""
    err = _fails(
        lambda: client.suggest("read", available_tools=tools), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert _fields(err) == {field}


@pytest.mark.parametrize("token", ["garbage", "a.b", "x" * 5000, "é.é"])
def test_malformed_page_token(client: PmlClient, token: str) -> None:
    err = _fails(lambda: client.list_patterns(page_token=token), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"page_token"}


def test_tampered_and_foreign_page_tokens(client: PmlClient) -> None:
    for i in range(3):
        client.record(make_record(f"t{i}", f"await mcp.t{i}()", tools=[f"t{i}"]))
    token = client.list_patterns(page_size=1).next_page_token
    payload, mac = token.split(".")
    tampered = payload[:-1] + ("A" if payload[-1] != "A" else "B") + "." + mac
    _fails(lambda: client.list_patterns(page_token=tampered), grpc.StatusCode.INVALID_ARGUMENT)
    # A token for one listing is not accepted by another.
    _fails(lambda: client.list_capabilities(page_token=token), grpc.StatusCode.INVALID_ARGUMENT)
    # A token signed with another secret (another server) is refused.
    forged = PageTokens(b"k" * 32).encode("default", "patterns", "1")
    _fails(lambda: client.list_patterns(page_token=forged), grpc.StatusCode.INVALID_ARGUMENT)


@pytest.mark.parametrize("page_size", [-1, 1001])
def test_page_size_out_of_range(client: PmlClient, page_size: int) -> None:
    err = _fails(
        lambda: client.list_failures(page_size=page_size), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert _fields(err) == {"page_size"}


@pytest.mark.parametrize("name", ["", "abc", "capabilities/x", "patterns/", "patterns/a/b"])
def test_malformed_resource_name(client: PmlClient, name: str) -> None:
    err = _fails(lambda: client.get_pattern(name), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"name"}


@pytest.mark.parametrize("name", ["patterns/" + "x" * 100_000, "capabilities/" + "\u00e9" * 3_000])
def test_a_huge_bad_name_still_gets_its_field(client: PmlClient, name: str) -> None:
    """The status echoes the name: unbounded, its trailers passed the client's metadata limit
    and the caller got RESOURCE_EXHAUSTED "received metadata size exceeds ..." (and retried)."""
    err = _fails(lambda: client.get_pattern(name), grpc.StatusCode.INVALID_ARGUMENT)
    assert _fields(err) == {"name"}
    assert len(err.message) <= 2048


@pytest.mark.parametrize("how", ["blank tools", "bad tool calls"])
def test_a_thousand_violations_still_get_a_status(client: PmlClient, how: str) -> None:
    """Every violation listed, unbounded, made trailers of 48 kB (1024 blank tool names) or
    63 kB (256 bad tool calls): the client dropped them and saw RESOURCE_EXHAUSTED. The first
    violations come back, and the message says how many were left out."""
    if how == "blank tools":
        err = _fails(
            lambda: client.suggest("read", available_tools=[""] * 1024),
            grpc.StatusCode.INVALID_ARGUMENT,
        )
        first = "available_tools.tools[0]"
    else:
        record = make_record("x", OK_CODE, tools=["read_file"])
        del record.tool_calls[:]
        record.tool_calls.extend(
            r.ToolCall(tool="", arguments_json="{", duration_ms=-1) for _ in range(256)
        )
        err = _fails(lambda: client.record(record), grpc.StatusCode.INVALID_ARGUMENT)
        first = "record.tool_calls[0].tool"
    assert err.violations[0][0] == first
    assert 1 < len(err.violations) < 200
    assert err.message.endswith("more invalid fields")


def test_not_found(client: PmlClient) -> None:
    _fails(lambda: client.get_pattern("patterns/nope"), grpc.StatusCode.NOT_FOUND)
    _fails(lambda: client.get_capability("capabilities/nope"), grpc.StatusCode.NOT_FOUND)
    _fails(lambda: client.delete_pattern("patterns/nope"), grpc.StatusCode.NOT_FOUND)
    _fails(lambda: client.delete_capability("capabilities/nope"), grpc.StatusCode.NOT_FOUND)


def test_a_refusal_quotes_the_request_to_the_caller_never_to_the_log(
    client: PmlClient, caplog: pytest.LogCaptureFixture
) -> None:
    """A refusal's message may quote what the caller sent (a bad name, an unknown id, a reused
    request id): the caller's own, in the answer. The log line of the refusal (`rpc failed`)
    quoted it too, so a secret a caller put there was written to the server's log. The line
    names the method, the code and the invalid fields only (docs/operations.md, Secrets
    outside the store)."""
    secret = "sk-live-ab12cd34ef56ab12cd34ef56"
    caplog.set_level(logging.INFO, logger="pml")
    bad = _fails(
        lambda: client.get_pattern(f"patterns/{secret}/x"), grpc.StatusCode.INVALID_ARGUMENT
    )
    assert secret in bad.message
    _fails(lambda: client.get_pattern(f"patterns/{secret}"), grpc.StatusCode.NOT_FOUND)
    # a caller's own request id, quoted back when reused
    own = "acme-invoice-2026-4711"
    client.record(make_record("Read JSON file", OK_CODE, tools=["read_file"], request_id=own))
    again = make_record("Read a file", OK_CODE, tools=["read_file"], request_id=own)
    _fails(lambda: client.record(again), grpc.StatusCode.ALREADY_EXISTS)
    # a request id holding a credential is refused (docs/api.md, Requests)
    leaked = make_record("Read a file", OK_CODE, tools=["read_file"], request_id=secret)
    _fails(lambda: client.record(leaked), grpc.StatusCode.INVALID_ARGUMENT)
    lines = [JsonFormatter().format(r) for r in caplog.records if r.getMessage() == "rpc failed"]
    assert [json.loads(line)["code"] for line in lines] == [
        "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "INVALID_ARGUMENT"
    ]  # fmt: skip
    assert not [line for line in lines if secret in line or own in line]
    assert json.loads(lines[0])["fields"] == ["name"]
    assert json.loads(lines[3])["fields"] == ["record.request_id"]


def test_unauthenticated_and_permission_denied(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    path, found = keys
    server = start(keys_file=path)
    target = f"127.0.0.1:{server.port}"
    with PmlClient(target) as anonymous:
        _fails(anonymous.stats, grpc.StatusCode.UNAUTHENTICATED)
    with PmlClient(target, api_key="pml_not-a-key") as stranger:
        _fails(stranger.stats, grpc.StatusCode.UNAUTHENTICATED)
    record = make_record("Read JSON file", OK_CODE, tools=["read_file"])
    with PmlClient(target, api_key=found["acme-read"]) as reader:
        assert reader.stats().patterns == 0
        _fails(lambda: reader.record(record), grpc.StatusCode.PERMISSION_DENIED)
        _fails(lambda: reader.run_retention(apply=True), grpc.StatusCode.PERMISSION_DENIED)
        reader.run_retention(apply=False)
    with PmlClient(target, api_key=found["acme-write"]) as writer:
        pattern = writer.record(record).pattern
        _fails(lambda: writer.delete_pattern(pattern), grpc.StatusCode.PERMISSION_DENIED)
        # The stream knows the request id the unary call used: nothing counted twice.
        assert next(iter(writer.upload([record]).acks.values())).result.replayed
    with PmlClient(target, api_key=found["acme-read"]) as reader:
        _fails(lambda: reader.upload([record]), grpc.StatusCode.PERMISSION_DENIED)
    with PmlClient(target, api_key=found["acme-admin"]) as admin:
        admin.delete_pattern(pattern)


def test_oversized_message_is_resource_exhausted(start: StartServer) -> None:
    server = start(max_message_bytes=64 * 1024)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        _fails(
            lambda: client.record(make_record("big", "x" * 100_000, tools=["t"])),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        )


def test_unavailable_while_index_catches_up(start: StartServer, data_dir: Path) -> None:
    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    engine._state.readiness.clear()  # as while the indexes are restored at open
    server = start(engine=engine)
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        err = _fails(lambda: client.suggest("read"), grpc.StatusCode.UNAVAILABLE)
        assert "catching up" in err.message
        engine._state.readiness.set_ready()
        assert client.record(make_record("read", OK_CODE, tools=["t"])).pattern
        client.suggest("read")


def test_unavailable_while_draining(server: object, client: PmlClient) -> None:
    from pml_server.api.server import RunningServer

    assert isinstance(server, RunningServer)
    server.servicer.draining.set()
    err = _fails(client.stats, grpc.StatusCode.UNAVAILABLE)
    assert "shutting down" in err.message


def test_stream_protocol_violation_ends_stream_with_field(client: PmlClient) -> None:
    record = make_record("r", OK_CODE, tools=["t"])
    requests = [
        pml_pb2.StreamTracesRequest(execution_id="a", sequence=5, record=record),
        pml_pb2.StreamTracesRequest(execution_id="b", sequence=5, record=record),
    ]
    with pytest.raises(PmlClientError) as err:
        list(client.stream(requests))
    assert err.value.code is grpc.StatusCode.INVALID_ARGUMENT
    assert _fields(err.value) == {"sequence"}


def test_no_client_mistake_is_internal(client: PmlClient) -> None:
    """A grab bag of malformed requests: each is refused with a client-facing code."""
    calls = [
        lambda: client.record(r.ExecutionRecord()),
        lambda: client.record(make_record("x", OK_CODE, tools=["t"] * 300)),
        lambda: client.suggest(""),
        lambda: client.suggest("x", min_match=math.nan),
        lambda: client.list_capabilities(page_token="...."),
        lambda: client.get_capability("capabilities/../../etc"),
        lambda: client.delete_pattern("patterns/\x00"),
    ]
    for call in calls:
        with pytest.raises(PmlClientError) as err:
            call()
        assert err.value.code not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xff\xff\xff",  # truncated varint tag
        b"\x12\x05ab",  # length past the end
        b"\x0b" * 200 + b"\x0c" * 200,  # groups nested past the parser's depth limit
        pml_pb2.SuggestRequest(intent="ok").SerializeToString()[:-1],
    ],
)
def test_undecodable_bytes_are_invalid_argument(channel: grpc.Channel, raw: bytes) -> None:
    record = channel.unary_unary("/pml.v1.PmlService/RecordExecution")
    suggest = channel.unary_unary("/pml.v1.PmlService/Suggest")
    for call in (record, suggest):
        with pytest.raises(grpc.RpcError) as err:
            call(raw, timeout=5)
        code = err.value.code()  # type: ignore[attr-defined]
        assert code is grpc.StatusCode.INVALID_ARGUMENT, (raw, code, err.value)


def test_undecodable_stream_message_is_invalid_argument(channel: grpc.Channel) -> None:
    stream = channel.stream_stream("/pml.v1.PmlService/StreamTraces")
    with pytest.raises(grpc.RpcError) as err:
        list(stream(iter([b"\xff\xff\xff"]), timeout=5))
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]


def test_intent_without_words_and_zero_embedding(client: PmlClient) -> None:
    err = _fails(
        lambda: client.record(make_record("!!! 🙂", OK_CODE, tools=["t"])),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _fields(err) == {"record.intent"}
    dim = client.server_info().embedding_dimension
    err = _fails(
        lambda: client.suggest("read", intent_embedding=[0.0] * dim),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert _fields(err) == {"intent_embedding"}


def test_gzip_bomb_is_resource_exhausted(channel: grpc.Channel) -> None:
    """20 MB of zeros compress to about 20 kB; the size limit applies after decompression."""
    request = pml_pb2.RecordExecutionRequest(
        record=make_record("bomb", "0" * (20 * 1024 * 1024), tools=["t"])
    )
    record = pml_pb2_grpc.PmlServiceStub(channel).RecordExecution
    assert len(request.SerializeToString()) > 8 * 1024 * 1024
    with pytest.raises(grpc.RpcError) as err:
        record(request, timeout=30, compression=grpc.Compression.Gzip)
    assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
