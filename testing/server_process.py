"""A real `pml` server process (started from `testing.serve_pml`, port 0), killed and restarted
at will: what the reliability tests and the benchmarks that measure a server run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[1]
_LISTENING = re.compile(r"\(port (\d+)\)")


class ServerProcess:
    """`python -m testing.serve_pml` on 127.0.0.1 with an OS-chosen port."""

    def __init__(
        self,
        data_dir: Path,
        *flags: str,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.env = None if env is None else {**os.environ, **env}
        self.flags = flags
        self.log_path = log_path or data_dir.parent / f"{data_dir.name}-server.log"
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.starts = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> None:
        """Start and wait until health says SERVING (the vector index caught up)."""
        args = [sys.executable, "-m", "testing.serve_pml", "--listen", "127.0.0.1:0"]
        args += ["--data-dir", str(self.data_dir), "--embedder", "hashing", *self.flags]
        log = self.log_path.open("a")
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        log.close()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = _LISTENING.search(line)
        if found is None:
            self.proc.wait(10)
            raise RuntimeError(f"server did not start ({line!r}); log: {self.log_tail()}")
        self.port = int(found.group(1))
        self.starts += 1
        self.wait_serving(timeout)

    def wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.target) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while time.monotonic() < deadline:
                try:
                    reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"server exited: {self.log_tail()}")
                time.sleep(0.05)
        raise RuntimeError(f"server not SERVING after {timeout}s: {self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL: no drain, no flush, no snapshot."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self._reap()

    def terminate(self, timeout: float = 60.0) -> int:
        """SIGTERM: the graceful path; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Where it hangs: `pml serve` writes every thread's traceback on SIGUSR1.
            os.kill(self.proc.pid, signal.SIGUSR1)
            time.sleep(2)
            self.kill()
            raise AssertionError(
                f"the server did not stop within {timeout} s of SIGTERM: {self.log_tail(20_000)}"
            ) from None
        self._reap()
        return code

    def _reap(self) -> None:
        if self.proc is not None:
            self.proc.wait(30)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        self.proc = None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text()[-chars:]
        except OSError:
            return "(no log)"
