"""OTLP/HTTP ingest end to end: a real pml server (port 0, RocksDB on disk) with
`otlp_http_listen`, spans sent by the OpenTelemetry SDK's own OTLP/HTTP exporter (protobuf,
gzip or not) and by hand as OTLP/JSON, then read back as patterns; bad requests answered with
the HTTP status and `google.rpc.Status` body the OTLP specification names."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import json
import re
import resource
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import zlib
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.trace import Tracer

from pml_server.api import http_body, http_deadline, otlp_http
from pml_server.api.otlp_http import (
    JSON,
    PROTOBUF,
    PROTOBUF_REGISTERED,
    OtlpHttpApp,
    from_json,
)
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, make_record
from pml_server.domain.limits import LIMITS
from testing.otlp_spans import recorded
from tests.api.test_operations import pki  # noqa: F401  (the throwaway CA fixture)
from tests.api.test_otlp_ingest import exporting_to
from tests.conftest import StartServer
from tests.support import eventually, npm_ci, spawn_pml_serve, stop_pml_serve

JS = Path(__file__).resolve().parents[1] / "otel" / "js"


@pytest.fixture
def server(start: StartServer) -> RunningServer:
    return start(otlp_http_listen="127.0.0.1:0")


def _url(server: RunningServer) -> str:
    assert server.otlp_http is not None
    return f"http://127.0.0.1:{server.otlp_http.port}/v1/traces"


def _exporting(
    server: RunningServer, compression: Compression = Compression.NoCompression
) -> AbstractContextManager[Tracer]:
    exporter = OTLPSpanExporter(endpoint=_url(server), compression=compression)
    return exporting_to(exporter, "http-agent")


def _run(tracer: Tracer, intent: str, tool: str, args: dict[str, object]) -> None:
    messages = [{"role": "user", "parts": [{"type": "text", "content": intent}]}]
    with (
        tracer.start_as_current_span(
            "invoke_agent files",
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.input.messages": json.dumps(messages),
            },
        ),
        tracer.start_as_current_span(
            f"execute_tool {tool}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.arguments": json.dumps(args),
            },
        ),
    ):
        pass


def _post(
    server: RunningServer, body: bytes, headers: dict[str, str], method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(_url(server), data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, dict(err.headers), err.read()


@pytest.mark.parametrize(
    "compression", [Compression.NoCompression, Compression.Gzip, Compression.Deflate]
)
def test_the_sdk_http_exporter_runs_become_one_pattern(
    server: RunningServer, client: PmlClient, compression: Compression
) -> None:
    with _exporting(server, compression) as tracer:
        _run(tracer, "Read the JSON file", "read_file", {"path": "a.json"})
        _run(tracer, "Load the JSON file", "read_file", {"path": "b.json"})
    patterns = list(client.iter_patterns())
    assert [(p.template.strip(), p.usage_count) for p in patterns] == [
        ('await mcp.read_file({"path": $PATH});', 2)
    ]
    assert client.suggest("read a json file").suggestions[0].pattern.name == patterns[0].name


def _json_run(trace: str, intent: str) -> dict[str, object]:
    def attr(key: str, value: str) -> dict[str, object]:
        return {"key": key, "value": {"stringValue": value}}

    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": intent}]}])
    root, call = "1" * 16, "2" * 16
    spans = [
        {
            "traceId": trace,
            "spanId": root,
            "name": "invoke_agent",
            "kind": 1,
            "startTimeUnixNano": "1700000000000000000",
            "endTimeUnixNano": "1700000001000000000",
            "attributes": [
                attr("gen_ai.operation.name", "invoke_agent"),
                attr("gen_ai.input.messages", messages),
            ],
        },
        {
            "traceId": trace,
            "spanId": call,
            "parentSpanId": root,
            "name": "execute_tool convert",
            "startTimeUnixNano": "1700000000100000000",
            "endTimeUnixNano": "1700000000900000000",
            "attributes": [
                attr("gen_ai.operation.name", "execute_tool"),
                attr("gen_ai.tool.name", "convert"),
                attr("gen_ai.tool.call.arguments", '{"path": "in.png"}'),
            ],
            "status": {"code": 1},
            "futureField": {"ignored": True},  # unknown fields are ignored (OTLP/JSON)
        },
    ]
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def test_otlp_json_with_hex_ids_is_captured_and_answered_in_json(
    server: RunningServer, client: PmlClient
) -> None:
    body = json.dumps(_json_run("ab" * 16, "Convert the picture")).encode()
    status, headers, answer = _post(server, body, {"Content-Type": "application/json"})
    assert status == 200, answer
    assert headers["content-type"] == "application/json"
    assert json.loads(answer) == {}  # every span taken: no partial success
    [pattern] = list(client.iter_patterns())
    assert pattern.template.strip() == 'await mcp.convert({"path": $PATH});'
    # The same Export again (a retry) is the same execution: counted once.
    status, _, _ = _post(server, gzip.compress(body), {
        "Content-Type": "application/json", "Content-Encoding": "gzip"
    })  # fmt: skip
    assert status == 200
    assert client.get_pattern(pattern.name).usage_count == 1


def test_a_lone_surrogate_in_otlp_json_is_replaced_not_refused(
    server: RunningServer, client: PmlClient
) -> None:
    """The JavaScript SDK's JSON exporter writes a string cut inside an emoji (its attribute
    length limit cuts UTF-16 code units) as `JSON.stringify` does: a lone `\\ud83d` escape,
    no character. Before: no protobuf string can hold it and the whole Export was refused 400,
    every run in it lost. Now it becomes U+FFFD, as a UTF-8 decoder replaces a broken
    sequence."""
    run = _json_run("ef" * 16, "unused")
    spans = run["resourceSpans"][0]["scopeSpans"][0]["spans"]  # type: ignore[index]
    spans[0]["name"] = "invoke_agent \ud83d"
    spans[0]["attributes"] = [
        {"key": "gen_ai.operation.name", "value": {"stringValue": "invoke_agent"}},
        {"key": "gen_ai.agent.name", "value": {"stringValue": "Picture converter \ud83d"}},
    ]
    body = json.dumps(run).encode()
    assert b"\\ud83d" in body  # (what JSON.stringify writes for it)
    status, _, answer = _post(server, body, {"Content-Type": "application/json"})
    assert status == 200, answer
    assert json.loads(answer) == {}
    [pattern] = list(client.iter_patterns())
    assert [i.text for i in pattern.intents] == ["Picture converter \ufffd"]


def test_a_protobuf_string_that_is_not_utf8_does_not_refuse_the_export(
    server: RunningServer, client: PmlClient
) -> None:
    """As on the gRPC port (`test_otlp_ingest.py`): a Latin-1 byte in the agent span's name,
    400 for the whole Export before, now U+FFFD and the run captured."""
    raw = from_json(json.dumps(_json_run("fa" * 16, "Convert the picture")).encode())
    body = raw.SerializeToString().replace(b"invoke_agent", b"invoke_ag\xe9nt")
    status, _, answer = _post(server, body, {"Content-Type": "application/x-protobuf"})
    assert status == 200, answer
    [pattern] = list(client.iter_patterns())
    assert pattern.usage_count == 1


def test_an_otlp_json_attribute_nested_past_the_parsers_bound_is_cut(
    server: RunningServer, client: PmlClient
) -> None:
    """As on the gRPC port (`test_otlp_ingest.py`): a tool span's attribute, a kvlist nested
    40 deep (the JSON mapping refuses a message nested past 100). Before: 400 for the whole
    Export; now the value is cut where it nests too deep and the run is captured."""
    run = _json_run("fb" * 16, "Convert the picture")
    deep: dict[str, object] = {"stringValue": "bottom"}
    for _ in range(40):
        deep = {"kvlistValue": {"values": [{"key": "k", "value": deep}]}}
    spans = run["resourceSpans"][0]["scopeSpans"][0]["spans"]  # type: ignore[index]
    spans[1]["attributes"].append({"key": "mcp.result", "value": deep})
    status, _, answer = _post(
        server, json.dumps(run).encode(), {"Content-Type": "application/json"}
    )
    assert status == 200, answer
    assert json.loads(answer) == {}
    [pattern] = list(client.iter_patterns())
    assert pattern.usage_count == 1


def test_a_partial_success_is_answered_in_the_request_encoding(server: RunningServer) -> None:
    run = _json_run("cd" * 16, "Convert the picture")
    spans = run["resourceSpans"][0]["scopeSpans"][0]["spans"]  # type: ignore[index]
    spans[1]["attributes"][2]["value"]["stringValue"] = "not json"
    status, _, answer = _post(
        server, json.dumps(run).encode(), {"Content-Type": "application/json"}
    )
    assert status == 200
    partial = json.loads(answer)["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 2
    assert partial["errorMessage"]


def _status(body: bytes) -> status_pb2.Status:
    status = status_pb2.Status()
    status.ParseFromString(body)
    return status


@pytest.mark.parametrize(
    ("body", "headers", "field"),
    [
        (b"\xff\x00garbage", {"Content-Type": "application/x-protobuf"}, "body"),
        (b"{not json", {"Content-Type": "application/json"}, "body"),
        (
            json.dumps(_json_run("zz" * 16, "x")).encode(),
            {"Content-Type": "application/json"},
            "resourceSpans[0].scopeSpans[0].spans[0].traceId",
        ),
        (
            b"not gzip",
            {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            "body",
        ),
    ],
)
def test_a_bad_body_is_400_with_a_status_naming_the_field(
    server: RunningServer, body: bytes, headers: dict[str, str], field: str
) -> None:
    status, got, answer = _post(server, body, headers)
    assert status == 400
    if got["content-type"] == "application/json":
        message = json.loads(answer)["message"]
    else:
        message = _status(answer).message
    assert field in message


def test_a_bad_value_deep_in_otlp_json_is_named_with_its_reason(server: RunningServer) -> None:
    """An `intValue` that is no integer inside a kvlist of an event's attributes. Before: the
    JSON mapping's message, one `Failed to parse X field: ` per level, was cut at 300
    characters before the reason: the answer never said what was wrong."""
    run = _json_run("ce" * 16, "Convert the picture")
    bad = {"kvlistValue": {"values": [{"key": "n", "value": {"intValue": "twelve"}}]}}
    spans = run["resourceSpans"][0]["scopeSpans"][0]["spans"]  # type: ignore[index]
    spans[1]["events"] = [{"name": "retry", "attributes": [{"key": "k", "value": bad}]}]
    status, _, answer = _post(
        server, json.dumps(run).encode(), {"Content-Type": "application/json"}
    )
    assert status == 400
    [violation] = json.loads(answer)["details"][0]["fieldViolations"]
    assert violation["field"] == (
        "body.resourceSpans.scopeSpans.spans.events.attributes.value.values.value.intValue"
    )
    assert "'twelve'" in violation["description"]


def _answered(server: RunningServer, status: int) -> float:
    value = server.metrics.registry.get_sample_value(
        "pml_otlp_http_requests_total", {"status": str(status)}
    )
    return value or 0.0


def test_other_media_types_methods_and_paths_are_refused(server: RunningServer) -> None:
    assert _post(server, b"x", {"Content-Type": "text/plain"})[0] == 415
    assert _post(server, b"x", {"Content-Type": "application/x-protobuf",
                                "Content-Encoding": "br"})[0] == 415  # fmt: skip
    status, headers, _ = _post(server, b"", {}, method="GET")
    assert status == 405
    assert headers["allow"] == "POST"
    request = urllib.request.Request(_url(server).replace("/v1/traces", "/v1/metrics"), data=b"")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    with err.value:
        assert err.value.code == 404
    assert (_answered(server, 415), _answered(server, 405), _answered(server, 404)) == (2, 1, 1)


def test_a_415_body_is_a_status_naming_the_header(server: RunningServer) -> None:
    """The OTLP/HTTP specification ("Failures"): the body of every 4xx answer to an Export is a
    `google.rpc.Status`, in the request's encoding. Before: a 415 was answered in plain text."""
    status, headers, answer = _post(server, b"x", {"Content-Type": "text/plain"})
    assert (status, headers["content-type"]) == (415, PROTOBUF)
    refused = _status(answer)
    assert refused.message.startswith("Content-Type: 'text/plain' is not taken")
    assert "application/json" in refused.message
    status, headers, answer = _post(
        server, b"{}", {"Content-Type": "application/json", "Content-Encoding": "br"}
    )
    assert (status, headers["content-type"]) == (415, "application/json")
    assert json.loads(answer)["message"].startswith("Content-Encoding: 'br' is not taken")


