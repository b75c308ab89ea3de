"""A load process driven over its stdin/stdout, one command line in, one answer line out (the
flood and the expensive-tenant measurements each run their load from such a process, so that
its CPU is not the measured server's)."""

from __future__ import annotations

import subprocess
import sys

from testing.server_process import ROOT


class LineProcess:
    """`python -m <module> <args>`; `command` sends one line and returns its one-line answer."""

    def __init__(self, module: str, args: list[str], wait_seconds: float) -> None:
        self.name = module.rsplit(".", 1)[-1]
        self.wait_seconds = wait_seconds
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def command(self, line: str) -> str:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer or answer.startswith("error"):
            raise RuntimeError(f"{self.name}: {line!r} -> {answer!r}")
        return answer

    def close(self) -> None:
        """Closing stdin asks the process to finish; it is killed if it does not in time."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(self.wait_seconds)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
