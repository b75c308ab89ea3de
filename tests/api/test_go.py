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

from pml_server.config import config_of
from tests.conftest import StartServer
from tests.support import open_engine, refusing_its_first_batch

GO_CLIENT = Path(__file__).resolve().parents[2] / "clients" / "go"


@pytest.mark.slow
def test_go_client_records_streams_and_suggests() -> None:
    go = shutil.which("go")
    if go is None:
        pytest.fail("Go is needed for the Go client test (no `go` on PATH); install Go 1.26+")
    env = {**os.environ, "PML_BIN": str(Path(sys.executable).parent / "pml")}
    done = _go_test(go, env, "./...")
    assert "ok  \tpml/clients/go" in done.stdout


@pytest.mark.slow
def test_go_upload_resends_what_the_server_acknowledged_as_unavailable(
    start: StartServer, tmp_path: Path
) -> None:
    """As the Python client: executions acknowledged UNAVAILABLE (the server's index still
    catching up after a start) were not captured, and are resent on a new stream; once the
    reconnects run out, the server's error is their acknowledgement. No flag of `pml serve`
    makes such servers, so they run here and the Go tests are given their addresses."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("Go is needed for the Go client test (no `go` on PATH); install Go 1.26+")
    engine, refused = refusing_its_first_batch(tmp_path / "first")
    refusing = start(engine=engine)
    never_ready = open_engine(config_of(data_dir=tmp_path / "never", embedder="hashing"))
    never_ready._state.readiness.clear()
    names = [
        "TestUploadResendsWhatTheServerAcknowledgedAsUnavailable",
        "TestUploadOutOfReconnectsAnswersWithTheServersError",
    ]
    env = {
        **os.environ,
        "PML_REFUSING_FIRST_BATCH": f"127.0.0.1:{refusing.port}",
        "PML_NEVER_READY": f"127.0.0.1:{start(engine=never_ready).port}",
    }
    done = _go_test(go, env, "-v", "-run", f"^({'|'.join(names)})$", ".")
    for name in names:
        assert f"--- PASS: {name}" in done.stdout  # run, not skipped
    assert refused == [1]  # the server did acknowledge a batch UNAVAILABLE


def _go_test(go: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`go test -count=1 ARGS` in the Go client, its dependencies downloaded first exactly as
    go.sum pins them; asserts it passed."""
    subprocess.run([go, "mod", "download"], cwd=GO_CLIENT, env=env, check=True, timeout=600)
    done = subprocess.run(
        [go, "test", "-count=1", *args],
        cwd=GO_CLIENT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done