def test_the_registered_protobuf_media_type_is_taken_and_answered_in_it(
    server: RunningServer, client: PmlClient
) -> None:
    """`application/protobuf` is the registered name of OTLP's binary encoding (RFC 9996, which
    lists `application/x-protobuf` as its deprecated alias). Before: refused 415."""
    spans = recorded(lambda t: _run(t, "Read the JSON file", "read_file", {"path": "a.json"}))
    body = encode_spans(spans).SerializeToString()
    status, headers, answer = _post(server, body, {"Content-Type": "Application/Protobuf"})
    assert (status, headers["content-type"]) == (200, PROTOBUF_REGISTERED)
    assert ExportTraceServiceResponse.FromString(answer) == ExportTraceServiceResponse()
    (pattern,) = client.iter_patterns()
    assert pattern.template.strip() == 'await mcp.read_file({"path": $PATH});'
    status, headers, answer = _post(server, b"\xff\x00", {"Content-Type": PROTOBUF_REGISTERED})
    assert (status, headers["content-type"]) == (400, PROTOBUF_REGISTERED)
    assert _status(answer).message.startswith("body: not a protobuf")
    status, _, answer = _post(server, b"x", {"Content-Type": "application/protobuf+json"})
    assert status == 415
    assert all(taken in _status(answer).message for taken in (PROTOBUF, PROTOBUF_REGISTERED))


