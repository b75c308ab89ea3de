"""`pml mcp` driven as a careless or hostile agent would, through the official MCP SDK's client
(and raw JSON-RPC lines where the SDK's client would refuse to send them), in front of a real
pml server: every bad input gets an answer that names what to fix (docs/mcp.md, Protocol)."""

from __future__ import annotations

from mcp import Client

from pml_server.api.server import RunningServer
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
