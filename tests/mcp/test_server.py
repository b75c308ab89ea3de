"""`pml mcp` through the official MCP SDK's own client, over stdio and Streamable HTTP, in
front of a real pml server (port 0, RocksDB on disk)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import METHOD_NOT_FOUND, EmptyResult, PromptReference, Request

from pml_server.api.server import RunningServer
from pml_server.client import PmlClient
from tests.api.test_operations import pki  # noqa: F401  (the throwaway CA fixture)
from tests.conftest import StartServer

ROOT = Path(__file__).resolve().parents[2]
# This tree's server and client packages (the client's generated code must match the server's).
PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "clients" / "python")])
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
CODE = "const data = await mcp.read_file({ path: 'data.json' });\nreturn JSON.parse(data);"


def _pml_mcp(*args: str) -> list[str]:
    return [sys.executable, "-m", "pml_server.cli", "mcp", *args]


def _stdio(server: str, *extra: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=_pml_mcp("--server", server, *extra)[1:],
        cwd=str(ROOT),
        env={"PYTHONPATH": PYTHONPATH},
    )
    return Client(params)


@contextmanager
def _http_mcp(server: str, *extra: str) -> Iterator[str]:
    """`pml mcp --transport http` on a free loopback port; yields its URL."""
    with _http_mcp_proc(server, *extra) as (url, _pid):
        yield url


def _http_client(url: str, api_key: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    @asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        # The SDK leaves an http_client it was given open: close it (and its sockets) here.
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(url, http_client=http) as streams,
        ):
            yield streams

    return Client(transport())  # type: ignore[arg-type]


def _run(client: Client, body: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with client:
            await body(client)

    anyio.run(main)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def _assert_tool_error(result: Any, needle: str, lower: bool = False) -> None:
    assert result.is_error
    text = _text(result).lower() if lower else _text(result)
    assert needle in text, text


def _record_args(intent: str = "Read JSON file", **over: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "intent": intent,
        "code": CODE,
        "language": "typescript",
        "tool_calls": [{"tool": "read_file", "ok": True, "arguments": {"path": "data.json"}}],
    }
    return {**args, **over}


async def _exercise_tools(client: Client) -> None:
    """The whole tool surface, as an agent would use it."""
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert set(listed) == {"suggest", "record_execution", "get_pattern"}
    for tool in listed.values():
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None
    assert listed["suggest"].annotations is not None
    assert listed["suggest"].annotations.read_only_hint is True
    assert "intent" in listed["suggest"].input_schema["required"]

    saved = await client.call_tool("record_execution", _record_args(request_id="r-1"))
    assert not saved.is_error, _text(saved)
    assert saved.structured_content["outcome"] == "saved"
    pattern = saved.structured_content["pattern"]
    assert pattern.startswith("patterns/")

    again = await client.call_tool("record_execution", _record_args(request_id="r-1"))
    assert again.structured_content["replayed"] is True

    counted = await client.call_tool("record_execution", _record_args(request_id="r-2"))
    assert counted.structured_content["outcome"] == "counted"

    failed_new = await client.call_tool(
        "record_execution",
        _record_args(
            "Send an email to my boss",
            code="await mcp.send_email({ to: 'boss' });",
            tool_calls=[{"tool": "send_email", "ok": False, "error": "SMTP timeout"}],
        ),
    )
    assert not failed_new.is_error
    assert failed_new.structured_content["outcome"] == "rejected"
    assert failed_new.structured_content["tool_failures"] == [
        {"tool": "send_email", "error": "SMTP timeout"}
    ]

    found = await client.call_tool("suggest", {"intent": "Read JSON file", "k": 3})
    assert not found.is_error, _text(found)
    caps = found.structured_content["capabilities"]
    assert len(caps) == 1
    best = caps[0]
    assert best["pattern"] == pattern
    assert best["tools"] == ["read_file"]
    assert best["template"] == CODE.replace("'data.json'", "$PATH")
    assert best["success"] > 0.5
    assert best["score"]["total"] > 0
    assert best["parameter_schema"]["properties"]["$PATH"]["type"] == "string"

    filtered = await client.call_tool(
        "suggest", {"intent": "Read JSON file", "available_tools": ["write_file"]}
    )
    assert filtered.structured_content["capabilities"] == []

    got = await client.call_tool("get_pattern", {"name": pattern})
    assert not got.is_error, _text(got)
    assert got.structured_content["usage_count"] == 2
    assert got.structured_content["success_count"] == 2
    assert got.structured_content["tools"] == ["read_file"]
    bare = await client.call_tool("get_pattern", {"name": pattern.removeprefix("patterns/")})
    assert bare.structured_content["name"] == pattern

    # Bad arguments: tool errors naming the field, never a crash.
    bad_k = await client.call_tool("suggest", {"intent": "x", "k": 0})
    _assert_tool_error(bad_k, "k")
    no_intent = await client.call_tool("suggest", {"k": 2})
    _assert_tool_error(no_intent, "intent")
    bad_call = await client.call_tool("record_execution", _record_args(tool_calls=[{"ok": True}]))
    _assert_tool_error(bad_call, "tool_calls.0.tool")
    missing = await client.call_tool("get_pattern", {"name": "patterns/pat_0000000000000000"})
    _assert_tool_error(missing, "not_found", lower=True)
    bad_name = await client.call_tool("get_pattern", {"name": "patterns/a/b"})
    _assert_tool_error(bad_name, "name")


def test_stdio_tools_against_real_pml(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _exercise_tools)


def test_http_tools_against_real_pml(server: RunningServer) -> None:
    with _http_mcp(f"127.0.0.1:{server.port}") as url:
        _run(_http_client(url), _exercise_tools)


async def _exercise_sessions(client: Client) -> None:
    """`record_execution`'s session_id teaches what follows what; `suggest`'s session_id and
    previous_tools use it (docs/ranking.md, Sessions)."""
    listing = [{"tool": "list_dir", "ok": True, "arguments": {"path": "."}}]
    code = "await mcp.list_dir({ path: '.' });"
    list_args = _record_args("List the folder", code=code, tool_calls=listing)
    for n in range(2):
        for args in (list_args, _record_args()):
            done = await client.call_tool(
                "record_execution", {**args, "session_id": f"conversation-{n}"}
            )
            assert not done.is_error, _text(done)
    tools = [t for t in (await client.list_tools()).tools if t.name == "record_execution"]
    assert "session_id" in tools[0].input_schema["properties"]
    await client.call_tool("record_execution", {**list_args, "session_id": "now"})
    for context in ({"session_id": "now"}, {"previous_tools": ["list_dir"]}):
        following = await client.call_tool("suggest", {"intent": "", **context})
        assert not following.is_error, _text(following)
        found = following.structured_content["capabilities"]
        assert [c["tools"] for c in found] == [["read_file"]]
    bad = await client.call_tool("record_execution", {**list_args, "session_id": "x" * 129})
    _assert_tool_error(bad, "session_id")


def test_stdio_sessions_against_real_pml(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _exercise_sessions)


def test_pml_down_is_a_tool_error(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def body(client: Client) -> None:
        result = await client.call_tool("suggest", {"intent": "Read JSON file"})
        assert result.is_error
        assert "pml is unavailable" in _text(result)
        assert f"127.0.0.1:{port}" in _text(result)

    _run(_stdio(f"127.0.0.1:{port}"), body)


def test_http_bearer_key_maps_to_its_tenant(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    keys_file, found = keys
    server = start(keys_file=keys_file)
    target = f"127.0.0.1:{server.port}"
    outcome: dict[str, Any] = {}

    async def as_acme(client: Client) -> None:
        saved = await client.call_tool("record_execution", _record_args())
        assert saved.structured_content["outcome"] == "saved", _text(saved)
        outcome["pattern"] = saved.structured_content["pattern"]

    async def as_globex(client: Client) -> None:
        result = await client.call_tool("suggest", {"intent": "Read JSON file"})
        assert result.structured_content["capabilities"] == []

    async def as_reader(client: Client) -> None:
        result = await client.call_tool("record_execution", _record_args())
        _assert_tool_error(result, "write role")
        found_caps = await client.call_tool("suggest", {"intent": "Read JSON file"})
        assert len(found_caps.structured_content["capabilities"]) == 1

    with _http_mcp(target, "--api-key", found["globex-admin"]) as url:
        _run(_http_client(url, found["acme-write"]), as_acme)
        _run(_http_client(url, found["globex-admin"]), as_globex)
        # The server's own --api-key is never lent to an HTTP caller without a key: a missing
        # or unknown key is refused at the HTTP level.
        for headers in ({}, {"Authorization": "Bearer pml_not-a-key"}):
            refused = httpx2.post(url, json=LIST_TOOLS, headers={**JSON_HEADERS, **headers})
            assert refused.status_code == 401
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert "API key" in refused.json()["error_description"]
        _run(_http_client(url, found["acme-read"]), as_reader)
    # Exactly the tenant gRPC gives the same key.
    with PmlClient(target, api_key=found["acme-read"]) as grpc_client:
        assert grpc_client.get_pattern(outcome["pattern"]).name == outcome["pattern"]
    with PmlClient(target, api_key=found["globex-admin"]) as grpc_client:
        assert list(grpc_client.iter_patterns()) == []


def test_http_a_key_no_pml_takes_is_refused_at_the_http_level(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """A bearer key that is not printable ASCII (a pasted accent, a tab, DEL), which no pml
    key is, gets 401 as an unknown key does (before: 200, tools listed and a session opened
    whose every tool call failed `invalid argument: api_key: ...`)."""
    keys_file, found = keys
    server = start(keys_file=keys_file)
    good = found["acme-read"].encode()
    with _http_mcp(f"127.0.0.1:{server.port}") as url, httpx2.Client(timeout=10) as http:
        for key in (b"pml_cl\xe9", good + b"\xe9", good[:8] + b"\t" + good[8:], good + b"\x7f"):
            headers = {**JSON_HEADERS, "Authorization": b"Bearer " + key}
            refused = http.post(url, json=LIST_TOOLS, headers=headers)
            assert refused.status_code == 401, (key, refused.text)
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert "api_key" in refused.json()["error_description"]
        listed = http.post(
            url, json=LIST_TOOLS, headers={**JSON_HEADERS, "Authorization": b"Bearer " + good}
        )
        assert listed.status_code == 200, listed.text


def test_http_a_key_too_long_for_grpc_metadata_is_refused_as_unknown(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """A printable key over gRPC's metadata limit (8 KiB) is no pml key either: 401 as an
    unknown key, never forwarded (gRPC's refusal of the metadata is no refusal of the key: the
    request went through to a session whose every call failed)."""
    keys_file, found = keys
    server = start(keys_file=keys_file)
    good = found["acme-read"]
    with _http_mcp(f"127.0.0.1:{server.port}") as url, httpx2.Client(timeout=10) as http:
        for key in (good + "x" * 1000, "pml_" + "a" * 20_000):
            headers = {**JSON_HEADERS, "Authorization": f"Bearer {key}"}
            refused = http.post(url, json=LIST_TOOLS, headers=headers)
            assert refused.status_code == 401, refused.text[:500]
            assert refused.headers["www-authenticate"].startswith("Bearer")
            assert "api_key" in refused.json()["error_description"]
            assert key not in refused.text  # a secret is never echoed


def test_http_refuses_foreign_host_and_origin(server: RunningServer) -> None:
    body, headers = LIST_TOOLS, JSON_HEADERS
    with _http_mcp(f"127.0.0.1:{server.port}") as url, httpx2.Client(timeout=10) as http:
        rebound = http.post(url, json=body, headers={**headers, "Host": "evil.example:80"})
        assert rebound.status_code == 421
        foreign = http.post(url, json=body, headers={**headers, "Origin": "http://evil.example"})
        assert foreign.status_code == 403
        local = http.post(url, json=body, headers={**headers, "Origin": "http://localhost:3000"})
        assert local.status_code != 403


def test_http_allowed_host_with_its_default_port_takes_the_host_as_clients_send_it(
    server: RunningServer,
) -> None:
    """`--allowed-host pml.example:443`, as `pml mcp --help` shows it, behind a TLS front at
    https://pml.example/mcp: every client (httpx, curl, a browser) and a proxy passing the
    Host on send `Host: pml.example`, the default port left out (RFC 9110, 7.2). Before, that
    was 421 for every request; the name alone is now taken for :443 and :80, and nothing
    else is."""
    extra = ["--allowed-host", "pml.example:443", "--allowed-host", "plain.example:80"]
    extra += ["--allowed-host", "any.example:*"]
    with (
        _http_mcp(f"127.0.0.1:{server.port}", *extra) as url,
        httpx2.Client(timeout=10) as http,
    ):
        accepted = ["pml.example", "pml.example:443", "plain.example", "plain.example:80"]
        for host in [*accepted, "any.example:8443"]:
            taken = http.post(url, json=LIST_TOOLS, headers={**JSON_HEADERS, "Host": host})
            assert taken.status_code == 200, (host, taken.text)
        for host in ("pml.example:8443", "plain.example:443", "evil.example", "any.example"):
            refused = http.post(url, json=LIST_TOOLS, headers={**JSON_HEADERS, "Host": host})
            assert refused.status_code == 421, host


def test_http_refuses_non_loopback_without_flag() -> None:
    done = subprocess.run(
        _pml_mcp("--transport", "http", "--listen", "0.0.0.0:0"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    assert done.returncode == 2
    assert "--allow-remote" in done.stderr


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_tls_file_it_cannot_read_stops_pml_mcp_at_start(tmp_path: Path, transport: str) -> None:
    """`--tls-ca` (or `--tls-cert`, `--tls-key`) naming a file that cannot be read: `pml mcp`
    says which and exits 2, as the other client commands do (before: it served, and every
    tool call answered `Error executing tool suggest`, no reason given, each with a traceback
    on stderr)."""
    missing = tmp_path / "ca.pem"
    done = subprocess.run(
        _pml_mcp("--transport", transport, "--listen", "127.0.0.1:0", "--tls-ca", str(missing)),
        cwd=ROOT,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"pml mcp: error: {missing}: No such file or directory\n"


@pytest.mark.parametrize("given", ["--api-key", "PML_API_KEY"])
def test_an_api_key_that_cannot_be_sent_stops_pml_mcp_stdio_at_start(given: str) -> None:
    """Over stdio the key is the process's: one that cannot be sent (a control character)
    stops `pml mcp` at start, as it stops the other client commands (before: it served, and
    every tool call failed `invalid argument: api_key: ...`, an argument no tool has)."""
    key = "bad\x01key"
    argv = ["--api-key", key] if given == "--api-key" else []
    env = {"PML_API_KEY": key} if given == "PML_API_KEY" else {}
    done = subprocess.run(
        _pml_mcp("--server", "127.0.0.1:1", *argv),
        cwd=ROOT,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": PYTHONPATH, **env},
    )
    named = given if given == "--api-key" else f"${given}"
    assert (done.returncode, done.stderr) == (
        2,
        f"pml mcp: error: {named} holds b'\\x01' at position 3: a key is printable ASCII (as "
        "`pml keys add` prints it)\n",
    )


def test_stdio_uses_its_api_key(start: StartServer, keys: tuple[Path, dict[str, str]]) -> None:
    keys_file, found = keys
    server = start(keys_file=keys_file)

    async def body(client: Client) -> None:
        saved = await client.call_tool("record_execution", _record_args())
        assert saved.structured_content["outcome"] == "saved", _text(saved)

    _run(_stdio(f"127.0.0.1:{server.port}", "--api-key", found["acme-write"]), body)
    with PmlClient(f"127.0.0.1:{server.port}", api_key=found["acme-read"]) as c:
        assert len(list(c.iter_patterns())) == 1

    async def keyless(client: Client) -> None:
        # Over stdio the key is pml mcp's own: the refusal says where it goes, not a header.
        result = await client.call_tool("suggest", {"intent": "Read JSON file"})
        _assert_tool_error(result, "give pml mcp --api-key KEY or set PML_API_KEY")

    _run(_stdio(f"127.0.0.1:{server.port}"), keyless)


def test_stdio_over_mutual_tls(start: StartServer, pki: Path) -> None:  # noqa: F811
    server = start(
        tls_cert=pki / "server.pem", tls_key=pki / "server.key", tls_client_ca=pki / "ca.pem"
    )
    target = f"127.0.0.1:{server.port}"
    tls = ("--tls-ca", str(pki / "ca.pem"))
    client_cert = ("--tls-cert", str(pki / "client.pem"), "--tls-key", str(pki / "client.key"))

    async def works(client: Client) -> None:
        result = await client.call_tool("suggest", {"intent": "Read JSON file"})
        assert not result.is_error, _text(result)
        assert result.structured_content == {
            "capabilities": [],
            "plans": [],
            "read_as_follow_up": False,
            "omitted": 0,
            "removed_by_filters": 0,
            "missing_tools": [],
        }

    async def refused(client: Client) -> None:
        result = await client.call_tool("suggest", {"intent": "Read JSON file"})
        # a TLS refusal, not an outage: the tool error names the flags that mend it
        _assert_tool_error(result, "asks for a client certificate")
        _assert_tool_error(result, "pass --tls-cert and --tls-key")
        assert "is it running" not in _text(result)

    _run(_stdio(target, *tls, *client_cert), works)
    _run(_stdio(target, *tls), refused)


def _readme_mcp_config() -> dict[str, Any]:
    """The Claude Desktop configuration the README shows, parsed from its JSON block."""
    import json
    import re

    readme = (ROOT / "README.md").read_text()
    for block in re.findall(r"```json\n(.*?)```", readme, re.S):
        if '"mcpServers"' in block and '"command"' in block:
            config: dict[str, Any] = json.loads(block)["mcpServers"]["pml"]
            return config
    raise AssertionError("no stdio mcpServers configuration in README.md")


def test_the_readmes_mcp_configuration_works_as_written(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """The README's `"env": {"PML_API_KEY": ...}` configuration, run as an MCP host runs it
    (the `pml` command, its args, its env), against a keyed server. Before, `pml mcp` ignored
    PML_API_KEY (pml refused the key) and, without --server, PML_SERVER and the default address
    (every call failed with a traceback). The only changes: the real key and the server's port."""
    keys_file, found = keys
    server = start(keys_file=keys_file)
    target = f"127.0.0.1:{server.port}"
    config = _readme_mcp_config()
    assert config["command"] == "pml"
    args = [target if a.startswith("127.0.0.1:") else a for a in config["args"]]
    env = {k: found["acme-write"] if k == "PML_API_KEY" else v for k, v in config["env"].items()}
    pml = str(Path(sys.executable).parent / "pml")

    expected = ["saved", "counted"]  # the second run reaches the same tenant

    async def body(client: Client) -> None:
        saved = await client.call_tool("record_execution", _record_args())
        assert saved.structured_content["outcome"] == expected.pop(0), _text(saved)
        found_caps = await client.call_tool("suggest", {"intent": "Read JSON file"})
        assert len(found_caps.structured_content["capabilities"]) == 1, _text(found_caps)

    base = {"PYTHONPATH": PYTHONPATH, "PATH": os.environ.get("PATH", "")}
    as_written = StdioServerParameters(command=pml, args=args, cwd=str(ROOT), env={**base, **env})
    _run(Client(as_written), body)
    # and with the server given by PML_SERVER instead of --server
    without_flag = [a for a in args if a not in ("--server", target)]
    by_env = {**base, **env, "PML_SERVER": target}
    _run(
        Client(StdioServerParameters(command=pml, args=without_flag, cwd=str(ROOT), env=by_env)),
        body,
    )


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextmanager
def _http_mcp_proc(server: str, *extra: str) -> Iterator[tuple[str, int]]:
    """`pml mcp --transport http` on a free loopback port; yields its URL and process id (to
    count its descriptors)."""
    proc = subprocess.Popen(
        _pml_mcp("--server", server, "--transport", "http", "--listen", "127.0.0.1:0", *extra),
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "listening on" in line, line
        yield line.rsplit(" ", 1)[-1].strip(), proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_http_unknown_key_flood_never_fails_legitimate_calls(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    """Unknown keys in parallel with legitimate calls: each unknown key gets 401, no legitimate
    call fails (before: refused keys filled the 64-channel cache and evicted channels in use)."""
    keys_file, found = keys
    server = start(keys_file=keys_file)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "suggest", "arguments": {"intent": "Read JSON file"}},
    }
    with _http_mcp_proc(f"127.0.0.1:{server.port}") as (url, pid):
        failures: list[str] = []
        refused = 0

        async def flood(start_at: int) -> None:
            nonlocal refused
            async with httpx2.AsyncClient(timeout=60) as http:
                for i in range(start_at, start_at + 100):
                    r = await http.post(
                        url,
                        json=LIST_TOOLS,
                        headers={**JSON_HEADERS, "Authorization": f"Bearer pml_flood{i}"},
                    )
                    refused += r.status_code == 401

        async def legit(key: str) -> None:
            headers = {**JSON_HEADERS, "Authorization": f"Bearer {key}"}
            async with httpx2.AsyncClient(timeout=60) as http:
                for _ in range(40):
                    r = await http.post(url, json=call, headers=headers)
                    if r.status_code != 200 or r.json()["result"].get("isError"):
                        failures.append(r.text[:200])

        async def main() -> None:
            async with anyio.create_task_group() as tg:
                for n in range(6):
                    tg.start_soon(flood, n * 1000)
                for key in ("acme-read", "acme-write", "globex-admin"):
                    tg.start_soon(legit, found[key])

        anyio.run(main)
        assert failures == []
        assert refused == 600
        assert _fds(pid) < 200


