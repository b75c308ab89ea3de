"""Power cuts for the power-loss test: the server's data directory lives on `lazyfs`, and a
cut kills the server and the filesystem process together, so unsynced data vanishes."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from testing.server_process import ROOT


def fuse_problem() -> str | None:
    """Why a FUSE filesystem cannot be mounted here, or None when it can."""
    if not Path("/dev/fuse").exists():
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian: apt-get install -y fuse3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "the Python package mfusepy is not installed (pip install -e '.[dev]')"
    return None


class LazyMount:
    def __init__(self, backing: Path, mount: Path) -> None:
        self.backing = backing
        self.mount = mount
        self.proc: subprocess.Popen[bytes] | None = None
        self.cuts = 0
        backing.mkdir(parents=True, exist_ok=True)
        mount.mkdir(parents=True, exist_ok=True)

    def start(self, timeout: float = 20.0) -> None:
        log = (self.backing.parent / "lazyfs.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.lazyfs", str(self.backing), str(self.mount)],
            cwd=ROOT,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mount):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    "lazyfs did not mount: "
                    + (self.backing.parent / "lazyfs.log").read_text(errors="replace")[-2000:]
                )
            time.sleep(0.05)

    def cut(self) -> None:
        """The power goes: the filesystem process dies with every unsynced byte it held."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)
            self.proc = None
        subprocess.run(["fusermount3", "-u", "-z", str(self.mount)], check=False)
        self.cuts += 1

    def stop(self) -> None:
        if self.proc is not None:
            subprocess.run(["fusermount3", "-u", "-z", str(self.mount)], check=False)
            self.proc.wait(30)
            self.proc = None
