"""`pml mcp` driven as a careless or hostile agent would, through the official MCP SDK's client
(and raw JSON-RPC lines where the SDK's client would refuse to send them), in front of a real
pml server: every bad input gets an answer that names what to fix (docs/mcp.md, Protocol)."""

from __future__ import annotations

import http.client
import json
import select
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx2
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from pml_server.api import http_body
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient
from pml_server.mcp._message_limit import MAX_MESSAGE_BYTES
from tests.mcp.test_clients_giving_up import INITIALIZE, _http_mcp_logged, _stdio_logged
from tests.mcp.test_server import (
    JSON_HEADERS,
    PYTHONPATH,
    ROOT,
    _http_client,
    _http_mcp,
    _pml_mcp,
    _record_args,
    _run,
    _stdio,
    _text,
)


async def _refusals_name_the_argument(client: Client) -> None:
    """pml's own refusals name the MCP argument the caller passed, in the one-line form of an
    argument error (before: `Error executing tool suggest: invalid argument:
    available_tools.tools[0]: ...`, the gRPC request's field names)."""
    cases = [
        ("suggest", {"intent": "x", "available_tools": ["a" * 300]}, "available_tools.0: "),
        ("suggest", {"intent": "x", "available_tools": ["a"] * 2000}, "available_tools: "),
        ("suggest", {"intent": "x", "previous_tools": [""]}, "previous_tools.0: "),
        ("suggest", {"intent": ""}, "intent: "),
        ("suggest", {"intent": "x", "session_id": "a\x00"}, "session_id: "),
        (
            "record_execution",
            _record_args(tool_calls=[{"tool": "read_file", "arguments": {"a": "x" * 70000}}]),
            "tool_calls.0.arguments: ",
        ),
        ("record_execution", _record_args(code="x" * 300_000), "code: "),
        ("record_execution", _record_args(session_id="a\x00"), "session_id: "),
    ]
    for tool, arguments, field in cases:
        result = await client.call_tool(tool, arguments)
        text = _text(result)
        assert result.is_error, text
        assert text.startswith("invalid argument: " + field), text
        assert "\n" not in text


def test_pmls_refusals_name_the_mcp_argument(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _refusals_name_the_argument)


def _unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("pml", ["running", "down"])
def test_prompt_and_listing_errors_are_json_rpc_errors(server: RunningServer, pml: str) -> None:
    """A prompt asked for without its argument, a cursor pml never issued, and pml down behind
    a prompt or a listing: each a JSON-RPC error with its code (-32602 for the caller's
    mistake, -32603 for pml's) and one sentence, and no traceback in `pml mcp`'s log (before:
    error code 0 for each, and a traceback of some 30 KB logged for each)."""
    port = server.port if pml == "running" else _unused_port()

    async def body(client: Client) -> None:
        with pytest.raises(MCPError) as missing:
            await client.get_prompt("use_procedure")
        assert missing.value.code == -32602
        assert str(missing.value) == "invalid argument: task: field required"
        with pytest.raises(MCPError) as listing:
            await client.list_resources(cursor="not-a-cursor")
        if pml == "running":
            assert listing.value.code == -32602
            assert str(listing.value).startswith("invalid argument: cursor: "), listing.value
            return
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt("use_procedure", {"task": "Read a JSON file"})
        for err in (listing.value, prompt.value):
            assert err.code == -32603
            assert str(err).startswith("pml is unavailable at "), err

    with tempfile.TemporaryFile("w+") as errlog:
        _run(_stdio_logged(f"127.0.0.1:{port}", errlog), body)
        errlog.seek(0)
        logged = errlog.read()
    assert "Traceback" not in logged, logged[-3000:]


def test_prompt_refusals_name_the_task_argument(server: RunningServer) -> None:
    """A task pml refuses (blank, or without a letter or digit) is refused naming the prompt's
    argument, `task`, as a bad tool argument names its own (before: `invalid argument:
    intent: ...`, the name of the request pml was sent, which the prompt does not take)."""

    async def body(client: Client) -> None:
        for task in ("   ", "\x00?!"):
            with pytest.raises(MCPError) as refused:
                await client.get_prompt("use_procedure", {"task": task})
            assert refused.value.code == -32602
            assert str(refused.value).startswith("invalid argument: task: "), refused.value

    _run(_stdio(f"127.0.0.1:{server.port}"), body)