def test_http_get_is_405_and_holds_nothing(server: RunningServer) -> None:
    """GET on the endpoint is answered 405 at once (stateless: no event stream), so many GETs
    hold no descriptors (before: each opened a stream that never ended)."""
    with _http_mcp_proc(f"127.0.0.1:{server.port}") as (url, pid), httpx2.Client(timeout=10) as h:
        for _ in range(300):
            r = h.get(url, headers={"Accept": "text/event-stream"})
            assert r.status_code == 405
            assert r.headers["allow"] == "POST"
        gone = h.delete(url, headers={"Mcp-Session-Id": "s1"})
        assert gone.status_code == 405  # stateless: no session to end, as Allow says
        assert _fds(pid) < 100


def test_http_invalid_ids_and_host_before_key(
    start: StartServer, keys: tuple[Path, dict[str, str]]
) -> None:
    keys_file, found = keys
    server = start(keys_file=keys_file)
    auth = {"Authorization": f"Bearer {found['acme-read']}"}
    with _http_mcp(f"127.0.0.1:{server.port}") as url, httpx2.Client(timeout=10) as http:
        for bad in (None, {"a": 1}, [1], True):
            r = http.post(url, json={**LIST_TOOLS, "id": bad}, headers={**JSON_HEADERS, **auth})
            assert r.status_code == 400, (bad, r.status_code, r.text)
            assert r.json()["error"]["code"] == -32600
            assert "id" in r.json()["error"]["message"]
        # A foreign Host is refused as such, key or no key.
        rebound = http.post(url, json=LIST_TOOLS, headers={**JSON_HEADERS, "Host": "evil.example"})
        assert rebound.status_code == 421


