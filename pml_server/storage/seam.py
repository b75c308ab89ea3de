"""The store seam: what the repository and the engine call on a store, with two backends.

`StoreBackend` is the surface, three small protocols and the store as a whole: ordered byte
keys in named families (`KeyValueReads`: `get`, `get_many`, `scan`, `scan_stored`; what the
repository's parts take), atomic batches of operations (`BatchWrites`: `submit`, `write`;
`writes_held` lets a batch's submits reach the disk together), and the coordination the
engine's exactness rests on (`Coordination`: `locks`, `allocator`). The embedded RocksDB store
(`storage.rocks.Store`) implements it inside one process: striped in-process locks, block
allocators persisted in the store, a write overlay and a read cache. The PostgreSQL store
(`storage.postgres.PostgresStore`) implements it for several replicas over one database:
advisory locks held by the writing transaction, sequences, no cache (another replica may
write any row).

`shared` tells the engine which guarantees stay in-process: with a shared store, state cached
from its own writes (tenant stats) must be re-read, and counts go to the store as deltas.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from pml_server.domain.errors import UnavailableError

Op = tuple[str, bytes, bytes | None]  # (column family, key, value or None to delete)


class StoreClosedError(UnavailableError):
    """A write was submitted after `close` or after a failed commit (or, shared: the database
    refused or lost it). UNAVAILABLE: the caller may retry with the same request id."""


class RequestAlreadyAppliedError(RuntimeError):
    """A shared store found the batch's request id already recorded (another replica applied
    it first): nothing of the batch was written; `result` is the stored answer."""

    def __init__(self, result: bytes) -> None:
        super().__init__("request id already applied")
        self.result = result


class WriteTicket:
    """Handed back by `submit`; `wait` returns once the write is durable (per mode). Every
    capture makes one: a bare lock, held from creation until the write is finished, costs a
    fraction of a `threading.Event` (a condition, its lock and a waiter lock per wait)."""

    __slots__ = ("_error", "_pending")

    def __init__(self) -> None:
        self._pending = threading.Lock()
        self._pending.acquire()
        self._error: BaseException | None = None

    def wait(self) -> None:
        with self._pending:  # released by `_finish`; any number of waits, in any thread
            pass
        if self._error is not None:
            raise StoreClosedError(f"write failed: {self._error}") from self._error

    def _finish(self, error: BaseException | None = None) -> None:
        self._error = error
        self._pending.release()


def finished_ticket() -> WriteTicket:
    ticket = WriteTicket()
    ticket._finish()
    return ticket


class LocalLocks:
    """In-process striped locks (a key picks one of `stripes` by hash): what the embedded
    store's `locks` are, and the in-process half of the shared store's. Reentrant: a thread
    holding two keys' locks (an older build's duplicate merged into its survivor,
    `service/_older_builds.py`) may find both on one stripe."""

    def __init__(self, stripes: int) -> None:
        self._locks = [threading.RLock() for _ in range(stripes)]

    def lock_for(self, *key: str) -> threading.RLock:
        return self._locks[zlib.crc32("\x1f".join(key).encode()) % len(self._locks)]


class Locks(Protocol):
    """Mutual exclusion per key: `lock_for(tenant, key)` is held with `with`."""

    def lock_for(self, *key: str) -> AbstractContextManager[object]: ...


class IdAllocator(Protocol):
    """Unique, increasing (per process) u64 ids that are never reused."""

    def next(self) -> int: ...

    def last_issued(self) -> int: ...


class KeyValueReads(Protocol):
    """A store's reads: ordered byte keys in named families (what `storage.repo`'s parts
    call)."""

    def get(self, cf: str, key: bytes) -> bytes | None: ...

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]: ...

    def scan(
        self,
        cf: str,
        prefix: bytes,
        *,
        start: bytes | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes]]: ...

    def scan_stored(self, cf: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]: ...


class BatchWrites(Protocol):
    """A store's writes: atomic batches of operations, applied in order, each seeing the ones
    before it (`keys.apply_rewrites`; docs/storage.md, Batches apply in order)."""

    def submit(self, ops: Sequence[Op]) -> WriteTicket: ...

    def write(self, ops: Sequence[Op]) -> None: ...

    def delete_unchanged(self, cf: str, rows: Sequence[tuple[bytes, bytes]]) -> int:
        """Delete, in one durable write, the key of each (key, value) row whose stored value
        is still that value; how many were deleted. A write of one of those keys by anyone
        else lands wholly before the comparison (the key is kept) or after the deletion."""
        ...

    def writes_held(self) -> AbstractContextManager[None]:
        """A block whose submits the store may write together once it ends (a batch's
        captures); nothing inside waits for its own tickets."""
        ...


class Coordination(Protocol):
    """What the engine's exactness rests on: locks and id allocators, across processes where
    the store is shared."""

    def locks(self, name: str, stripes: int) -> Locks:
        """Locks named `name` that also exclude other processes sharing the store (with a
        shared store); `stripes` bounds their in-process memory."""
        ...

    def allocator(self, name: str) -> IdAllocator: ...


class StoreBackend(KeyValueReads, BatchWrites, Coordination, Protocol):
    """What `Repository` and the engine call on a store (see the module docstring): its reads,
    writes and coordination, and the store as a whole."""

    schema_version: int
    shared: bool

    @property
    def location(self) -> str:
        """Where the data lives, for messages (a path, or a DSN without its password)."""
        ...

    def checkpoint(self, dest: Path) -> int:
        """A consistent copy of the store at `dest`, openable as a data directory, holding
        every write acknowledged before the call; the sequence number it holds at least.
        Only a store in one data directory has one (the shared store refuses)."""
        ...

    def erase_overwritten(self, keys: Sequence[tuple[str, bytes]] | None = None) -> None:
        """Rewrite the store's files so that no value overwritten or deleted before the call
        stays on disk, where the store can (the embedded one; docs/storage.md, Data left on
        disk): all of them, or those holding the given (family, key) rows' range."""
        ...

    def close(self) -> None: ...