def _stdio_exchange(
    server: RunningServer, lines: list[bytes], answers: int
) -> tuple[list[dict[str, Any]], bytes]:
    """Run `pml mcp` over stdio in front of `server`, write `lines` (each a message, sent
    together) and read `answers` answer lines, every one before stdin closes (at its end the
    SDK cancels calls in flight); returns them in order, with the process's stderr."""
    with subprocess.Popen(
        _pml_mcp("--server", f"127.0.0.1:{server.port}"),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONPATH": PYTHONPATH},
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        assert proc.stderr is not None
        proc.stdin.write(b"\n".join(lines) + b"\n")
        proc.stdin.flush()
        out: list[bytes] = []
        while len(out) < answers:
            ready, _, _ = select.select([proc.stdout], [], [], 30)
            assert ready, out
            out.append(proc.stdout.readline())
        proc.stdin.close()
        err = proc.stderr.read()
        proc.wait(timeout=60)
    return [json.loads(line) for line in out], err


_HANDSHAKE = [
    json.dumps(INITIALIZE).encode(),
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
]


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


def test_stdio_answers_deeply_nested_arguments(server: RunningServer) -> None:
    """A tool call whose arguments nest 200 levels deep, as the SDK's own client sends it: the
    SDK's stdio transport could not parse the line and dropped it, and the client waited until
    its own timeout (for ever by default). Now it is answered at once, under its id, and the
    session goes on."""

    async def body(client: Client) -> None:
        arguments = _record_args(tool_calls=[{"tool": "read_file", "arguments": _nested(200)}])
        with pytest.raises(MCPError) as refused:
            await client.call_tool("record_execution", arguments, read_timeout_seconds=20)
        assert refused.value.code == -32700, refused.value
        assert "recursion limit" in str(refused.value)
        done = await client.call_tool("record_execution", _record_args())
        assert not done.is_error, _text(done)

    _run(_stdio(f"127.0.0.1:{server.port}"), body)


def test_stdio_answers_every_line_it_cannot_read(server: RunningServer) -> None:
    """Raw lines no SDK client would send: each request gets an error under its own id (the
    SDK dropped every one of them, and its sender waited for ever); a line without a readable
    id gets its error under id null; a notification and a blank line get nothing. A ping then
    shows the session alive."""
    call = '{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"suggest",%s}}'
    lines = [
        (call % (1, '"arguments":{"intent":"\\ud800x"}'), 1, -32700),  # a lone surrogate
        (call % ('"deep"', '"arguments":{"a":' + "[" * 5000 + "]" * 5000 + "}"), "deep", -32700),
        (call % (3, '"arguments":{"intent":"x"'), 3, -32700),  # cut short
        ('{"jsonrpc":"2.0","id":4,"method":5}', 4, -32600),
        ('{"id":5,"method":"ping"}', 5, -32600),  # no "jsonrpc"
        ("not json", None, -32700),
        # A string that never ends, of escaped quotes: found in linear time (the first search
        # for the id was quadratic in it: 64 KB took 18 s, with the whole session stalled).
        ('{"jsonrpc":"2.0","method":"ping","params":{"a":' + '"\\' * 300_000, None, -32700),
        (call % (7, '"arguments":{"intent":"caf\xe9"}'), 7, -32700),  # Latin-1, not UTF-8
        ('{"jsonrpc":"2.0","method":5}', None, None),  # a notification: no answer
        ("", None, None),
        ('{"jsonrpc":"2.0","id":6,"method":"ping"}', 6, 0),
    ]
    expected = [(i, code) for _, i, code in lines if code is not None]
    # (Each line's characters below 256 as bytes: the Latin-1 line stays Latin-1.)
    sent = [line.encode("latin-1") for line, _, _ in lines]
    everything, err = _stdio_exchange(server, _HANDSHAKE + sent, len(expected) + 1)
    answers = everything[1:]  # after initialize's
    got = [(a["id"], a["error"]["code"] if "error" in a else 0) for a in answers]
    assert got == expected, (answers, err)
    assert all(a["error"]["message"] for a in answers if "error" in a)
    assert b"Traceback" not in err, err


def test_http_answers_bodies_that_are_no_message_in_one_sentence(
    server: RunningServer, tmp_path: Path
) -> None:
    """JSON nested 5,000 deep is the SDK's -32700 Parse error (before: pml's own id check
    raised RecursionError, a 500 and a traceback in the log); JSON that is not one JSON-RPC
    message is -32600 Invalid Request in one sentence under its id (before: -32602 with
    pydantic's dump of every union member's errors, the input echoed, type tags and links)."""
    call = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"suggest",%s}}'
    cases: list[tuple[str, int, Any, str]] = [
        (call % ('"arguments":{"a":' + "[" * 5000 + "]" * 5000 + "}"), -32700, None, "Parse"),
        ('{"jsonrpc":"2.0","id":2,"method":5}', -32600, 2, "method must be a string"),
        ('{"id":"three","method":"ping"}', -32600, "three", 'jsonrpc must be "2.0"'),
        ('{"jsonrpc":"2.0","id":4}', -32600, 4, "a request needs a method"),
        ('{"jsonrpc":"2.0","id":5,"method":"ping","params":5}', -32600, 5, "params must be"),
        ('[{"jsonrpc":"2.0","id":6,"method":"ping"}]', -32600, None, "not a batch"),
        ('"ping"', -32600, None, "a JSON object"),
    ]
    log = tmp_path / "mcp.log"
    with _http_mcp_logged(server, log) as url, httpx2.Client(timeout=30) as http:
        for body, code, request_id, needle in cases:
            r = http.post(url, content=body.encode(), headers=JSON_HEADERS)
            assert r.status_code == 400, (body[:80], r.status_code, r.text[:300])
            error = r.json()["error"]
            assert (r.json()["id"], error["code"]) == (request_id, code), r.text[:300]
            assert needle in error["message"], error
            assert "pydantic" not in error["message"]
            assert "\n" not in error["message"]
        alive = http.post(url, content=call % '"arguments":{"intent":"x"}', headers=JSON_HEADERS)
        assert alive.status_code == 200
    assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