@pytest.mark.parametrize(
    "content_type", ["Application/JSON", "APPLICATION/JSON;charset=UTF-8", "text/plain"]
)
def test_a_413_is_answered_in_the_request_encoding_whatever_its_letter_case(
    start: StartServer, content_type: str
) -> None:
    """Media types are case-insensitive (RFC 9110, section 8.3.1) and the answer is in the
    request's encoding (OTLP/HTTP). Before: a body over the limit sent as `Application/JSON`
    was answered in binary protobuf."""
    server = start(otlp_http_listen="127.0.0.1:0", max_message_bytes=64 * 1024)
    status, headers, answer = _post(server, b"[" * (65 * 1024), {"Content-Type": content_type})
    assert status == 413
    if content_type == "text/plain":  # not taken: binary protobuf, as for its 415
        assert headers["content-type"] == PROTOBUF
        assert _status(answer).message.startswith("the body is over 65536 bytes")
    else:
        assert headers["content-type"] == "application/json"
        assert json.loads(answer)["message"].startswith("the body is over 65536 bytes")


def test_too_large_bodies_are_413_before_or_after_gzip(start: StartServer) -> None:
    server = start(otlp_http_listen="127.0.0.1:0", max_message_bytes=64 * 1024)
    headers = {"Content-Type": "application/x-protobuf"}
    assert _post(server, b"\x0a" * (65 * 1024), headers)[0] == 413
    bomb = gzip.compress(b"\x00" * (10 * 1024 * 1024))  # 10 KB that inflate to 10 MB
    status, _, answer = _post(server, bomb, {**headers, "Content-Encoding": "gzip"})
    assert status == 413
    assert "inflates past" in _status(answer).message


