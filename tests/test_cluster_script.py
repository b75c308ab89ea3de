"""`make cluster`'s script (tools/cluster.sh): with a port taken it stops at once, naming the
replica or PostgreSQL and the port and saying why (from the process's log when it did start);
with no ports given it picks free ones and serves."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "cluster.sh"


@pytest.fixture
def cluster_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    # PostgreSQL runs as the postgres user when we are root: its directory must be reachable,
    # which pytest's own tmp_path (under a 0700 directory) is not.
    root = Path(tempfile.mkdtemp(prefix="pml-cluster-"))
    pml = tmp_path / "pml"
    pml.write_text(f'#!/bin/sh\nexec {sys.executable} -m pml_server.cli "$@"\n')
    pml.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PML_")}
    env.update(
        PML_BIN=str(pml),
        PML_PYTHON=sys.executable,
        PML_CLUSTER_DIR=str(root),
        PYTHONPATH=str(ROOT),
    )
    try:
        yield env
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _taken_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # The timeout only guards against a hang (the script used to wait minutes in silence).
    return subprocess.run(
        ["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_taken_postgres_port_is_named(cluster_env: dict[str, str]) -> None:
    with _taken_port() as held:
        port = held.getsockname()[1]
        done = _run({**cluster_env, "PML_CLUSTER_PG_PORT": str(port)})
    assert done.returncode == 1
    assert f"PostgreSQL cannot use port {port}: Address already in use" in done.stderr
    assert "replica" not in done.stdout


def test_taken_replica_port_is_named(cluster_env: dict[str, str]) -> None:
    with _taken_port() as probe:
        other = probe.getsockname()[1]
    with _taken_port() as held:
        port = held.getsockname()[1]
        done = _run({**cluster_env, "PML_CLUSTER_PORTS": f"{other} {port}"})
    assert done.returncode == 1
    assert f"replica b cannot use port {port}: Address already in use" in done.stderr
    assert "replica b on" not in done.stdout


def test_replica_that_cannot_bind_is_read_from_its_log(cluster_env: dict[str, str]) -> None:
    """The same port for both replicas: it is free when checked, so both start, and the one
    that loses the race logs `could not bind`: the script reports that replica (whichever it
    is) instead of announcing a replica that is not there."""
    with _taken_port() as probe:
        port = probe.getsockname()[1]
    done = _run({**cluster_env, "PML_CLUSTER_PORTS": f"{port} {port}"})
    assert done.returncode == 1, done.stdout
    assert re.search(
        rf"replica [ab] \(127\.0\.0\.1:{port}, metrics :{port + 1000}\) exited: "
        rf"pml serve: error: could not bind 127\.0\.0\.1:{port}",
        done.stderr,
    ), done.stderr
    assert "replica a on" not in done.stdout
    assert "cluster stopped" in done.stdout


def test_free_ports_by_default(cluster_env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        ["bash", str(SCRIPT)],
        env=cluster_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: nothing of it outlives the test
        # Ctrl-C as a terminal delivers it, even when this test runs where SIGINT is ignored (a
        # shell's background job: bash could not trap an ignored signal)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Ctrl-C stops"):
                break
        text = "".join(lines)
        assert "replica a on 127.0.0.1:" in text, text
        assert "replica b on 127.0.0.1:" in text, text
        ports = [
            int(line.split("127.0.0.1:")[1].split()[0])
            for line in lines
            if line.startswith(("replica", "PostgreSQL on"))
        ]
        assert len(set(ports)) == 3
        for port in ports:
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # Ctrl-C
        try:
            # generous: two replicas drain and close their pools on a machine the rest of the
            # suite may load; the bound only guards against a hang
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    assert "cluster stopped" in out, err
