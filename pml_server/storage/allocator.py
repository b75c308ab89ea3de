"""Monotonic u64 id allocation that survives restarts: ids are handed out from a block whose
upper mark is persisted (synchronously) before any id of it is used, so a restart resumes after
the mark and never reuses an id (at most one block of ids is skipped)."""

from __future__ import annotations

import threading

from pml_server.storage.repo import Repository


class BlockAllocator:
    def __init__(self, repo: Repository, name: str, block: int = 4096) -> None:
        self._repo = repo
        self._name = name
        self._block = block
        self._lock = threading.Lock()
        self._next = repo.meta.allocator_mark(name) + 1
        self._mark = self._next - 1

    def next(self) -> int:
        with self._lock:
            if self._next > self._mark:
                self._mark = self._next + self._block - 1
                self._repo.store.write([self._repo.meta.put_allocator_mark(self._name, self._mark)])
            value = self._next
            self._next += 1
            return value

    def last_issued(self) -> int:
        with self._lock:
            return self._next - 1
