"""`pml mcp` when its client gives up, in front of a real pml server: a tool call cancelled by
the official SDK's client (its read timeout sends `notifications/cancelled`), a stdio client
that goes away mid-call (stdin closed; or stdin and stdout closed, as when the client process
dies), and HTTP clients that hang up before their answer (docs/reliability.md, Clients that
give up)."""

from __future__ import annotations

import json
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from pml_server.api.http_deadline import REQUEST_SECONDS
from pml_server.api.server import RunningServer
from pml_server.client import PmlClient
from tests.mcp.test_server import (
    CODE,
    JSON_HEADERS,
    PYTHONPATH,
    ROOT,
    _pml_mcp,
    _record_args,
    _run,
    _text,
)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "giving-up", "version": "1"},
    },
}


def _line(message: dict[str, Any]) -> bytes:
    return (json.dumps(message) + "\n").encode()


def _call(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def _usage(server: RunningServer, request_id: str) -> int:
    """The usage count of the pattern the execution `request_id` went to, after sending it
    once more through a fresh `pml mcp` session (the same request id: counted at most once)."""
    found: list[dict[str, Any]] = []

    async def body(client: Client) -> None:
        again = await client.call_tool("record_execution", _record_args(request_id=request_id))
        assert not again.is_error, _text(again)
        got = await client.call_tool("get_pattern", {"name": again.structured_content["pattern"]})
        found.append(got.structured_content)

    _run(_stdio_logged(f"127.0.0.1:{server.port}", None), body)
    return int(found[0]["usage_count"])


def _stdio_logged(server: str, errlog: TextIO | None) -> Client:
    """The SDK's stdio client with `pml mcp`'s stderr written to `errlog`."""
    params = StdioServerParameters(
        command=_pml_mcp()[0],
        args=_pml_mcp("--server", server)[1:],
        cwd=str(ROOT),
        env={"PYTHONPATH": PYTHONPATH},
    )
    if errlog is None:
        return Client(params)

    @asynccontextmanager
    async def transport() -> Any:
        async with stdio_client(params, errlog=errlog) as streams:
            yield streams

    return Client(transport())  # type: ignore[arg-type]


def _give_up_mid_call(proc: subprocess.Popen[bytes], target: str, gone: str) -> tuple[bool, str]:
    """Initialize, send a record and a suggest, and go away; (whether the record was answered,
    `pml mcp`'s stderr)."""
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdin.write(_line(INITIALIZE))
    proc.stdin.flush()
    assert b'"result"' in proc.stdout.readline()
    proc.stdin.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    if gone == "stdin and stdout closed":
        # Nobody reads the answers any more: the first one written hits a closed pipe.
        proc.stdout.close()
    proc.stdin.write(_line(_call(1, "record_execution", _record_args(request_id="gone-1"))))
    proc.stdin.write(_line(_call(2, "suggest", {"intent": "Read JSON file"})))
    proc.stdin.flush()
    answered = False
    if gone == "stdin closed":
        proc.stdin.close()
        answers = [json.loads(line) for line in proc.stdout.read().splitlines()]
        answered = any(a.get("id") == 1 and "result" in a for a in answers)
    else:
        # Once the record is stored its answer is on its way to the closed pipe; stdin is
        # closed a moment later, as a dying client's is (a client that closes stdout alone
        # leaves `pml mcp` waiting on stdin, like any stdio server).
        _wait_stored(target, 1)
        time.sleep(0.2)
        proc.stdin.close()
    return answered, proc.stderr.read().decode()


def _wait_stored(target: str, executions: int) -> None:
    with PmlClient(target) as client:
        for _ in range(600):
            if client.stats().executions >= executions:
                return
            time.sleep(0.05)
    raise AssertionError(f"{target} never stored {executions} execution(s)")


@pytest.mark.parametrize("gone", ["stdin closed", "stdin and stdout closed"])
def test_a_client_gone_mid_call_leaves_pml_mcp_exiting_cleanly(
    server: RunningServer, gone: str
) -> None:
    """`pml mcp` exits 0 without a traceback; an answered record is stored, and every record
    sent is counted once (a resend with its request id is a replay)."""
    with subprocess.Popen(
        _pml_mcp("--server", f"127.0.0.1:{server.port}"),
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PYTHONPATH": PYTHONPATH},
    ) as proc:
        answered, stderr = _give_up_mid_call(proc, f"127.0.0.1:{server.port}", gone)
        assert proc.wait(timeout=60) == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr
    if answered:
        with PmlClient(f"127.0.0.1:{server.port}") as client:
            assert client.stats().executions == 1  # the acknowledged write is there
    assert _usage(server, "gone-1") == 1


def test_cancelled_tool_calls_count_once_and_the_session_goes_on(server: RunningServer) -> None:
    """Calls cancelled by the SDK's read timeout, and one cancelled by the caller's own scope;
    the same session then answers, and resending each record with its request id counts every
    execution exactly once (whether or not the cancelled call had been applied)."""
    ids = [f"cancelled-{i}" for i in range(12)]
    outcomes: dict[str, str] = {}

    async def body(client: Client) -> None:
        async def give_up(request_id: str) -> None:
            try:
                done = await client.call_tool(
                    "record_execution",
                    _record_args(request_id=request_id),
                    read_timeout_seconds=0.001,
                )
                outcomes[request_id] = "answered" if not done.is_error else _text(done)
            except Exception as err:  # the SDK's timeout: MCPError "timed out"
                outcomes[request_id] = f"gave up: {err}"

        async with anyio.create_task_group() as group:
            for request_id in ids:
                group.start_soon(give_up, request_id)
        with anyio.move_on_after(0.001):
            await client.call_tool("suggest", {"intent": "Read JSON file"})
        for request_id in ids:  # the agent retries with the same request ids
            again = await client.call_tool("record_execution", _record_args(request_id=request_id))
            assert not again.is_error, _text(again)
        found = await client.call_tool("suggest", {"intent": "Read JSON file"})
        best = found.structured_content["capabilities"][0]
        got = await client.call_tool("get_pattern", {"name": best["pattern"]})
        assert got.structured_content["usage_count"] == len(ids), outcomes
        assert got.structured_content["template"] == CODE.replace("'data.json'", "$PATH")

    with tempfile.TemporaryFile("w+") as errlog:
        _run(_stdio_logged(f"127.0.0.1:{server.port}", errlog), body)
        errlog.seek(0)
        logged = errlog.read()
    assert all(o == "answered" or o.startswith("gave up") for o in outcomes.values()), outcomes
    assert "Traceback" not in logged, logged
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        assert client.stats().executions == len(ids)


def _hang_up(url: str, message: dict[str, Any]) -> None:
    """POST `message` whole and close the connection at once, as a client whose timeout ran
    out does."""
    where = urlsplit(url)
    assert where.hostname is not None
    assert where.port is not None
    body = json.dumps(message).encode()
    head = (
        f"POST {where.path} HTTP/1.1\r\nHost: {where.hostname}:{where.port}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((where.hostname, where.port)) as sock:
        sock.sendall(head.encode() + body)


def test_http_clients_hanging_up_cost_no_traceback_and_count_once(
    server: RunningServer, tmp_path: Path
) -> None:
    """Requests whose clients hung up leave no error or traceback in `pml mcp`'s log (each
    cost about 4 KB of it: a flood of them a flood of log, and an undrained stderr pipe
    stalled the whole front), the front goes on answering, and each abandoned record, resent
    with its request id, counts once."""
    log = tmp_path / "mcp.log"
    with _http_mcp_logged(server, log) as url:
        ids = [f"hung-up-{i}" for i in range(10)]
        for i, request_id in enumerate(ids):
            arguments = _record_args(request_id=request_id)
            _hang_up(url, _call(i, "record_execution", arguments))
        with httpx2.Client(timeout=60) as http:
            for i, request_id in enumerate(ids):
                call = _call(100 + i, "record_execution", _record_args(request_id=request_id))
                answer = http.post(url, json=call, headers=JSON_HEADERS).json()
                assert answer["result"]["isError"] is False, answer
            pattern = answer["result"]["structuredContent"]["pattern"]
            got = http.post(
                url, json=_call(200, "get_pattern", {"name": pattern}), headers=JSON_HEADERS
            ).json()
        assert got["result"]["structuredContent"]["usage_count"] == len(ids), got
    text = log.read_text()
    assert "Traceback" not in text, text[-4000:]
    assert "ERROR" not in text, text[-4000:]


@contextmanager
def _http_mcp_logged(server: RunningServer, log: Path) -> Iterator[str]:
    """`pml mcp --transport http` in front of `server` on a free loopback port, its stderr
    written to `log` (read while it runs); yields its URL, and stops it at the end."""
    with (
        log.open("w") as stderr,
        subprocess.Popen(
            [
                *_pml_mcp("--server", f"127.0.0.1:{server.port}"),
                *("--transport", "http", "--listen", "127.0.0.1:0"),
            ],
            cwd=ROOT,
            stderr=stderr,
            env={"PYTHONPATH": PYTHONPATH},
        ) as proc,
    ):
        try:
            yield _listening_url(log, proc)
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def _listening_url(log: Path, proc: subprocess.Popen[bytes]) -> str:
    for _ in range(1200):
        for line in log.read_text().splitlines():
            if "listening on" in line:
                return line.rsplit(" ", 1)[-1].strip()
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"pml mcp did not listen: {log.read_text()[-2000:]}")


@pytest.mark.slow
def test_http_clients_that_stall_mid_request_are_closed(
    server: RunningServer, tmp_path: Path
) -> None:
    """A client that never finishes its request (half a request line, or a head and half its
    body) held its connection and a descriptor for as long as it stayed: about 1,000 of them
    (a soft limit of 1024 descriptors) and `pml mcp` answered no one, for good. Now each is
    closed `REQUEST_SECONDS` after it opened (docs/mcp.md, HTTP front), and the front goes on
    answering."""
    log = tmp_path / "mcp.log"
    with _http_mcp_logged(server, log) as url:
        where = urlsplit(url)
        assert where.hostname is not None
        assert where.port is not None
        stalled = []
        for i in range(10):
            sock = socket.create_connection((where.hostname, where.port))
            sock.settimeout(REQUEST_SECONDS + 60)
            head = f"POST {where.path} HTTP/1.1\r\nHost: {where.netloc}\r\n"
            if i % 2:
                head += "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            sock.sendall(head.encode())
            stalled.append(sock)
        try:
            for sock in stalled:
                assert sock.recv(100) == b""  # closed by `pml mcp`, never answered
        finally:
            for sock in stalled:
                sock.close()
        with httpx2.Client(timeout=60) as http:
            listed = http.post(url, json=_call(1, "suggest", {"intent": "x"}), headers=JSON_HEADERS)
        assert listed.status_code == 200, listed.text
    assert "Traceback" not in log.read_text()
