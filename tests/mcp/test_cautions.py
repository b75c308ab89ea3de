"""The MCP `suggest` tool's structured output carries each suggestion's cautions (docs/ranking.md,
Weak matches), through the official MCP SDK's client against a real pml server."""

from __future__ import annotations

from mcp import Client

from pml_server.api.server import RunningServer
from tests.mcp.test_server import _record_args, _run, _stdio

WRITE = "await mcp.write_file({ path: 'o.json' });"


async def _read_and_write(client: Client) -> None:
    for n, intent in enumerate(["Read JSON file", "Parse JSON from disk", "Load JSON data"]):
        done = await client.call_tool("record_execution", _record_args(intent, request_id=f"r{n}"))
        assert not done.is_error
    write = _record_args(
        "Write JSON file", code=WRITE, tool_calls=[{"tool": "write_file", "ok": True}]
    )
    assert not (await client.call_tool("record_execution", write)).is_error

    listed = {t.name: t for t in (await client.list_tools()).tools}
    schema = listed["suggest"].output_schema
    assert schema is not None
    assert "cautions" in schema["$defs"]["CapabilityOut"]["required"]

    reply = await client.call_tool("suggest", {"intent": "Load a JSON file"})
    assert not reply.is_error
    by_tools = {tuple(c["tools"]): c for c in reply.structured_content["capabilities"]}
    # (The test server's hashing embedder may call the read pattern's match weak too.)
    assert all(c["kind"] != "contradicts" for c in by_tools[("read_file",)]["cautions"])
    assert {
        "kind": "contradicts",
        "reason": "the request reads ('load'); its tools only write (write_file)",
    } in by_tools[("write_file",)]["cautions"]


def test_suggest_carries_cautions(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _read_and_write)
