"""`pml mcp` driven as a careless or hostile agent would, through the official MCP SDK's client
(and raw JSON-RPC lines where the SDK's client would refuse to send them), in front of a real
pml server: every bad input gets an answer that names what to fix (docs/mcp.md, Protocol)."""

from __future__ import annotations

import socket
import tempfile

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from pml_server.api.server import RunningServer
from tests.mcp.test_clients_giving_up import _stdio_logged
from tests.mcp.test_server import _record_args, _run, _stdio, _text


async def _refusals_name_the_argument(client: Client) -> None:
    """pml's own refusals name the MCP argument the caller passed, in the one-line form of an
    argument error (before: `Error executing tool suggest: invalid argument:
    available_tools.tools[0]: ...`, the gRPC request's field names)."""
    cases = [
        ("suggest", {"intent": "x", "available_tools": ["a" * 300]}, "available_tools.0: "),
        ("suggest", {"intent": "x", "available_tools": ["a"] * 2000}, "available_tools: "),
        ("suggest", {"intent": "x", "previous_tools": [""]}, "previous_tools.0: "),
        ("suggest", {"intent": ""}, "intent: "),
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
