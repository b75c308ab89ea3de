"""The pml-client package installs alone into a fresh virtualenv outside the repository, brings
none of the server's dependencies, and runs the README's Python example against a real server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pml_server.api.server import RunningServer
from tests.packaging import build_client_wheel, clean_env, fresh_venv, pip_install
from tests.test_readme_python_client import _example

pytestmark = pytest.mark.slow


def test_the_client_package_alone_runs_the_readme_example(
    server: RunningServer, tmp_path: Path
) -> None:
    (tmp_path / "dist").mkdir()
    wheel = build_client_wheel(tmp_path / "dist")
    python = fresh_venv(tmp_path / "venv")
    pip_install(python, wheel)
    work = tmp_path / "elsewhere"
    work.mkdir()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = clean_env(PML_SERVER=f"127.0.0.1:{server.port}")
        return subprocess.run(
            [str(python), *args], cwd=work, env=env, capture_output=True, text=True, timeout=120
        )

    # Only the client: not the server package nor its heavy dependencies.
    absent = run(
        "-c",
        "import importlib.util as u; "
        "print([m for m in ('pml_server', 'onnxruntime', 'rocksdict', 'psycopg', 'numpy') "
        "if u.find_spec(m)])",
    )
    assert absent.returncode == 0, absent.stderr
    assert absent.stdout.strip() == "[]"
    located = run("-c", "import pml_client; print(pml_client.__file__)")
    assert located.stdout.startswith(str(tmp_path / "venv")), located.stdout

    done = run("-c", _example())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("True patterns/")
    assert lines[1] == "2 acknowledged, 0 reconnects"
    assert lines[2].startswith("['read_file', 'parse_json'] 3 ")
    assert "$PATH" in lines[3]
    assert lines[4].startswith("INVALID_ARGUMENT [('intent', ")
