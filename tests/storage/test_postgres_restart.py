"""The shared store's pool across a PostgreSQL restart (a throwaway cluster of its own, restarted
`immediate`): one call meets the lost connections, not one call per pooled connection."""

from __future__ import annotations

import pytest

from pml_server.domain.errors import UnavailableError
from pml_server.storage.postgres import PostgresStore
from testing.postgres_cluster import PostgresCluster


@pytest.mark.postgres
def test_after_a_restart_one_read_finds_the_lost_connections(
    own_postgres_cluster: PostgresCluster,
) -> None:
    """Each pooled connection was found broken by the call that took it: after a restart of
    under a second, 6 reads in a row were refused UNAVAILABLE (and the op log follower,
    meeting them one catch-up at a time, backed off to 8 s, so another replica's writes
    reached it 9 s late). The first loss now has the pool test its idle connections and
    replace the broken ones: one refusal."""
    store = PostgresStore(own_postgres_cluster.create_database(), pool_size=6)
    try:
        pool = store.transactions._pool
        held = [pool.getconn() for _ in range(6)]  # 6 connections open, then idle
        for conn in held:
            pool.putconn(conn)
        assert store.transactions.row("SELECT 1") == (1,)
        own_postgres_cluster.stop("immediate")
        own_postgres_cluster.start()
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


def test_a_refusal_for_a_lost_database_is_one_line(own_postgres_cluster: PostgresCluster) -> None:
    """libpq's messages span lines ("server closed the connection unexpectedly", then a
    line "This probably means..."), and each went into log lines as it was: one event, several
    lines of a log. What a refusal says is one line (`one_line`, the one place error text for
    a log line or a refusal is formatted)."""
    store = PostgresStore(own_postgres_cluster.create_database())
    try:
        own_postgres_cluster.stop("immediate")
        with pytest.raises(UnavailableError) as refused:  # it meets the lost connection
            store.transactions.row("SELECT 1")
        assert "\n" not in str(refused.value)
        assert "is unavailable" in str(refused.value)
    finally:
        own_postgres_cluster.start()
        store.close()
