"""Striped locks: a fixed array of locks, a key picks one by hash. Exact counters need a
read-modify-write under a lock per pattern (rocksdict has no merge operator or transaction);
stripes bound the memory whatever the number of patterns."""

from __future__ import annotations

import threading
import zlib


class StripedLocks:
    def __init__(self, stripes: int = 1024) -> None:
        self._locks = [threading.Lock() for _ in range(stripes)]

    def lock_for(self, *key: str) -> threading.Lock:
        digest = zlib.crc32("\x1f".join(key).encode())
        return self._locks[digest % len(self._locks)]
