"""The shared store's pool across a PostgreSQL restart (a throwaway cluster of its own, restarted
`immediate`): one call meets the lost connections, not one call per pooled connection."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pml_server.domain.errors import UnavailableError
from pml_server.storage.postgres import PostgresStore
from testing.postgres_cluster import PostgresCluster


@pytest.fixture
def own_cluster() -> Iterator[PostgresCluster]:
    """A cluster of its own: this test restarts it."""
    root = Path(tempfile.mkdtemp(prefix="pml-pg-restart-"))
    os.chmod(root, 0o755)
    cluster = PostgresCluster(root)
    cluster.init()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.postgres
def test_after_a_restart_one_read_finds_the_lost_connections(own_cluster: PostgresCluster) -> None:
    """Each pooled connection was found broken by the call that took it: after a restart of
    under a second, 6 reads in a row were refused UNAVAILABLE (and the op log follower,
    meeting them one catch-up at a time, backed off to 8 s, so another replica's writes
    reached it 9 s late). The first loss now has the pool test its idle connections and
    replace the broken ones: one refusal."""
    store = PostgresStore(own_cluster.create_database(), pool_size=6)
    try:
        pool = store.transactions._pool
        held = [pool.getconn() for _ in range(6)]  # 6 connections open, then idle
        for conn in held:
            pool.putconn(conn)
        assert store.transactions.row("SELECT 1") == (1,)
        own_cluster.stop("immediate")
        own_cluster.start()
        refused = 0
        for _ in range(10):
            try:
                assert store.transactions.row("SELECT 1") == (1,)
                break
            except UnavailableError:
                refused += 1
        assert refused == 1
    finally:
        store.close()
