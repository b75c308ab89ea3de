"""Building the wheels `make dist` builds, and fresh virtualenvs outside the repository to
install them into (tests/test_dist.py, tests/test_client_package.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "clients" / "python"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would make an installed package resolve to the
    repository (PYTHONPATH, a virtualenv), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, **extra}


def _run(args: list[str], cwd: Path, timeout: float) -> None:
    done = subprocess.run(
        args, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{' '.join(args)}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"


def build_client_wheel(out: Path) -> Path:
    """The pml-client wheel, as `make dist` builds it."""
    _run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--wheel-dir", str(out), str(CLIENT)),
        ],
        cwd=out,
        timeout=300,
    )
    (wheel,) = out.glob("pml_client-*.whl")
    return wheel


def build_server_wheel(out: Path) -> Path:
    """The server wheel, as `make dist` builds it (maturin, release; compiled Rust is reused
    from pml_core_rs/target)."""
    maturin = Path(sys.executable).parent / "maturin"
    _run([str(maturin), "build", "--release", "--quiet", "--out", str(out)], cwd=ROOT, timeout=1800)
    (wheel,) = out.glob("pml_server-*.whl")
    return wheel


def fresh_venv(where: Path) -> Path:
    """A new virtualenv at `where` (no packages but pip); its python."""
    _run([sys.executable, "-m", "venv", str(where)], cwd=where.parent, timeout=300)
    return where / "bin" / "python"


def pip_install(python: Path, *wheels: Path) -> None:
    """Install `wheels` and their dependencies (from the pip cache or the package index)."""
    _run(
        [
            *(str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
            *(str(w) for w in wheels),
        ],
        cwd=python.parent,
        timeout=1800,
    )
