"""A client in another language (Node, @grpc/grpc-js + @grpc/proto-loader over the same proto)
records and suggests against the running server."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from pml_server.api.server import RunningServer

NODE_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "node"


@pytest.fixture(scope="session")
def node_client() -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.fail("Node.js and npm are needed for the cross-language client test")
    if not (NODE_CLIENT / "node_modules" / "@grpc" / "grpc-js").is_dir():
        # Exact versions from the committed lock file.
        subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NODE_CLIENT,
            check=True,
            timeout=300,
        )
    return NODE_CLIENT


def test_node_client_records_and_suggests(node_client: Path, server: RunningServer) -> None:
    done = subprocess.run(
        ["node", "record_and_suggest.js", f"127.0.0.1:{server.port}"],
        cwd=node_client,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["outcomes"] == [
        "CAPTURE_OUTCOME_SAVED",
        "CAPTURE_OUTCOME_COUNTED",
        "CAPTURE_OUTCOME_COUNTED",
    ]
    best = summary["best"]
    assert best["tools"] == ["read_file", "parse_json"]
    assert best["usage"] == 3
    assert best["score"]["total"] > 0
    assert summary["refused"]["code"] == "INVALID_ARGUMENT"
    assert summary["refused"]["details"] == ["type.googleapis.com/google.rpc.BadRequest"]