async def _unknown_arguments_are_refused(client: Client) -> None:
    """An argument a tool does not take, at the top or in a tool call, is refused by name
    (before: dropped without a word, so `{"tool": ..., "success": false}` stored a failed call
    as one that succeeded, and a misspelt `min_sucess` or `limit` ran the call without it)."""
    listed = {t.name: t for t in (await client.list_tools()).tools}
    record = listed["record_execution"].input_schema
    assert record["additionalProperties"] is False
    assert record["$defs"]["ToolCallIn"]["additionalProperties"] is False
    failed = _record_args(
        "Email the weekly report",
        code="await mcp.send_report({ to: 'boss' });",
        tool_calls=[{"tool": "send_report", "success": False, "error": "SMTP timeout"}],
    )
    refused = await client.call_tool("record_execution", failed)
    assert refused.is_error
    assert (
        _text(refused) == "invalid argument: tool_calls.0.success: extra inputs are not permitted"
    )
    found = await client.call_tool("suggest", {"intent": "Email the weekly report"})
    assert found.structured_content["capabilities"] == []  # nothing was stored
    misspelt = await client.call_tool("suggest", {"intent": "x", "min_sucess": 0.9, "limit": 1})
    assert misspelt.is_error
    assert _text(misspelt) == (
        "invalid argument: min_sucess: extra inputs are not permitted; "
        "limit: extra inputs are not permitted"
    )
    many = await client.call_tool(
        "get_pattern", {"name": "p", **{"x" * 1000 + str(i): 1 for i in range(50)}}
    )
    assert many.is_error
    assert len(_text(many)) < 600
    assert _text(many).endswith("; and 45 more")


def test_unknown_arguments_are_refused(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _unknown_arguments_are_refused)


