"""The committed generated code matches what `make proto` produces from proto/: the Python
modules (the server's and the pml-client package's), the Go package (clients/go/pmlv1) and
the Node package's copy of the protos."""

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERATE = [sys.executable, str(ROOT / "tools" / "gen_proto.py")]


def _files(root: Path) -> set[Path]:
    return {
        p.relative_to(root) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    }


def _assert_same(out: Path, committed: Path) -> None:
    assert _files(out) == _files(committed), f"{committed} file set drifted: run `make proto`"
    drifted = [
        str(p) for p in _files(out) if not filecmp.cmp(out / p, committed / p, shallow=False)
    ]
    assert not drifted, f"generated code drifted from proto/: run `make proto` ({drifted})"


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    subprocess.run([*GENERATE, "--only", "python", "--out", str(out)], check=True)
    _assert_same(out, ROOT / "pml_server" / "_proto")


def test_client_package_protos_match(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    subprocess.run([*GENERATE, "--only", "python-client", "--client-out", str(out)], check=True)
    _assert_same(out, ROOT / "clients" / "python" / "pml_client" / "_proto")


def test_generated_go_matches_protos(tmp_path: Path) -> None:
    if shutil.which("go") is None:
        pytest.fail("Go is needed to check clients/go/pmlv1 (no `go` on PATH)")
    out = tmp_path / "pmlv1"
    subprocess.run([*GENERATE, "--only", "go", "--go-out", str(out)], check=True, timeout=600)
    _assert_same(out, ROOT / "clients" / "go" / "pmlv1")


def test_node_package_protos_match(tmp_path: Path) -> None:
    out = tmp_path / "proto"
    subprocess.run([*GENERATE, "--only", "node", "--node-out", str(out)], check=True)
    _assert_same(out, ROOT / "clients" / "node" / "proto")
