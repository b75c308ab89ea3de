"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
tests/mcp/conformance/package.json with the Node >= 22 it needs, the `node` package's binary)
runs its server scenarios against `pml mcp --transport http` in front of a real pml server.
Every scenario that applies to what pml declares passes; the rest are listed, each with its
reason, in tests/mcp/conformance/expected-failures.yml (docs/mcp.md, Conformance)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from pml_server.api.server import RunningServer
from pml_server.client import PmlClient, make_record
from tests.mcp.test_server import _http_mcp
from tests.support import npm_ci

pytestmark = pytest.mark.node

SUITE = Path(__file__).resolve().parent / "conformance"
BASELINE = SUITE / "expected-failures.yml"
BIN = SUITE / "node_modules" / ".bin"
# The scenarios that test what pml declares (initialize, ping, tools, errors, the listings of
# resources and prompts, DNS rebinding):
# each must pass outright, with no failure and no warning.
APPLICABLE = {
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
}
_RUN_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d\d-\d\dT[\d-]+Z$")


@pytest.fixture(scope="session")
def conformance() -> Path:
    # The `node` package brings its own binary.
    why = "to install the MCP conformance suite"
    npm_ci(SUITE, why, BIN / "conformance", BIN / "node", timeout=600)
    version = subprocess.run(
        [str(BIN / "node"), "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout.strip()
    assert int(version.lstrip("v").split(".")[0]) >= 22, version
    return BIN / "conformance"


def _results(out: Path) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {}
    for run in out.iterdir():
        match = _RUN_DIR.match(run.name)
        assert match, run.name
        found[match["scenario"]] = json.loads((run / "checks.json").read_text())
    return found


def test_conformance_server_scenarios(
    conformance: Path, server: RunningServer, client: PmlClient, tmp_path: Path
) -> None:
    # Something stored, so the resource listing has a capability to check.
    code = "const d = await mcp.read_file({ path: 'a.json' }); return JSON.parse(d);"
    client.record(make_record("Read a JSON file", code, tools=["read_file"]))
    out = tmp_path / "results"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    with _http_mcp(f"127.0.0.1:{server.port}") as url:
        done = subprocess.run(
            [
                str(conformance),
                "server",
                "--url",
                url,
                "--expected-failures",
                str(BASELINE),
                "--output-dir",
                str(out),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=600,
            check=False,
        )
    summary = done.stdout[done.stdout.find("=== SUMMARY ===") :]
    # Non-zero: a scenario failed that the baseline does not list, or a listed one now passes.
    assert done.returncode == 0, summary + done.stderr[-2000:]

    results = _results(out)
    # The baseline's entries: "  - name  # reason" lines (the file has one list, `server`).
    not_applicable = set(re.findall(r"^\s+- ([\w-]+)", BASELINE.read_text(), re.MULTILINE))
    assert set(results) == APPLICABLE | not_applicable, "a scenario is new: classify it"
    for scenario in APPLICABLE:
        statuses = [c["status"] for c in results[scenario]]
        assert "SUCCESS" in statuses, (scenario, statuses)
        assert not {"FAILURE", "WARNING"} & set(statuses), (scenario, results[scenario])
    listed = results["tools-list"][0]["details"]
    assert isinstance(listed, dict)
    assert listed["tools"] == ["suggest", "record_execution", "get_pattern"]
    resources = results["resources-list"][0]["details"]
    assert isinstance(resources, dict)
    assert len(resources["resources"]) == 1
    assert resources["resources"][0].startswith("pml://capabilities/cap_")
    prompts = results["prompts-list"][0]["details"]
    assert isinstance(prompts, dict)
    assert prompts["prompts"] == ["use_procedure"]
