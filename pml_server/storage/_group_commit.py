"""The embedded store's group-commit writer (docs/storage.md, The embedded store (RocksDB)).

Every caller hands over one list of operations (one capture = one list) and the writer commits
it as one atomic WriteBatch. Durability `sync` acknowledges only after the WAL is fsynced.
rocksdict holds the GIL during a write, so RocksDB's own leader/follower grouping never sees
concurrent writers: a single writer thread drains the queue, writes every waiting list as one
batch and fsyncs the WAL once for all of them (group commit). Until a queued write is committed,
its values live in an overlay that the store's `get` and `scan` read first, so a caller holding
a lock can read-modify-write a key whose previous value is still on its way to disk. Durability
`fast` writes through the WAL without fsync in the caller's thread.

`storage/rocks.py` composes it: the store's lock guards both the overlay here and the store's
read cache, which the writer tells of every key it writes (`drop`) in the same locked section.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence

from rocksdict import ColumnFamily, Rdict, WriteBatch, WriteOptions

from pml_server.storage.seam import Op, StoreClosedError, WriteTicket

# Upper bound of operations merged into one group commit (keeps a batch's memory bounded).
_MAX_GROUP_OPS = 20_000
# How long the writer holds back the writes of batches being captured (`writes_held`) for
# their blocks to end. 4,000 streamed captures (batches of about 22) went to disk in 1,218 to
# 1,682 groups (fsyncs) when nothing held them, 489 to 507 with 5 ms, 170 to 212 with 20 ms.
_HOLD_SECONDS = 0.02

# A queued write: (submit sequence, its operations, its ticket, eager).
_Queued = tuple[int, Sequence[Op], WriteTicket, bool]


class GroupCommitWriter:
    """Writes a `Store`'s batches: group-committed by one thread (`sync`) or in the caller's
    thread (`fast`). `lock` is the store's: the overlay (`pending`) is read under it, and
    `drop(cf, key)` is called under it for every key a write changes."""

    def __init__(
        self,
        db: Rdict,
        handles: dict[str, ColumnFamily],
        lock: threading.Lock,
        drop: Callable[[str, bytes], None],
        *,
        sync: bool,
    ) -> None:
        self._db = db
        self._handles = handles
        self._drop = drop
        # Both modes write through the WAL without fsync; `sync` then fsyncs the WAL with
        # `flush_wal(True)`, which (unlike a write with sync=True) releases the GIL, so other
        # threads keep working during the fsync.
        self._write_options = WriteOptions()
        self._write_options.sync = False
        self._wakeup = threading.Condition(lock)  # holds the store's lock when entered
        self._queue: deque[_Queued] = deque()
        self._holds = 0  # `writes_held` blocks open
        self._in_hold = threading.local()  # `.open`: this thread is inside a `writes_held`
        self._eager = 0  # writes queued from outside any `writes_held` block: never held back
        # Per column family: key -> (submit sequence, value or None for a delete). Split by
        # family so a scan looks only at its own family's pending writes.
        self._overlay: dict[str, dict[bytes, tuple[int, bytes | None]]] = {
            name: {} for name in handles
        }
        self._next_seq = 1
        self._closed = False
        self._failed: BaseException | None = None
        self._thread: threading.Thread | None = None
        if sync:
            self._thread = threading.Thread(target=self._write_loop, name="pml-store-writer")
            self._thread.daemon = True
            self._thread.start()

    def pending(self, cf: str) -> dict[bytes, tuple[int, bytes | None]]:
        """Under the store's lock: `cf`'s queued writes not yet on disk, key -> (submit
        sequence, value or None for a delete)."""
        return self._overlay[cf]

    def check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("store is closed")
        if self._failed is not None:
            raise StoreClosedError(f"store refused writes after an I/O error: {self._failed}")

    def submit(self, ops: Sequence[Op]) -> WriteTicket:
        """Queue `ops` as one atomic batch. Reads see them at once; `wait()` the ticket before
        acknowledging anything to a client."""
        return self._submit(ops, eager=not self._holding())

    def write(self, ops: Sequence[Op]) -> None:
        self._submit(ops, eager=True).wait()  # its caller waits now: never held back

    def _submit(self, ops: Sequence[Op], eager: bool) -> WriteTicket:
        """`submit`; an `eager` batch ends any hold of the writer (`writes_held`)."""
        with self._wakeup:
            return self._submit_locked(ops, eager)

    def submit_decided(self, decide: Callable[[], Sequence[Op]]) -> tuple[WriteTicket, int]:
        """Submit the batch `decide()` returns (and its length), `decide` called under the
        store's lock in the section that submits it: every write is submitted under that lock,
        so what `decide` reads is what the batch is written over (a compare-and-delete)."""
        with self._wakeup:
            self.check_open()
            ops = decide()
            if not ops:
                ticket = WriteTicket()
                ticket._finish()
                return ticket, 0
            return self._submit_locked(ops, eager=True), len(ops)

    def _submit_locked(self, ops: Sequence[Op], eager: bool) -> WriteTicket:
        """`_submit`, the store's lock held. `fast` writes too (rocksdict holds the GIL through
        a write anyway), so that `submit_decided` sees no write land between its reads and its
        own."""
        ticket = WriteTicket()
        if self._thread is None:
            self.check_open()
            batch = self._batch(ops)
            try:
                self._db.write(batch, self._write_options)
            except Exception as error:  # rocksdict raises plain Exception on I/O errors
                self._failed = error
                raise StoreClosedError(f"write failed: {error}") from error
            for cf, key, _ in ops:  # after the write: see the store's get_many
                self._drop(cf, key)
            ticket._finish()
            return ticket
        self.check_open()
        seq = self._next_seq
        self._next_seq += 1
        for cf, key, value in ops:
            self._overlay[cf][key] = (seq, value)
            self._drop(cf, key)
        # The writer waits for the queue's first write; with writes queued it is writing,
        # or holding back held ones, which the first eager write ends.
        if not self._queue or (eager and not self._eager):
            self._wakeup.notify()
        self._eager += eager
        self._queue.append((seq, ops, ticket, eager))
        return ticket

    @contextlib.contextmanager
    def writes_held(self) -> Iterator[None]:
        """The block's submits (a batch's captures, one after another) are written together
        once it ends: while only such writes are queued, the writer waits for every open block
        to end, at most `_HOLD_SECONDS`, so the batch pays one fsync instead of one every few
        captures. A write from outside any block (a single capture, `write`) is not held: the
        writer then takes everything queued at once, as without blocks. Nothing inside may
        wait for its own tickets (it would wait that long)."""
        if self._holding():
            yield
            return
        with self._wakeup:
            self._holds += 1
        self._in_hold.open = True
        try:
            yield
        finally:
            self._in_hold.open = False
            with self._wakeup:
                self._holds -= 1
                if not self._holds and self._queue:
                    self._wakeup.notify()

    def _holding(self) -> bool:
        """This thread is inside a `writes_held` block."""
        return bool(getattr(self._in_hold, "open", False))

    def _batch(self, ops: Iterable[Op]) -> WriteBatch:
        batch = WriteBatch(raw_mode=True)
        for cf, key, value in ops:
            if value is None:
                batch.delete(key, self._handles[cf])
            else:
                batch.put(key, value, self._handles[cf])
        return batch

    def _write_loop(self) -> None:
        while True:
            with self._wakeup:
                while not self._queue and not self._closed:
                    self._wakeup.wait()
                if not self._queue:
                    return  # closed and drained
                deadline = time.monotonic() + _HOLD_SECONDS
                while self._holds and not self._eager and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._wakeup.wait(left):
                        break
                group: list[_Queued] = []
                total = 0
                while self._queue and (not group or total < _MAX_GROUP_OPS):
                    item = self._queue.popleft()
                    group.append(item)
                    total += len(item[1])
                    self._eager -= item[3]
            # The group is written as one atomic batch, so only each key's last write in it
            # matters: the earlier ones (every capture rewrites its tenant's stats row) would
            # cost memtable inserts and WAL bytes while this thread holds the GIL (rocksdict's
            # write does not release it).
            latest: dict[tuple[str, bytes], bytes | None] = {
                (cf, key): value for _, ops, _, _ in group for cf, key, value in ops
            }
            error: BaseException | None = None
            try:
                batch = self._batch((cf, key, value) for (cf, key), value in latest.items())
                self._db.write(batch, self._write_options)
                self._db.flush_wal(True)  # the fsync every capture of the group waits for
            except Exception as failure:
                error = failure
            last_seq = group[-1][0]
            overlays = self._overlay
            with self._wakeup:
                if error is not None:
                    self._failed = error
                # Only the keys this group wrote can be stale (a later submit of the same
                # key holds a higher sequence and stays until its own group is written).
                for cf, key in latest:
                    overlay = overlays[cf]
                    pending = overlay.get(key)
                    if pending is not None and pending[0] <= last_seq:
                        del overlay[key]
            for _, _, ticket, _ in group:
                ticket._finish(error)

    def close(self) -> bool:
        """Refuse further writes and write everything queued (the writer thread ends once the
        queue is drained). False if it was closed already."""
        with self._wakeup:
            if self._closed:
                return False
            self._closed = True
            self._wakeup.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._handles.clear()
        return True