async def _protocol_details(client: Client) -> None:
    caps = client.server_capabilities
    assert caps.tools is not None
    # Resources and prompts are served (docs/mcp.md, Resources and prompt); nothing else is.
    assert caps.prompts is not None
    assert caps.resources is not None
    assert caps.logging is None
    assert caps.completions is None
    # A method behind a capability not advertised is -32601 Method not found, whatever its
    # params (docs/mcp.md, Protocol): an argument without its value was -32602 as if served.
    with pytest.raises(MCPError) as refused:
        await client.complete(PromptReference(name="suggest"), {"name": "task", "value": "x"})
    assert (refused.value.error.code, refused.value.error.data) == (-32601, "completion/complete")
    ref = {"type": "ref/prompt", "name": "suggest"}
    for method, params in [
        ("completion/complete", {"ref": ref, "argument": {"name": "task"}}),
        ("completion/complete", {}),
        ("logging/setLevel", {"level": "loud"}),
    ]:
        request = Request[dict[str, Any], str](method=method, params=params)
        with pytest.raises(MCPError) as refused:
            await client.session.send_request(request, EmptyResult)
        assert (refused.value.error.code, refused.value.error.data) == (-32601, method)
    bad_k = await client.call_tool("suggest", {"intent": "x", "k": 0})
    text = _text(bad_k)
    assert bad_k.is_error
    assert text.startswith("invalid argument: k: ")
    assert "pydantic" not in text
    assert "http" not in text
    assert "\n" not in text
    listed = {t.name: t for t in (await client.list_tools()).tools}
    schema = listed["get_pattern"].output_schema
    assert schema is not None
    values = schema["$defs"]["Parameter"]["properties"]["recent_values"]
    assert values["items"]["type"]


