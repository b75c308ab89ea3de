"""Storage: the embedded RocksDB store (the default) or a shared PostgreSQL one, behind one
seam (`seam.StoreBackend`)."""

from __future__ import annotations

from pathlib import Path

from pml_server.backup import verify_restored
from pml_server.storage.repo import Repository
from pml_server.storage.rocks import SCHEMA_VERSION, SchemaVersionError, Store, StoreInUseError
from pml_server.storage.seam import StoreBackend

__all__ = [
    "SCHEMA_VERSION",
    "Repository",
    "SchemaVersionError",
    "Store",
    "StoreBackend",
    "StoreInUseError",
    "is_shared_dsn",
    "open_store",
    "repository_for",
]


def is_shared_dsn(store: str | None) -> bool:
    return bool(store) and str(store).startswith(("postgresql://", "postgres://"))


def open_store(store: str | None, data_dir: Path, durability: str, pool_size: int) -> StoreBackend:
    """The PostgreSQL store when `store` is a DSN, else the RocksDB one in `data_dir`."""
    if store:
        if not is_shared_dsn(store):
            raise ValueError("--store must be a postgresql:// DSN")
        from pml_server.storage.postgres import PostgresStore

        return PostgresStore(store, pool_size)
    # a copy of a backup is checked whole before RocksDB opens it (docs/storage.md, Backups
    # and restore)
    verify_restored(data_dir)
    return Store(data_dir, durability)


def repository_for(store: StoreBackend, view_cache_size: int = 10_000) -> Repository:
    """`view_cache_size`: the pattern views a shared store's repository caches."""
    if store.shared:
        from pml_server.storage.postgres import PostgresStore, SharedRepository

        assert isinstance(store, PostgresStore)
        return SharedRepository(store, view_cache_size)
    return Repository(store)
