"""The README's Python client example runs as written against a real server."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from pml_server.api.server import RunningServer

README = Path(__file__).resolve().parent.parent / "README.md"


def _example() -> str:
    section = README.read_text().split("### Python (`pml_server.client.PmlClient`)", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found, "the README lost its Python client example"
    return found.group(1)


def test_readme_python_client_example_runs(server: RunningServer) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _example()],
        env={"PML_SERVER": f"127.0.0.1:{server.port}", "PATH": "/usr/bin:/bin"},
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