def test_protocol_details_through_the_sdk(server: RunningServer) -> None:
    _run(_stdio(f"127.0.0.1:{server.port}"), _protocol_details)
    with _http_mcp(f"127.0.0.1:{server.port}") as url:
        _run(_http_client(url), _protocol_details)
        r = httpx2.post(
            url,
            json={**LIST_TOOLS, "method": "prompts/get", "params": {"name": "nope"}},
            headers=JSON_HEADERS,
        )
        assert r.json()["error"]["code"] in (-32601, -32602)
        for method, params in [
            ("completion/complete", {}),
            ("logging/setLevel", {"level": 3}),
            ("resources/subscribe", {}),
        ]:
            r = httpx2.post(
                url, json={**LIST_TOOLS, "method": method, "params": params}, headers=JSON_HEADERS
            )
            assert r.json()["error"] == {
                "code": METHOD_NOT_FOUND,
                "message": "Method not found",
                "data": method,
            }


def test_an_unserved_methods_name_is_echoed_clipped(server: RunningServer) -> None:
    """A 1 MB JSON-RPC method name came back whole in -32601's `data`, into the agent's
    context; it is clipped as every name a caller sends is (its start and its length)."""
    method = "completion/" + "x" * 1_000_000
    with _http_mcp(f"127.0.0.1:{server.port}") as url:
        r = httpx2.post(
            url, json={**LIST_TOOLS, "method": method, "params": {}}, headers=JSON_HEADERS
        )
    assert r.json()["error"] == {
        "code": METHOD_NOT_FOUND,
        "message": "Method not found",
        "data": f"{method[:64]}... ({len(method)} characters)",
    }