def test_a_body_far_over_the_limit_is_413_to_a_client_that_sends_it_whole_first(
    server: RunningServer,
) -> None:
    """urllib (http.client) sends a whole body before it reads an answer: the server answered
    413 after the first 8 MiB of 20 and closed with the rest unread, so the client's send was
    reset (`ConnectionResetError`) and the 413 never read. The rest is now read and dropped
    (up to `DRAIN_BYTES`), then answered."""
    body = b"\x0a" * (20 * 1024 * 1024)
    status, _, answer = _post(server, body, {"Content-Type": "application/x-protobuf"})
    assert status == 413
    assert _status(answer).message.startswith("the body is over 8388608 bytes")
    assert len(body) < 8388608 + http_body.DRAIN_BYTES


def test_every_member_of_a_gzip_body_is_read(server: RunningServer, client: PmlClient) -> None:
    """A gzip body of two members (RFC 1952: members in a row are one stream, as
    `cat a.gz b.gz` makes), each an Export's protobuf bytes (which join as one message).
    Before: only the first member was read, the second run answered 200 and never captured;
    bytes after the last member that are no member were dropped as well, now 400."""
    first, second = (
        from_json(json.dumps(_json_run(trace, "Convert the picture")).encode())
        for trace in ("a1" * 16, "b2" * 16)
    )
    body = gzip.compress(first.SerializeToString()) + gzip.compress(second.SerializeToString())
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    status, _, answer = _post(server, body, headers)
    assert status == 200, answer
    [pattern] = list(client.iter_patterns())
    assert pattern.usage_count == 2
    status, _, answer = _post(server, gzip.compress(first.SerializeToString()) + b"junk", headers)
    assert status == 400
    assert _status(answer).message.startswith("body: not gzip")


def test_a_deflate_body_is_read_and_bounded_as_gzip_is(start: StartServer) -> None:
    """`Content-Encoding: deflate` is the zlib format (RFC 9110, section 8.4.1.2), what the
    SDK's exporter sends with `Compression.Deflate` (`OTEL_EXPORTER_OTLP_COMPRESSION=deflate`).
    Before: refused 415, which the exporter does not retry: every span lost. Now inflated,
    within `max_message_bytes` as gzip is; bytes after the stream, or a body that is no
    zlib stream, are 400 naming the body."""
    server = start(otlp_http_listen="127.0.0.1:0", max_message_bytes=64 * 1024)
    run = from_json(json.dumps(_json_run("a7" * 16, "Convert the picture")).encode())
    headers = {"Content-Type": PROTOBUF, "Content-Encoding": "deflate"}
    status, _, answer = _post(server, zlib.compress(run.SerializeToString()), headers)
    assert status == 200, answer
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert [p.usage_count for p in client.iter_patterns()] == [1]
    status, _, answer = _post(server, zlib.compress(b"\x00" * (1 << 20)), headers)
    assert status == 413
    assert "inflates past 65536 bytes" in _status(answer).message
    status, _, answer = _post(server, zlib.compress(run.SerializeToString()) + b"junk", headers)
    assert (status, _status(answer).message) == (400, "body: bytes after the deflate stream")
    status, _, answer = _post(server, gzip.compress(run.SerializeToString()), headers)
    assert status == 400
    assert _status(answer).message.startswith("body: not deflate")