async def _numbers_and_booleans_are_strict(client: Client) -> None:
    """A string, a bool or a fraction where the schema says integer, a string or a bool where
    it says number, a string or a number where it says boolean: refused naming the argument
    (before: pydantic's lax mode took `k: "5"` as 5, `k: true` as 1, `duration_ms: "10"` as 10
    and a call's `ok: "false"` or `ok: 0` as false, values the published schema refuses)."""
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert listed["suggest"].input_schema["properties"]["k"]["type"] == "integer"
    call = {"tool": "read_file", "arguments": {"path": "data.json"}}
    cases = [
        ("suggest", {"intent": "x", "k": "5"}, "k: input should be a valid integer"),
        ("suggest", {"intent": "x", "k": 5.5}, "k: input should be a valid integer"),
        ("suggest", {"intent": "x", "k": True}, "k: input should be a valid integer"),
        ("suggest", {"intent": "x", "min_success": "0.5"}, "min_success: input should be a"),
        ("suggest", {"intent": "x", "min_success": True}, "min_success: input should be a"),
        ("record_execution", _record_args(duration_ms="10"), "duration_ms: input should be a"),
        ("record_execution", _record_args(duration_ms=False), "duration_ms: input should be a"),
        (
            "record_execution",
            _record_args(tool_calls=[{**call, "duration_ms": "1"}]),
            "tool_calls.0.duration_ms: input should be a valid number",
        ),
        (
            "record_execution",
            _record_args(tool_calls=[{**call, "ok": "false"}]),
            "tool_calls.0.ok: input should be a valid boolean",
        ),
        (
            "record_execution",
            _record_args(tool_calls=[{**call, "ok": 0}]),
            "tool_calls.0.ok: input should be a valid boolean",
        ),
    ]
    for tool, arguments, expected in cases:
        result = await client.call_tool(tool, arguments)
        text = _text(result)
        assert result.is_error, (arguments, text)
        assert text.startswith("invalid argument: " + expected), text
    # What the schema allows still passes: an integer where it says number.
    done = await client.call_tool("record_execution", _record_args(duration_ms=10))
    assert not done.is_error, _text(done)
    found = await client.call_tool(
        "suggest", {"intent": "Read JSON file", "k": 2, "min_success": 0}
    )
    assert not found.is_error, _text(found)
    assert len(found.structured_content["capabilities"]) == 1


def test_numbers_and_booleans_are_strict(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _numbers_and_booleans_are_strict)


TOKEN = "qtok_9f8e7d6c5b4a39281706"
KEY_URL = f"https://api.example.com/v1/items?access_token={TOKEN}&page=2"


async def _a_token_in_a_url_query_is_never_stored(client: Client) -> None:
    """A token in a URL's query (`?access_token=...`), in the code, a tool call's arguments,
    a failed call's error and the intent, read back through every answer pml mcp gives
    (before: kept in the pattern's original code and as the `$URL` parameter's recent value,
    while `https://user:pw@host` was redacted)."""
    code = f"const items = await mcp.http_get({{ url: '{KEY_URL}' }});\nreturn items;"
    calls = [{"tool": "http_get", "arguments": {"url": KEY_URL}}]
    intent = f"List the items of {KEY_URL}"
    answers = []
    for _ in range(2):
        done = await client.call_tool(
            "record_execution", _record_args(intent, code=code, tool_calls=calls)
        )
        assert not done.is_error, _text(done)
        answers.append(_text(done))
    failed = _record_args(
        "List the items again",
        code=code.replace("http_get", "http_fetch"),
        tool_calls=[{"tool": "http_fetch", "ok": False, "error": f"403 for {KEY_URL} ({TOKEN})"}],
    )
    answers.append(_text(await client.call_tool("record_execution", failed)))
    pattern = json.loads(answers[0])["pattern"]
    capability = json.loads(answers[0])["capability"].removeprefix("capabilities/")
    got = await client.call_tool("get_pattern", {"name": pattern})
    answers.append(_text(got))
    assert got.structured_content["usage_count"] == 2
    answers.append(_text(await client.call_tool("suggest", {"intent": "List the items"})))
    read = await client.read_resource(f"pml://capabilities/{capability}")
    answers.append(read.model_dump_json())
    prompt = await client.get_prompt("use_procedure", {"task": "List the items"})
    answers.append(prompt.model_dump_json())
    everything = "\n".join(answers)
    assert TOKEN not in everything, everything
    # The literal holding it is a secret parameter, redacted whole (as a URL with a password).
    assert "[REDACTED]" in got.structured_content["original_code"]
    url = [p for p in got.structured_content["parameters"] if p["name"] == "$URL"]
    assert url[0]["secret"] is True


def test_a_token_in_a_url_query_is_never_stored(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _a_token_in_a_url_query_is_never_stored)


