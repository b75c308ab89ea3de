"""What `pml mcp`'s `suggest` gives an agent is bounded (docs/mcp.md, Protocol): the best
capabilities within 64 KiB of text, the rest counted and a cut template said, through the
official SDK client over stdio in front of a real pml server (port 0)."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

from mcp import Client

from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, make_record
from pml_server.domain.limits import LIMITS
from tests.mcp.test_server import PYTHONPATH, ROOT, _pml_mcp, _run, _stdio, _text

TEXT_BUDGET = 64 * 1024  # LIMITS.mcp_suggest


def _record_large_patterns(server: RunningServer, count: int, code_bytes: int) -> int:
    """How many capabilities pml itself suggests for "load the table" at k = 100."""
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        for i in range(count):
            code = f"await mcp.load_{i}({{table: 't{i}'}});\n// " + "x" * code_bytes + "\n"
            client.record(make_record(f"load the table {i}", code, tools=[f"load_{i}"]))
        return len(client.suggest("load the table", 100).suggestions)


def test_suggest_at_k_100_over_large_patterns_stays_within_its_text_budget(
    server: RunningServer,
) -> None:
    """100 capabilities whose templates are 30 KB each: k = 100 was 2.2 MB of text for the
    agent (the same again as structuredContent). Now the best that fit 64 KiB, best first,
    with how many were left out; each pattern whole through get_pattern."""
    suggested = _record_large_patterns(server, 100, 30_000)
    assert suggested > 50
    seen: dict[str, Any] = {}

    async def body(client: Client) -> None:
        answer = await client.call_tool("suggest", {"intent": "load the table", "k": 100})
        assert not answer.is_error, _text(answer)
        seen["text"], seen["structured"] = _text(answer), answer.structured_content
        best = answer.structured_content["capabilities"][0]["pattern"]
        whole = await client.call_tool("get_pattern", {"name": best})
        seen["whole"] = whole.structured_content

    _run(_stdio(f"127.0.0.1:{server.port}"), body)
    text, structured = seen["text"], seen["structured"]
    assert len(text.encode()) <= TEXT_BUDGET
    assert json.loads(text) == structured
    kept = len(structured["capabilities"])
    assert kept >= 1
    assert structured["omitted"] == suggested - kept
    assert not any(c["truncated"] for c in structured["capabilities"])
    assert len(seen["whole"]["template"]) > 30_000  # get_pattern: the whole pattern
    assert LIMITS.mcp_suggest.bound == TEXT_BUDGET


def test_a_best_capability_too_large_alone_is_given_cut_and_said_so(
    server: RunningServer,
) -> None:
    """A template of 60 KB (under pml's own 64 KiB trim) with steps: the best capability is
    always given, its template cut and `truncated` set, rather than 130 KB or nothing."""
    calls = "".join(f"await mcp.step_{i}({{k: v{i}, path: p{i}}});\n" for i in range(200))
    code = calls + "// " + "y" * 50_000 + "\n"
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        client.record(make_record("export the big report", code, tools=["step_0"]))
    seen: dict[str, Any] = {}

    async def body(client: Client) -> None:
        answer = await client.call_tool("suggest", {"intent": "export the big report", "k": 5})
        seen["text"], seen["structured"] = _text(answer), answer.structured_content

    _run(_stdio(f"127.0.0.1:{server.port}"), body)
    assert len(seen["text"].encode()) <= TEXT_BUDGET
    best = seen["structured"]["capabilities"][0]
    assert best["truncated"] is True
    assert 0 < len(best["template"]) <= 4096


def test_pml_mcp_refuses_max_tool_calls_past_the_servers_ceiling() -> None:
    """`pml mcp --max-tool-calls` mirrors the server's setting: past its ceiling (which `pml
    serve` refuses) it is refused at start in one sentence, never at a tool call."""
    done = subprocess.run(
        [*_pml_mcp("--server", "127.0.0.1:1", "--max-tool-calls", "5000")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "engine.max_tool_calls must be at most 2048, got 5000" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
