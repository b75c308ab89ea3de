"""What a store reads, counted for tests that pin a bounded read (a call must read few rows
however many are stored): each scan, get and multi-get of the store, and a shared store's
joined read of views (its intents), is wrapped for the rest of the test."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pml_server.storage.keys import CF_INTENTS


def _watch(store: Any, monkeypatch: pytest.MonkeyPatch, seen: Callable[[str, int], None]) -> None:
    for name in ("scan", "get_many", "get"):
        method = getattr(store, name)

        def counted(
            cf: str, *args: Any, _method: Any = method, _name: str = name, **kw: Any
        ) -> Any:
            rows = _method(cf, *args, **kw)
            seen(cf, (rows is not None) if _name == "get" else len(rows))
            return rows

        monkeypatch.setattr(store, name, counted)
    kv = getattr(store, "kv", None)  # a shared store's joined read of views, one query
    if kv is not None:
        joined = kv.shown_view_rows

        def shown_view_rows(keys: Any, *args: Any, **kw: Any) -> Any:
            rows = joined(keys, *args, **kw)
            seen(CF_INTENTS, sum(len(row[2] or ()) for row in rows if row is not None))
            return rows

        monkeypatch.setattr(kv, "shown_view_rows", shown_view_rows)


def rows_read(store: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The rows of each column family `store` reads from now on."""
    read: dict[str, int] = {}

    def seen(cf: str, rows: int) -> None:
        read[cf] = read.get(cf, 0) + rows

    _watch(store, monkeypatch, seen)
    return read


def intents_read(store: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The stored intents each of `store`'s reads returns from now on, one entry a read."""
    read: list[int] = []
    _watch(store, monkeypatch, lambda cf, rows: read.extend([rows] if cf == CF_INTENTS else []))
    return read
