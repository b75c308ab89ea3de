"""The MCP `suggest` tool says what its filters removed when its answer is empty (docs/mcp.md,
Tools), through the official MCP SDK's client against a real pml server."""

from __future__ import annotations

from mcp import Client

from pml_server.api.server import RunningServer
from tests.mcp.test_server import _record_args, _run, _stdio

PIPE = "const d = await mcp.read_file({ path: 'a.json' }); await mcp.send_email({ body: d });"


async def _offered_too_little(client: Client) -> None:
    pipe = _record_args(
        "Read JSON file and email it",
        code=PIPE,
        tool_calls=[{"tool": "read_file", "ok": True}, {"tool": "send_email", "ok": True}],
    )
    assert not (await client.call_tool("record_execution", pipe)).is_error

    reply = await client.call_tool(
        "suggest", {"intent": "Read JSON file and email it", "available_tools": ["read_file"]}
    )
    assert not reply.is_error
    out = reply.structured_content
    assert out["capabilities"] == []
    assert out["removed_by_filters"] == 1
    assert out["missing_tools"] == ["send_email"]

    # every tool offered: the capability itself, nothing said removed
    reply = await client.call_tool(
        "suggest",
        {"intent": "Read JSON file and email it", "available_tools": ["read_file", "send_email"]},
    )
    out = reply.structured_content
    assert [c["tools"] for c in out["capabilities"]] == [["read_file", "send_email"]]
    assert (out["removed_by_filters"], out["missing_tools"]) == (0, [])

    # nothing matches at all: nothing removed either
    reply = await client.call_tool(
        "suggest", {"intent": "zzqx vvkw", "available_tools": ["read_file"]}
    )
    out = reply.structured_content
    assert (out["capabilities"], out["removed_by_filters"], out["missing_tools"]) == ([], 0, [])


def test_an_empty_suggest_says_what_its_filters_removed(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _offered_too_little)