BAD_PARAMS: list[tuple[dict[str, Any], str]] = [
    (
        {"method": "tools/call", "params": {"name": 5, "arguments": {}}},
        "invalid params: name: input should be a valid string",
    ),
    (
        {"method": "tools/call", "params": {"name": "suggest", "arguments": [1]}},
        "invalid params: arguments: input should be a valid dictionary",
    ),
    (
        {"method": "prompts/get", "params": {"name": "use_procedure", "arguments": {"task": 5}}},
        "invalid params: arguments.task: input should be a valid string",
    ),
    (
        {
            "method": "tools/call",
            "params": {
                "name": "suggest",
                "arguments": {"intent": "x"},
                "_meta": {"progressToken": {}},
            },
        },
        "invalid params: _meta.progressToken: input should be a valid string or input should be "
        "a valid integer",
    ),
    ({"method": "resources/read", "params": {}}, "invalid params: uri: field required"),
]


def test_protocol_params_errors_name_the_member(server: RunningServer) -> None:
    """Request params the protocol refuses, and a request before `initialize`, over stdio and
    HTTP: -32602 naming the member (before: "Invalid request parameters" for each, nothing
    more)."""
    before = {
        "jsonrpc": "2.0",
        "id": "early",
        "method": "tools/call",
        "params": {"name": "suggest"},
    }
    messages = [{"jsonrpc": "2.0", "id": n + 1, **m} for n, (m, _) in enumerate(BAD_PARAMS)]
    sent = [json.dumps(m).encode() for m in [before, *messages]]
    found, _ = _stdio_exchange(server, [sent[0], *_HANDSHAKE, *sent[1:]], len(messages) + 2)
    answers = {answer["id"]: answer for answer in found}
    assert answers["early"]["error"] == {
        "code": -32602,
        "message": "invalid request: tools/call before initialize: initialize first",
    }
    for n, (_, expected) in enumerate(BAD_PARAMS):
        assert answers[n + 1]["error"] == {"code": -32602, "message": expected}, answers[n + 1]
    with _http_mcp(f"127.0.0.1:{server.port}") as url, httpx2.Client(timeout=30) as http:
        for message, (_, expected) in zip(messages, BAD_PARAMS, strict=True):
            r = http.post(url, json=message, headers=JSON_HEADERS)
            assert r.json()["error"] == {"code": -32602, "message": expected}, r.text


def test_nan_and_infinity_are_refused_by_name(server: RunningServer) -> None:
    """NaN and Infinity, which the SDK's JSON parser reads: in a tool call's arguments they
    were stored as `NaN` text that no JSON parser but Python's reads back (the execution was
    saved), and `min_success: NaN` was refused as "less than or equal to 1"."""
    record = (
        '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"record_execution",'
        '"arguments":{"intent":"Compute the ratio","code":"await mcp.ratio({ x: 1 });",%s}}}'
    )
    suggest = (
        '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"suggest",'
        '"arguments":{"intent":"Compute the ratio",%s}}}'
    )
    cases = [
        (
            record % (1, '"tool_calls":[{"tool":"ratio","arguments":{"x":{"y":[NaN]}}}]'),
            "invalid argument: tool_calls.0.arguments: NaN and Infinity are not JSON",
        ),
        (
            record % (2, '"tool_calls":[{"tool":"ratio","duration_ms":Infinity}]'),
            "invalid argument: tool_calls.0.duration_ms: input should be a finite number",
        ),
        (record % (3, '"duration_ms":NaN'), "invalid argument: duration_ms: input should be a"),
        (suggest % (4, '"min_success":NaN'), "invalid argument: min_success: input should be a"),
    ]
    sent = [c.encode() for c, _ in cases]
    found, _ = _stdio_exchange(server, _HANDSHAKE + sent, len(cases) + 1)
    answers = {answer["id"]: answer for answer in found}
    for n, (_, expected) in enumerate(cases):
        result = answers[n + 1]["result"]
        assert result["isError"], result
        assert result["content"][0]["text"].startswith(expected), result
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert client.stats().executions == 0  # nothing was stored


