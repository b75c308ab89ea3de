"""The PostgreSQL fixtures of the shared-store tests, over `testing.postgres_cluster` (a
throwaway cluster; `tools/system_deps.sh` installs postgresql-15, `make test` calls it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pml_server.service import Engine
from testing.postgres_cluster import PG_BIN, PostgresCluster, available
from tests.support import Clock, open_engine


@contextlib.contextmanager
def _throwaway_cluster() -> Iterator[PostgresCluster]:
    """A cluster started in a temporary directory, stopped (if it still runs) and deleted after."""
    if not available():
        pytest.fail(f"PostgreSQL binaries not found in {PG_BIN}: run tools/system_deps.sh")
    root = Path(tempfile.mkdtemp(prefix="pml-pg-"))
    os.chmod(root, 0o755)
    cluster = PostgresCluster(root)
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        try:
            with contextlib.suppress(subprocess.CalledProcessError):  # a test stopped it
                cluster.stop("immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    with _throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture
def own_postgres_cluster() -> Iterator[PostgresCluster]:
    """A cluster of the test's own, for a test that stops or crashes it (the session's
    cluster is every other test's)."""
    with _throwaway_cluster() as cluster:
        yield cluster


@pytest.fixture
def postgres_dsn(postgres_cluster: PostgresCluster) -> str:
    """A fresh database of the session's cluster."""
    return postgres_cluster.create_database()


@pytest.fixture
def replicas(postgres_dsn: str, tmp_path: Path) -> Iterator[Callable[[str], Engine]]:
    """Replicas over one fresh database, each an engine of its own directory, one clock for
    all; closed after the test."""
    opened: list[Engine] = []
    clock = Clock()

    def replica(name: str) -> Engine:
        engine = open_engine(tmp_path / name, clock, store=postgres_dsn)
        opened.append(engine)
        return engine

    yield replica
    for engine in opened:
        engine.close()
