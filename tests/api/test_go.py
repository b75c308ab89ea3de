"""The Go client (clients/go) against real `pml serve` processes: `go test` there starts the
servers itself (the repository's .venv/bin/pml on a free port), records, streams (resending
after a stream is cut in the middle) and suggests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GO_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "go"


@pytest.mark.slow
def test_go_client_records_streams_and_suggests() -> None:
    go = shutil.which("go")
    if go is None:
        pytest.fail("Go is needed for the Go client test (no `go` on PATH); install Go 1.26+")
    env = {**os.environ, "PML_BIN": str(Path(sys.executable).parent / "pml")}
    # The module's dependencies, exactly as go.sum pins them.
    subprocess.run([go, "mod", "download"], cwd=GO_CLIENT, env=env, check=True, timeout=600)
    done = subprocess.run(
        [go, "test", "-count=1", "./..."],
        cwd=GO_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "ok  \tpml/clients/go" in done.stdout