def test_first_call_after_pml_restarts_succeeds(tmp_path: Path) -> None:
    from tests.support import spawn_pml_serve, stop_pml_serve

    data = str(tmp_path / "data")
    flags = ("--data-dir", data, "--embedder", "hashing")
    proc, target = spawn_pml_serve("--listen", "127.0.0.1:0", *flags)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "suggest", "arguments": {"intent": "Read JSON file"}},
    }
    try:
        with _http_mcp(target) as url, httpx2.Client(timeout=60) as http:
            first = http.post(url, json=call, headers=JSON_HEADERS).json()
            assert first["result"]["isError"] is False, first
            stop_pml_serve(proc)
            proc, _ = spawn_pml_serve("--listen", target, *flags)
            again = http.post(url, json=call, headers=JSON_HEADERS).json()
            assert again["result"]["isError"] is False, again
    finally:
        stop_pml_serve(proc)


@pytest.mark.slow
def test_first_call_after_a_long_pml_outage_succeeds(tmp_path: Path) -> None:
    """pml down for half a minute while `pml mcp` (stdio) runs and is called: the first call
    once pml is back succeeds (before: gRPC's reconnect backoff, grown over the outage, kept
    the channel failing `pml is unavailable ... (is it running?)` for seconds after pml was
    back, over a few calls; docs/mcp.md, Protocol)."""
    from tests.support import spawn_pml_serve, stop_pml_serve

    flags = ("--data-dir", str(tmp_path / "data"), "--embedder", "hashing")
    proc, target = spawn_pml_serve("--listen", "127.0.0.1:0", *flags)

    async def body(client: Client) -> None:
        nonlocal proc
        assert not (await client.call_tool("suggest", {"intent": "Read JSON file"})).is_error
        stop_pml_serve(proc)
        down = await client.call_tool("suggest", {"intent": "Read JSON file"})
        _assert_tool_error(down, "pml is unavailable at ")
        await anyio.sleep(30)  # the channel's reconnect backoff grows meanwhile
        proc, _ = spawn_pml_serve("--listen", target, *flags)
        back = await client.call_tool("suggest", {"intent": "Read JSON file"})
        assert not back.is_error, _text(back)

    try:
        _run(_stdio(target), body)
    finally:
        stop_pml_serve(proc)


