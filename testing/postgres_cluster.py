"""A throwaway PostgreSQL 15 cluster for the shared-store tests: initdb in a temp dir, pg_ctl on
a free loopback port with its socket in that dir, stopped (and removed) at the end. PostgreSQL
refuses to run as root, so as root its tools run as the `postgres` user (runuser); as any other
user they run directly. `tools/system_deps.sh` installs postgresql-15 (`make test` calls it)."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from pathlib import Path

import psycopg

PG_BIN = Path(os.environ.get("PML_PG_BIN", "/usr/lib/postgresql/15/bin"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.sockets = root / "sockets"
        self.log = root / "postgres.log"
        self.port = free_port()
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as_postgres, *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self.sockets.mkdir(parents=True)
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sockets, "postgres")
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "pml", "-A", "trust",
            "-E", "UTF8", "--no-locale",
        )  # fmt: skip

    def start(self) -> None:
        options = f"-k {self.sockets} -c listen_addresses=127.0.0.1 -p {self.port}"
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-o", options, "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop")

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://pml@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A fresh empty database; its DSN."""
        name = f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}".encode())
        return self.dsn(name)


def available() -> bool:
    return (PG_BIN / "initdb").exists()