def test_a_gzip_body_of_too_many_members_is_413_naming_the_body(
    server: RunningServer, client: PmlClient
) -> None:
    """Each gzip member was inflated from a copy of the rest of the body: a 4 MB body of 200k
    empty members held an Export thread for 29 s. Members past `limits.gzip_members` are
    refused 413 before being read; a body of exactly that many is still captured whole."""
    run = from_json(json.dumps(_json_run("c3" * 16, "Convert the picture")).encode())
    bound = LIMITS.gzip_members.bound
    empties = [gzip.compress(b"") for _ in range(bound)]
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    body = b"".join(empties) + gzip.compress(run.SerializeToString())
    status, _, answer = _post(server, body, headers)
    assert status == 413, answer
    assert _status(answer).message.startswith(f"body: more than {bound} gzip members")
    assert list(client.iter_patterns()) == []
    status, _, answer = _post(
        server, b"".join(empties[1:]) + gzip.compress(run.SerializeToString()), headers
    )
    assert status == 200, answer
    [pattern] = list(client.iter_patterns())
    assert pattern.usage_count == 1


def _bodies_with_groups(groups: int) -> dict[str, bytes]:
    """One run's Export, as OTLP/JSON and as protobuf, padded with empty resource_spans
    entries of one empty scope_spans each to `groups` entries of both kinds together."""
    run = _json_run("d4" * 16, "Convert the picture")
    padding = (groups - 2) // 2
    as_json = dict(run, resourceSpans=run["resourceSpans"] + [{"scopeSpans": [{}]}] * padding)
    request = from_json(json.dumps(run).encode())
    empty = ResourceSpans(scope_spans=[ScopeSpans()])
    request.resource_spans.extend([empty] * padding)
    return {"application/json": json.dumps(as_json).encode(), PROTOBUF: request.SerializeToString()}


@pytest.mark.parametrize("content_type", ["application/json", PROTOBUF])
def test_an_export_of_too_many_empty_groups_is_413(
    server: RunningServer, client: PmlClient, content_type: str
) -> None:
    """Empty resource_spans and scope_spans entries count toward `limits.otlp_groups`, not
    only spans: 2M `{}` entries in an 8 MiB OTLP/JSON body took 16 s to read and answered
    200. Past the bound they are refused 413 before they are mapped; one resource and one
    scope per span of the largest Export are still taken."""
    bound = LIMITS.otlp_groups.bound
    headers = {"Content-Type": content_type}
    status, _, answer = _post(server, _bodies_with_groups(bound + 2)[content_type], headers)
    assert status == 413, answer
    as_json = content_type != PROTOBUF
    message = json.loads(answer)["message"] if as_json else _status(answer).message
    assert message.startswith("this Export's resource_spans and scope_spans entries"), message
    assert list(client.iter_patterns()) == []
    status, _, answer = _post(server, _bodies_with_groups(bound)[content_type], headers)
    assert status == 200, answer
    assert [p.usage_count for p in client.iter_patterns()] == [1]


