"""The README's Python client example (the pml-client package) runs as written against a real
server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from pml_server.api.server import RunningServer

README = Path(__file__).resolve().parent.parent / "README.md"


def _example() -> str:
    section = README.read_text().split("### Python (`pml_client`)", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "the README lost its Python client example"
    return found.group(1)


def test_readme_python_client_example_runs(server: RunningServer) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _example()],
        # PYTHONPATH as this run has it: where pml_client resolves (an installed package, or
        # clients/python in a checkout run with it on the path).
        env={
            "PML_SERVER": f"127.0.0.1:{server.port}",
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("True patterns/")
    assert lines[1] == "2 acknowledged, 0 reconnects"
    assert lines[2].startswith("['read_file', 'parse_json'] 3 ")
    assert "$PATH" in lines[3]
    assert lines[4].startswith("INVALID_ARGUMENT [('intent', ")
