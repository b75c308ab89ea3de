"""Replicas over a shared store: each keeps its own in-memory search indexes and follows the
store's op log to apply what other replicas wrote."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pml_server.replication._lag import FollowerLag

if TYPE_CHECKING:
    from pml_server.replication._follower import OplogFollower
    from pml_server.search import TenantSearchIndex
    from pml_server.storage.repo import Repository
    from pml_server.storage.seam import StoreBackend

__all__ = ["FollowerLag", "OplogFollower", "follower_for"]


def follower_for(
    store: StoreBackend,
    repo: Repository,
    index_for: Callable[[str], TenantSearchIndex],
    rebuild: Callable[[str], None],
) -> OplogFollower:
    """The follower of a shared store's op log (imports the PostgreSQL driver); `rebuild`
    installs a tenant's indexes rebuilt from the store (after a gap in the op log)."""
    from pml_server.replication._follower import OplogFollower
    from pml_server.storage.postgres import PostgresStore, SharedRepository

    assert isinstance(store, PostgresStore)
    assert isinstance(repo, SharedRepository)
    return OplogFollower(store.oplog, repo, index_for, rebuild)
