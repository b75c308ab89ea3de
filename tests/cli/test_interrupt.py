"""Ctrl-C while `pml` is still importing its modules (the first 0.1 s of every command) ends it
as SIGINT ends a program, exit 130 and a newline, never a KeyboardInterrupt traceback from the
module that was loading (docs/cli.md, Exit codes). The command is the console script that
pyproject.toml's `[project.scripts]` defines, written here as an installer writes it; the SIGINT
is sent by the child itself, from an import hook, at the moment one of the named modules starts
loading (a timed signal from outside lands anywhere, and mostly in the interpreter's start)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.mcp.test_server import PYTHONPATH, ROOT

# Imported by the child before anything else (`site` imports `sitecustomize` from the path): a
# meta path finder that takes no part in the import, only sends SIGINT once, as `module` starts
# loading, so Python's handler runs inside that import.
_SIGNAL_ON_IMPORT = """
import os, signal, sys

class _Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ["PML_TEST_SIGINT_ON"]:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, _Interrupt())
"""


def _console_script(directory: Path) -> Path:
    """`pml` as an installer makes it from pyproject.toml's entry point (`module:function`)."""
    entry = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["pml"]
    module, _, function = entry.partition(":")
    script = directory / "pml"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"from {module} import {function}\n"
        "if __name__ == '__main__':\n"
        "    sys.argv[0] = sys.argv[0].removesuffix('.exe')\n"
        f"    sys.exit({function}())\n"
    )
    return script


@pytest.mark.parametrize(
    ("how", "argv", "loading"),
    [
        ("script", ["suggest", "x", "--server", "127.0.0.1:1"], "pml_server.cli._main"),
        ("script", ["serve", "--embedder", "hashing"], "pml_server.config._model"),
        ("script", ["mcp", "--server", "127.0.0.1:1"], "pml_server.domain.limits"),
        ("-m", ["stats", "--server", "127.0.0.1:1"], "pml_server.config._addresses"),
    ],
)
def test_ctrl_c_while_pml_imports_is_exit_130_without_a_traceback(
    tmp_path: Path, how: str, argv: list[str], loading: str
) -> None:
    (tmp_path / "sitecustomize.py").write_text(_SIGNAL_ON_IMPORT)
    command = (
        [sys.executable, str(_console_script(tmp_path))]
        if how == "script"
        else [sys.executable, "-m", "pml_server.cli"]
    )
    done = subprocess.run(
        [*command, *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(tmp_path), PYTHONPATH]),
            "PML_TEST_SIGINT_ON": loading,
        },
    )
    assert (done.returncode, done.stdout, done.stderr) == (128 + signal.SIGINT, "", "\n")


def test_a_program_importing_the_cli_keeps_its_own_ctrl_c() -> None:
    """Only the `pml` command ends on Ctrl-C while starting: a program (or a test) importing
    `pml_server.cli` still gets its KeyboardInterrupt."""
    probe = (
        "import signal, pml_server.cli; "
        "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
        check=True,
    )
    assert done.stdout == "True\n"
