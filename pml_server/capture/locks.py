"""Striped locks: a fixed array of locks, a key picks one by hash. Exact counters need a
read-modify-write under a lock per pattern (rocksdict has no merge operator or transaction);
stripes bound the memory whatever the number of patterns. Keyed locks: one lock per key in
use, for keys held long by many threads at once (request ids)."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any


class StripedLocks:
    def __init__(self, stripes: int = 1024) -> None:
        self._locks = [threading.Lock() for _ in range(stripes)]

    def lock_for(self, *key: str) -> threading.Lock:
        digest = zlib.crc32("\x1f".join(key).encode())
        return self._locks[digest % len(self._locks)]


class KeyedLocks:
    """One lock per key in use, created on first use and dropped once no thread holds or waits
    for it: two keys never share a lock. For request ids: a StreamTraces batch holds the locks
    of its (up to 64) request ids until the batch is durable, and with 1,024 stripes almost
    every two batches in flight shared a stripe, so concurrent streams captured one batch after
    another. Keys are taken in sorted order by whoever takes several (`hold`)."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._entries: dict[tuple[str, ...], list[Any]] = {}  # key -> [lock, users]

    def lock_for(self, *key: str) -> AbstractContextManager[None]:
        return self.hold([key])

    @contextmanager
    def hold(self, keys: Iterable[tuple[str, ...]]) -> Iterator[None]:
        """Hold the lock of every key (duplicates once), taken in sorted order."""
        taken: list[tuple[tuple[str, ...], list[Any]]] = []
        try:
            for key in sorted(set(keys)):
                with self._guard:
                    entry = self._entries.get(key)
                    if entry is None:
                        entry = self._entries[key] = [threading.Lock(), 0]
                    entry[1] += 1
                try:
                    entry[0].acquire()
                except BaseException:
                    self._leave(key, entry)
                    raise
                taken.append((key, entry))
            yield
        finally:
            for key, entry in reversed(taken):
                entry[0].release()
                self._leave(key, entry)

    def _leave(self, key: tuple[str, ...], entry: list[Any]) -> None:
        with self._guard:
            entry[1] -= 1
            if entry[1] == 0:
                del self._entries[key]

    def __len__(self) -> int:
        """Keys in use (held or waited for)."""
        with self._guard:
            return len(self._entries)
