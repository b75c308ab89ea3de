"""`pml mcp`'s resources (one per stored capability, `pml://capabilities/{id}`) and its prompt
(`use_procedure`), through the official MCP SDK's client over stdio and Streamable HTTP, in
front of a real pml server (docs/mcp.md, Resources and prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, make_record
from tests.conftest import StartServer
from tests.mcp.test_server import _http_client, _http_mcp, _run, _stdio

READ = "const d = await mcp.read_file({ path: 'a.json' }); return JSON.parse(d);"
SEND = "await mcp.send_email({ to: 'boss@example.com', body: 'hi' });"


def _store_two(client: PmlClient) -> dict[str, list[str]]:
    """Two capabilities; their names by tools."""
    read = client.record(make_record("Read a JSON file", READ, tools=["read_file"]))
    send = client.record(make_record("Email my boss", SEND, tools=["send_email"]))
    return {"read_file": [read.capability, read.pattern], "send_email": [send.capability]}


async def _resources_and_prompt(client: Client, stored: dict[str, list[str]]) -> None:
    listed = await client.list_resources()
    assert listed.next_cursor is None
    by_title = {r.title: r for r in listed.resources}
    assert set(by_title) == {"read_file", "send_email"}
    read = by_title["read_file"]
    capability, pattern = stored["read_file"]
    assert str(read.uri) == "pml://capabilities/" + capability.removeprefix("capabilities/")
    assert read.mime_type == "application/json"
    assert "Read a JSON file" in (read.description or "")

    templates = await client.list_resource_templates()
    assert [t.uri_template for t in templates.resource_templates] == ["pml://capabilities/{id}"]

    contents = (await client.read_resource(read.uri)).contents
    body = json.loads(contents[0].text)  # type: ignore[union-attr]
    assert body["capability"] == capability
    assert body["tools"] == ["read_file"]
    assert body["best_pattern"]["name"] == pattern
    assert "$PATH" in body["best_pattern"]["template"]

    with pytest.raises(MCPError, match="no capability 'cap_nope'"):
        await client.read_resource("pml://capabilities/cap_nope")

    prompts = (await client.list_prompts()).prompts
    assert [(p.name, [a.name for a in p.arguments or []]) for p in prompts] == [
        ("use_procedure", ["task"])
    ]
    got = await client.get_prompt("use_procedure", {"task": "Load a JSON file"})
    text = got.messages[0].content.text  # type: ignore[union-attr]
    assert text.startswith("Task: Load a JSON file")
    assert pattern in text
    assert "Call these tools in this order: read_file." in text
    assert "$PATH (string)" in text
    assert "mcp.read_file({ path: $PATH })" in text
    assert "record_execution" in text
    with pytest.raises(MCPError, match=r"^invalid argument: task: ") as bad:
        await client.get_prompt("use_procedure", {"task": ""})
    assert bad.value.code == -32602
    with pytest.raises(MCPError, match="unknown prompt: nope") as unknown:
        await client.get_prompt("nope", {})
    assert unknown.value.code == -32602


def test_resources_and_prompt_over_stdio_and_http(server: RunningServer, client: PmlClient) -> None:
    stored = _store_two(client)
    target = f"127.0.0.1:{server.port}"

    async def body(mcp: Client) -> None:
        await _resources_and_prompt(mcp, stored)

    _run(_stdio(target), body)
    with _http_mcp(target) as url:
        _run(_http_client(url), body)


def test_prompt_without_a_known_procedure_says_how_to_record_one(server: RunningServer) -> None:
    async def body(mcp: Client) -> None:
        assert (await mcp.list_resources()).resources == []
        got = await mcp.get_prompt("use_procedure", {"task": "Book a flight to Oslo"})
        text = got.messages[0].content.text  # type: ignore[union-attr]
        assert "pml knows no procedure for this task yet" in text
        assert "record_execution" in text

    _run(_stdio(f"127.0.0.1:{server.port}"), body)


def test_resources_are_listed_a_page_at_a_time(server: RunningServer, client: PmlClient) -> None:
    for i in range(101):
        code = f"await mcp.tool_{i}({{ x: 1 }});"
        client.record(make_record(f"task number {i}", code, tools=[f"tool_{i}"]))

    async def body(mcp: Client) -> None:
        first = await mcp.list_resources()
        assert len(first.resources) == 100
        assert first.next_cursor
        second = await mcp.list_resources(cursor=first.next_cursor)
        assert len(second.resources) == 1
        assert second.next_cursor is None
        uris = {str(r.uri) for r in [*first.resources, *second.resources]}
        assert len(uris) == 101

    _run(_stdio(f"127.0.0.1:{server.port}"), body)


def test_http_resources_are_the_bearer_keys_tenant(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    keys_file, found = keys
    server = start(keys_file=keys_file)
    target = f"127.0.0.1:{server.port}"
    with PmlClient(target, api_key=found["acme-write"]) as acme:
        stored = _store_two(acme)
    capability = stored["read_file"][0].removeprefix("capabilities/")

    async def as_acme(mcp: Client) -> None:
        assert len((await mcp.list_resources()).resources) == 2
        got = await mcp.get_prompt("use_procedure", {"task": "Load a JSON file"})
        assert "read_file" in got.messages[0].content.text  # type: ignore[union-attr]

    async def as_globex(mcp: Client) -> None:
        assert (await mcp.list_resources()).resources == []
        with pytest.raises(MCPError, match="no capability"):
            await mcp.read_resource(f"pml://capabilities/{capability}")
        got = await mcp.get_prompt("use_procedure", {"task": "Load a JSON file"})
        assert "knows no procedure" in got.messages[0].content.text  # type: ignore[union-attr]

    with _http_mcp(target) as url:
        _run(_http_client(url, found["acme-read"]), as_acme)
        _run(_http_client(url, found["globex-admin"]), as_globex)


def test_an_id_pml_refuses_is_an_unknown_capability(server: RunningServer) -> None:
    """A resource id pml refuses as a name (a tab, DEL inside it) is the caller's mistake:
    -32602 `no capability 'ID'`, as an unknown id is (before: -32603 Internal error saying
    `invalid argument: name: ...`, an argument the caller never passed)."""

    async def body(mcp: Client) -> None:
        for bad in ("cap\tx", "cap\x7fx"):
            with pytest.raises(MCPError) as refused:
                await mcp.read_resource(f"pml://capabilities/{bad}")
            assert refused.value.code == -32602, refused.value
            assert str(refused.value) == f"no capability {bad!r}", refused.value

    _run(_stdio(f"127.0.0.1:{server.port}"), body)