def test_connections_that_never_finish_a_request_are_closed(
    start: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn reads a request's head and body with no deadline: 64 connections that sent half
    a request line (or a head and half its body) held every connection slot for as long as they
    stayed open, and every Export was answered 503. Now such a connection is closed once it has
    not sent its whole request in `http_deadline.REQUEST_SECONDS` (1 s here), and Exports are
    taken again."""
    monkeypatch.setattr(http_deadline, "REQUEST_SECONDS", 1.0)
    server = start(otlp_http_listen="127.0.0.1:0")
    assert server.otlp_http is not None
    stalled = []
    for i in range(otlp_http._MAX_CONNECTIONS + 2):
        sock = socket.create_connection(("127.0.0.1", server.otlp_http.port), timeout=30)
        head = b"POST /v1/traces HTTP/1.1\r\nHost: pml\r\n"
        if i % 2:
            head += b"Content-Type: application/x-protobuf\r\nContent-Length: 100\r\n\r\nab"
        sock.sendall(head)
        stalled.append(sock)
    body = ExportTraceServiceRequest().SerializeToString()
    headers = {"Content-Type": "application/x-protobuf"}
    try:
        assert eventually(lambda: _post(server, body, headers)[0] == 200)
        for sock in stalled:  # each closed by the server (those past the limit after a 503)
            answer = b"".join(iter(lambda sock=sock: sock.recv(4096), b""))
            assert answer == b"" or answer.startswith(b"HTTP/1.1 503 "), answer
    finally:
        for sock in stalled:
            sock.close()


@pytest.mark.slow
@pytest.mark.parametrize("tls", [False, True])
def test_connections_held_open_never_take_the_servers_descriptors(
    tmp_path: Path,
    pki: Path,  # noqa: F811
    tls: bool,
) -> None:
    """docs/operations.md, Metrics and alerts: each HTTP listener keeps at most
    `http_deadline.MAX_OPEN_CONNECTIONS` connections open. 1,100 connections that sent half a
    request line to the OTLP/HTTP port, or to /metrics, or with TLS no handshake, no key
    needed, held every descriptor of a `pml serve` with a soft limit of 1024: its gRPC port
    accepted no one (RecordExecution DEADLINE_EXCEEDED), and asyncio logged "socket.accept()
    out of system resource" some 13,000 times a second."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip("this test holds 1,100 sockets open: the hard descriptor limit is lower")
    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))  # (this process's own sockets)
    log = tmp_path / "serve.log"
    flags = ["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d"), "--embedder"]
    flags += ["hashing", "--otlp-http-listen", "127.0.0.1:0", "--metrics-port", "0"]
    if tls:
        flags += ["--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key")]
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "pml"), "serve", *flags],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard)),
        )
    try:
        assert proc.stdout is not None
        grpc_port = re.search(r"\(port (\d+)\)", proc.stdout.readline())[1]  # type: ignore[index]
        otlp_port = re.search(r":(\d+)/v1/traces", proc.stdout.readline())[1]  # type: ignore[index]
        metrics_port = json.loads(log.read_text().splitlines()[0])["metrics_port"]
        # With TLS a stalled client sends nothing: its handshake never ends.
        half_a_request = b"" if tls else b"GET /metrics HTTP/1.1\r\n"
        for i, port in enumerate((int(otlp_port), metrics_port)):
            stalled: list[socket.socket] = []
            try:
                for _ in range(1100):
                    try:
                        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
                        sock.sendall(half_a_request)
                    except OSError:  # the backlog is full: the server is not accepting
                        break
                    stalled.append(sock)
                ca = pki / "ca.pem" if tls else None
                target = f"127.0.0.1:{grpc_port}"
                with PmlClient(target, timeout=10, retries=0, root_certificates=ca) as client:
                    code = f"await mcp.tool{i}({{}})"
                    record = make_record(f"call tool {i}", code, tools=[f"tool{i}"])
                    assert client.record(record).new_pattern, port
            finally:
                for sock in stalled:
                    sock.close()
    finally:
        stop_pml_serve(proc)
    assert "out of system resource" not in log.read_text()


def test_keys_apply_as_on_grpc(start: StartServer, keys: tuple[Path, dict[str, str]]) -> None:
    path, found = keys
    server = start(otlp_http_listen="127.0.0.1:0", keys_file=path)
    body = ExportTraceServiceRequest().SerializeToString()
    headers = {"Content-Type": "application/x-protobuf"}
    status, _, answer = _post(server, body, headers)
    assert status == 401
    assert _status(answer).code == 16
    read = {**headers, "Authorization": f"Bearer {found['acme-read']}"}
    assert _post(server, body, read)[0] == 403
    write = {**headers, "Authorization": f"Bearer {found['acme-write']}"}
    status, _, answer = _post(server, body, write)
    assert status == 200
    ExportTraceServiceResponse().ParseFromString(answer)