def test_get_pattern_gives_the_most_frequent_intents_and_how_many(server: RunningServer) -> None:
    """GetPattern answers up to a thousand intents; the MCP tool hands an agent the 20 most
    frequent and the count, not all of them."""
    from pml_server.client import make_record
    from pml_server.mcp._models import PATTERN_INTENTS

    words = [
        "amber",
        "basalt",
        "cobalt",
        "dune",
        "ember",
        "fjord",
        "garnet",
        "harbor",
        "indigo",
        "jasper",
        "kelp",
        "lagoon",
    ]
    code = 'await mcp.read_file({path: "a.json"})'
    with PmlClient(f"127.0.0.1:{server.port}") as grpc_client:
        intents = [f"{a} {b} report" for a in words for b in words[:3] if a != b]
        for text in intents:
            saved = grpc_client.record(make_record(text, code, tools=["read_file"]))
        pattern = saved.pattern
        count = grpc_client.get_pattern(pattern).intent_count
    assert count > PATTERN_INTENTS

    async def body(client: Client) -> None:
        got = await client.call_tool("get_pattern", {"name": pattern})
        assert not got.is_error, _text(got)
        assert len(got.structured_content["intents"]) == PATTERN_INTENTS
        assert got.structured_content["intent_count"] == count

    _run(_stdio(f"127.0.0.1:{server.port}"), body)