def _peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def test_a_message_over_the_limit_is_one_sentence_over_both_transports(
    server: RunningServer,
) -> None:
    """A tool call of 10 MB of code, through the SDK's client: over stdio the line reached pml,
    which answered a gRPC error naming nothing (`resource_exhausted: ... Received message
    larger than max`); over HTTP the SDK's 413 came as plain text, which its client reports as
    "Server returned an error response". Both now answer -32600 naming the limit (docs/mcp.md,
    Protocol), and the session goes on."""

    async def body(client: Client) -> None:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("record_execution", _record_args(code="x" * 10_000_000))
        assert refused.value.code == -32600, refused.value
        assert str(refused.value) == (
            "Invalid Request: the message is over 4194304 bytes, the most pml mcp reads"
        )
        done = await client.call_tool("record_execution", _record_args())
        assert not done.is_error, _text(done)

    _run(_stdio(f"127.0.0.1:{server.port}"), body)
    with _http_mcp(f"127.0.0.1:{server.port}") as url:
        _run(_http_client(url), body)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_body_far_over_the_limit_is_413_to_a_client_that_sends_it_whole_first(
    server: RunningServer, chunked: bool
) -> None:
    """http.client (urllib too) sends a whole body before it reads an answer, and says
    `Connection: close`: a 20 MB POST was answered 413 once over the limit (at once, from its
    Content-Length) and the connection closed with the rest unread, so the client's send was
    reset and the 413 never read. The rest is now read and dropped, up to
    `http_body.DRAIN_BYTES`, as OTLP/HTTP does (docs/mcp.md, Protocol)."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":"' + b"x" * (20 << 20) + b'"}}'
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Connection": "close",
    }
    with _http_mcp(f"127.0.0.1:{server.port}") as url:
        address = urlparse(url)
        assert address.hostname is not None
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        try:
            if chunked:
                pieces = (body[i : i + (1 << 16)] for i in range(0, len(body), 1 << 16))
                connection.request("POST", address.path, pieces, headers, encode_chunked=True)
            else:
                connection.request("POST", address.path, body, headers)
            answer = connection.getresponse()
            status, said = answer.status, json.loads(answer.read())
        finally:
            connection.close()
    assert status == 413
    assert said["error"] == {
        "code": -32600,
        "message": "Invalid Request: the message is over 4194304 bytes, the most pml mcp reads",
    }
    assert len(body) < MAX_MESSAGE_BYTES + http_body.DRAIN_BYTES


def test_stdio_reads_no_more_of_a_line_than_the_limit(server: RunningServer) -> None:
    """A 64 MiB line over stdio is answered under its id, and the process never holds it: the
    whole line was read, parsed and sent on (a 200 MB one took `pml mcp` from 85 MB to
    1.4 GB); now at most the limit of it is kept, the rest is read and dropped."""
    size = 64 * 1024 * 1024
    line = b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":"' + b"x" * size + b'"}}'
    with subprocess.Popen(
        _pml_mcp("--server", f"127.0.0.1:{server.port}"),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={"PYTHONPATH": PYTHONPATH},
    ) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write(b"\n".join(_HANDSHAKE) + b"\n")
        proc.stdin.flush()
        assert b'"id":0' in proc.stdout.readline()
        before = _peak_rss_bytes(proc.pid)
        proc.stdin.write(line + b'\n{"jsonrpc":"2.0","id":10,"method":"ping"}\n')
        proc.stdin.flush()
        answers = [json.loads(proc.stdout.readline()) for _ in range(2)]
        peak = _peak_rss_bytes(proc.pid)
        proc.stdin.close()
        proc.wait(timeout=60)
    assert answers[0]["id"] == 9
    assert answers[0]["error"]["code"] == -32600, answers[0]
    assert answers[1] == {"jsonrpc": "2.0", "id": 10, "result": {}}
    assert peak - before < size, (before, peak)


def test_errors_echo_at_most_the_start_of_a_long_name(server: RunningServer) -> None:
    """An unknown tool, prompt or resource, or a capability id, 100,000 characters long: its
    error echoes the start of it and its length (before: the whole of it, into the agent's
    context, once more in the error's `data` for a resource)."""
    long = "a" * 100_000

    async def body(client: Client) -> None:
        tool = await client.call_tool(long, {})
        assert tool.is_error
        assert _text(tool) == f"Unknown tool: {'a' * 64}... (100000 characters)"
        refusals = []
        with pytest.raises(MCPError) as prompt:
            await client.get_prompt(long, {})
        refusals.append((prompt.value, f"unknown prompt: {'a' * 64}... (100000 characters)"))
        for uri, said in [
            ("x://" + long, f"Unknown resource: x://{'a' * 60}... (100004 characters)"),
            (
                "pml://capabilities/" + long[:10_000],
                f"no capability '{'a' * 64}... (10000 characters)': use pml://capabilities/{{id}}",
            ),
        ]:
            with pytest.raises(MCPError) as read:
                await client.read_resource(uri)
            refusals.append((read.value, said))
        for err, said in refusals:
            assert err.code == -32602
            assert str(err) == said
            assert len(json.dumps(err.error.data)) < 200, err.error.data
        alive = await client.call_tool("suggest", {"intent": "x"})
        assert not alive.is_error

    _run(_stdio(f"127.0.0.1:{server.port}"), body)


async def _too_many_tool_calls_are_refused_by_their_number(client: Client) -> None:
    # a bad call far in: validated item by item, it was named first (pydantic read all 100,000
    # calls, about 3 s of `pml mcp`'s CPU, before pml refused them for their number)
    calls: list[dict[str, Any]] = [{"tool": "read_file"}] * 100_000
    calls[60_000] = {"tool": ""}
    result = await client.call_tool("record_execution", _record_args(tool_calls=calls))
    assert result.is_error
    assert _text(result) == "invalid argument: tool_calls: is 100000 items; the limit is 256 items"


def test_too_many_tool_calls_are_refused_by_their_number_before_each_is_read(
    server: RunningServer,
) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _too_many_tool_calls_are_refused_by_their_number)