def test_a_body_without_a_valid_key_is_refused_before_it_is_read(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """docs/connect.md, "OTLP traces in": the key is checked before the body is inflated or
    parsed, as the gRPC port checks it before it decodes a message. The body was decoded
    first: a client with no key got a 400 naming what did not parse, or 413 for a gzip bomb,
    and a 4 MB OTLP/JSON body cost about 0.7 s of CPU before its 401, at any rate it liked."""
    path, found = keys
    server = start(otlp_http_listen="127.0.0.1:0", keys_file=path, max_message_bytes=64 * 1024)
    protobuf = {"Content-Type": "application/x-protobuf"}
    bomb = gzip.compress(b"\x00" * (10 * 1024 * 1024))
    bodies = [
        (b"\xff\xff not protobuf", protobuf),
        (b'{"resourceSpans": [{"scopeSpans": "not JSON', {"Content-Type": JSON}),
        (b"\x0a" * (65 * 1024), protobuf),  # over the limit
        (bomb, {**protobuf, "Content-Encoding": "gzip"}),
    ]
    for body, headers in bodies:
        for key, expected in ((None, 401), ("not-a-key", 401), (found["acme-read"], 403)):
            sent = {**headers, **({"Authorization": f"Bearer {key}"} if key else {})}
            status, _, answer = _post(server, body, sent)
            assert status == expected, (body[:40], key, status, answer[:200])
    write = {**protobuf, "Authorization": f"Bearer {found['acme-write']}"}
    assert _post(server, b"\xff\xff not protobuf", write)[0] == 400  # read once admitted


def test_a_tenant_over_its_quota_is_answered_429_before_its_body_is_read(
    start: StartServer,
) -> None:
    """docs/connect.md, "OTLP traces in": the tenant's quota is peeked at from the headers, as
    the gRPC port's early refusal does, before the body is parsed (a body that does not
    parse was answered 400 over quota)."""
    server = start(otlp_http_listen="127.0.0.1:0", tenant_rate=0.01, tenant_burst=1)
    headers = {"Content-Type": "application/x-protobuf"}
    assert _post(server, ExportTraceServiceRequest().SerializeToString(), headers)[0] == 200
    status, answer_headers, answer = _post(server, b"\xff\xff not protobuf", headers)
    assert status == 429, answer[:200]
    assert int(answer_headers["retry-after"]) >= 1


def _exchange(port: int, request: bytes) -> bytes:
    """`request` sent as raw bytes; the head of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
        return answer


def test_requests_http_refuses_leave_the_log_json_and_quiet(tmp_path: Path) -> None:
    """docs/operations.md, "Metrics and alerts": logs are one JSON object a line. uvicorn
    wrote its own lines into `pml serve`'s log (`WARNING:  Invalid HTTP request received.`,
    and two for an `Upgrade` header, one of them advice to pip install uvicorn[standard]), one
    for each such request of any client, no key needed: a flood of them a flood of log."""
    proc, _ = spawn_pml_serve(
        *("--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "d")),
        *("--embedder", "hashing", "--otlp-http-listen", "127.0.0.1:0"),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        port = int(re.search(r"OTLP/HTTP traces on http://127.0.0.1:(\d+)/", line)[1])  # type: ignore[index]
        head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n"
        for request in (
            head + b"Bad Header Line\r\n\r\n",
            head + b"Content-Length: -1\r\n\r\n",
            head + b"Upgrade: h2c\r\nConnection: upgrade\r\nContent-Length: 0\r\n\r\n",
        ):
            assert _exchange(port, request).startswith(b"HTTP/1.1 4"), request
    finally:
        stderr = stop_pml_serve(proc)
    assert proc.returncode == 0, stderr[-3000:]
    messages = [json.loads(line)["msg"] for line in stderr.splitlines()]  # each line JSON
    assert messages[0] == "pml serving", messages
    assert not [m for m in messages if "HTTP" in m or "upgrade" in m.lower()], messages


def test_draining_answers_503_with_retry_after(server: RunningServer) -> None:
    server.servicer.draining.set()
    status, headers, answer = _post(
        server, ExportTraceServiceRequest().SerializeToString(),
        {"Content-Type": "application/x-protobuf"},
    )  # fmt: skip
    assert status == 503
    assert int(headers["retry-after"]) >= 1
    assert "shutting down" in _status(answer).message


def test_a_non_loopback_address_without_keys_is_refused(start: StartServer) -> None:
    with pytest.raises(ValueError, match="without a keys file"):
        start(otlp_http_listen="0.0.0.0:0")


def test_an_address_that_cannot_be_bound_is_named(start: StartServer) -> None:
    with pytest.raises(ValueError, match="otlp_http_listen: port 'http-port' is not a number"):
        start(otlp_http_listen="localhost:http-port")
    with pytest.raises(ValueError, match="otlp_http_listen: port 70000"):
        start(otlp_http_listen="127.0.0.1:70000")


@pytest.mark.node
@pytest.mark.parametrize("processor", ["batch", "simple"])
def test_the_javascript_sdk_json_exporter_is_captured(start: StartServer, processor: str) -> None:
    """The OpenTelemetry JavaScript SDK's OTLP/HTTP exporter (JSON, hex ids: its default
    encoding) sends one run; it becomes a pattern. With the simple span processor each span
    goes in its own request, concurrently, so the root may arrive before its call (before the
    settle window, such a run was lost in 2 of 6 tries)."""
    server = start(otlp_http_listen="127.0.0.1:0", otlp_settle_seconds=0.5)
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node.js is needed for the JavaScript exporter test")
    installed = JS / "node_modules" / "@opentelemetry" / "exporter-trace-otlp-http"
    npm_ci(JS, "for the JavaScript exporter test", installed)
    done = subprocess.run(
        [node, "export_run.js", _url(server), processor],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert eventually(lambda: list(client.iter_patterns()), 20)
        [pattern] = list(client.iter_patterns())
    assert (list(pattern.tools_used), pattern.usage_count) == (["zip"], 1)
    assert pattern.template.strip() == 'await mcp.zip({"dir": $DIR, "level": $LEVEL});'
    assert [i.text for i in pattern.intents] == ["compress the folder"]


def test_a_body_cut_by_a_disconnect_is_never_exported() -> None:
    """The ASGI app alone: the client goes away mid-body; the part received is not parsed or
    exported, and nothing is answered."""
    exported: list[object] = []
    sent: list[dict[str, object]] = []
    app = OtlpHttpApp(
        lambda request, metadata: exported.append(request),  # type: ignore[arg-type,func-returns-value]
        lambda metadata: None,
        1 << 20,
    )
    messages = iter(
        [
            {"type": "http.request", "body": b"\x0a\x02", "more_body": True},
            {"type": "http.disconnect"},
        ]
    )

    async def receive() -> dict[str, object]:
        return next(messages)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "path": "/v1/traces",
        "method": "POST",
        "headers": [(b"content-type", b"application/x-protobuf")],
    }
    try:
        asyncio.run(app(scope, receive, send))
    finally:
        app.close()
    assert exported == []
    assert sent == []


def _raw_post(
    server: RunningServer, body: bytes, headers: list[tuple[str, str]]
) -> tuple[int, str, bytes]:
    """A POST whose header lines are sent as given, repeats included (urllib keeps one a name)."""
    assert server.otlp_http is not None
    connection = http.client.HTTPConnection("127.0.0.1", server.otlp_http.port, timeout=30)
    try:
        connection.putrequest("POST", "/v1/traces")
        for name, value in [*headers, ("Content-Length", str(len(body)))]:
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("over_the_limit", [False, True])
def test_content_type_sent_twice_with_different_types_is_400_naming_it(
    start: StartServer, over_the_limit: bool
) -> None:
    """uvicorn hands every header line on (`scope["headers"]`, repeats in order). Before: the
    413 read the first Content-Type, every other path the last, so one request was answered
    in JSON when too large and read as protobuf otherwise. A request naming two media types
    is now refused 400 naming `Content-Type` on every path, in binary protobuf (no type was
    chosen); one media type sent twice (parameters or letter case apart) is that type."""
    server = start(otlp_http_listen="127.0.0.1:0", max_message_bytes=64 * 1024)
    run = json.dumps(_json_run("e5" * 16, "Convert the picture")).encode()
    body = b"[" * (65 * 1024) if over_the_limit else run
    two = [("Content-Type", "application/json"), ("Content-Type", PROTOBUF)]
    status, content_type, answer = _raw_post(server, body, two)
    assert (status, content_type) == (400, PROTOBUF)
    refused = _status(answer)
    assert refused.message.startswith("Content-Type: sent 2 times with different media types")
    assert refused.details, "a BadRequest naming the field"
    same = [("Content-Type", JSON), ("content-type", "Application/JSON; charset=utf-8")]
    status, content_type, answer = _raw_post(server, body, same)
    assert (status, content_type) == ((413, JSON) if over_the_limit else (200, JSON))
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert [p.usage_count for p in client.iter_patterns()] == ([] if over_the_limit else [1])


def test_content_encoding_sent_twice_is_read_as_one_list(server: RunningServer) -> None:
    """Content-Encoding is a list (RFC 9110, section 5.3: its field lines join with commas).
    Before: only the last line was read, so a body sent with `identity` then `gzip` was
    inflated and captured; `identity, gzip` is no coding this endpoint takes: 415 naming it."""
    run = from_json(json.dumps(_json_run("f6" * 16, "Convert the picture")).encode())
    body = gzip.compress(run.SerializeToString())
    headers = [
        ("Content-Type", PROTOBUF),
        ("Content-Encoding", "identity"),
        ("Content-Encoding", "gzip"),
    ]
    status, content_type, answer = _raw_post(server, body, headers)
    assert (status, content_type) == (415, PROTOBUF)
    assert _status(answer).message.startswith("Content-Encoding: 'identity, gzip' is not taken")
