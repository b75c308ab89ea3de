"""Fixtures of the storage tests: a store of each backend (the embedded RocksDB store and the
shared PostgreSQL one, a real throwaway cluster)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pml_server.storage import StoreBackend, open_store

Opener = Callable[[], StoreBackend]


@pytest.fixture(params=["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the backend's store (again: a reopen sees the same data)."""
    opened: list[StoreBackend] = []
    location = None if request.param == "rocksdb" else request.getfixturevalue("postgres_dsn")

    def open_one() -> StoreBackend:
        store = open_store(location, tmp_path / "db", "sync", 4)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()