async def _three_tool_calls_over_a_limit_of_two(client: Client) -> None:
    calls = [{"tool": "read_file"}] * 3
    result = await client.call_tool("record_execution", _record_args(tool_calls=calls))
    assert result.is_error
    assert _text(result) == "invalid argument: tool_calls: is 3 items; the limit is 2 items"
    result = await client.call_tool("record_execution", _record_args(tool_calls=calls[:2]))
    assert not result.is_error, _text(result)


def test_pml_mcp_takes_the_servers_max_tool_calls(server: RunningServer) -> None:
    """`pml mcp --max-tool-calls`, set as the server's `--max-tool-calls` (256 by default)."""
    target = f"127.0.0.1:{server.port}"
    _run(_stdio(target, "--max-tool-calls", "2"), _three_tool_calls_over_a_limit_of_two)


def test_refused_hosts_origins_and_requests_write_nothing_to_the_log(
    server: RunningServer, tmp_path: Path
) -> None:
    """docs/mcp.md, HTTP front: a foreign Host or Origin is refused (421, 403) and not logged.
    The SDK logged each whole, before any key was looked at: a 60 KB Host was some 2,300
    lines of `pml mcp`'s stderr, wrapped by its log handler in the event loop for 43 s, during
    which `pml mcp` answered no one; a token in an Origin or Host was written out as sent; and
    uvicorn logged a line of its own for each request it could not read."""
    log = tmp_path / "mcp.log"
    token = "sk-live-0123456789abcdefghijklmnopqrstuv"
    with _http_mcp_logged(server, log) as url, httpx2.Client(timeout=30) as http:
        for headers, status in (
            ({"Host": f"{token}.evil.example"}, 421),
            ({"Host": "h" * 20_000 + ".evil.example"}, 421),
            ({"Origin": f"http://{token}.evil.example"}, 403),
        ):
            answer = http.post(url, json=INITIALIZE, headers={**JSON_HEADERS, **headers})
            assert answer.status_code == status, answer.text[:300]
        where = urlparse(url)
        with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
            sock.sendall(f"POST {where.path} HTTP/1.1\r\nHost: x\r\nBad Line\r\n\r\n".encode())
            assert sock.recv(100).startswith(b"HTTP/1.1 400 "), "no 400 for a bad request"
        ok = http.post(url, json=INITIALIZE, headers=JSON_HEADERS)
        assert ok.status_code == 200, ok.text[:300]
    lines = log.read_text().splitlines()
    assert [line for line in lines if "listening on" not in line] == [], lines[:20]
