"""RocksDB store: opening, schema versioning, column families, reads and their cache.

This module and its group-commit writer (`_group_commit.py`) alone import rocksdict. It stores
a schema version under a meta key and refuses to open a store written by a newer schema than
this code knows.

Writes: every caller hands over one list of operations (one capture = one list) and the store
commits it as one atomic WriteBatch, group-committed by `_group_commit.GroupCommitWriter` (its
docstring says how). Until a queued write is committed, its values live in the writer's overlay
that `get` and `scan` read first, so a caller holding a lock can read-modify-write a key whose
previous value is still on its way to disk.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import struct
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

from rocksdict import (
    AccessType,
    BlockBasedOptions,
    BottommostLevelCompaction,
    Cache,
    Checkpoint,
    CompactOptions,
    Options,
    Rdict,
    ReadOptions,
)

from pml_server.domain.errors import FailedPreconditionError
from pml_server.domain.lru import BYTES_HEADER, ENTRY_BYTES, Lru
from pml_server.storage._group_commit import GroupCommitWriter
from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_META,
    CF_PATTERNS,
    CF_REQUEST_REWRITE,
    CF_REQUESTS,
    COLUMN_FAMILIES,
    apply_rewrites,
    prefix_end,
)
from pml_server.storage.seam import IdAllocator, LocalLocks, Op, StoreClosedError, WriteTicket

__all__ = [
    "Op",
    "SchemaVersionError",
    "Store",
    "StoreClosedError",
    "StoreInUseError",
    "StoreOpenError",
    "WriteTicket",
]

log = logging.getLogger(__name__)

# Raised whenever this build writes rows an older build cannot read, so that the older build
# refuses the store at open instead of failing on its reads (docs/storage.md, Migrations).
# 1: up to 2026-12-06; 2: failure log entries erased in place, and every row field added
# since 1 (an older build's readers take no field they do not know).
SCHEMA_VERSION = 2
_META_SCHEMA_KEY = b"meta/schema_version"
# The table files the store held at its last clean close, beside RocksDB's own files (JSON; an
# open checks its MANIFEST still lists them, then removes it: `_check_tables_kept`).
_TABLES_FILE = "pml-tables.json"
DURABILITY_MODES = ("sync", "fast")


# RocksDB's block cache, one for every column family. Left at RocksDB's default each family
# gets its own 32 MiB cache: 11 of them, and the scans at open filled three (about 90 MiB, 0.9 kB
# an intent of the 100k bench store). Suggest reads the few families it needs through
# `_ReadCache` below, so one shared bounded cache costs it nothing.
BLOCK_CACHE_BYTES = 32 * 1024 * 1024

# Bits a key of each table's whole-key Bloom filter. Every point read (a Suggest's views, a
# capture's pattern, counters and request id) looks for a random key: without a filter it reads
# a data block of every L0 table and of every level below whose key range covers the key (all
# of them), to find it in one. About 1% false positives; 1.25 bytes a key in memory.
BLOOM_BITS_PER_KEY = 10

# Read on every Suggest for each candidate pattern, rewritten only by captures of that pattern.
READ_CACHED = frozenset({CF_PATTERNS, CF_COUNTERS})
READ_CACHE_BYTES = 32 * 1024 * 1024
_READ_CACHE_MAX_VALUE = 16 * 1024  # large templates are rare: read them from RocksDB


# What an entry of `_ReadCache` holds besides its key's and value's bytes: their two bytes
# objects, the (column family, key) tuple, and the entry in the LRU (docs/reliability.md,
# "Caches bounded in bytes"); a new pattern's counters are about 240 bytes.
_READ_ENTRY_BYTES = ENTRY_BYTES + 2 * BYTES_HEADER + sys.getsizeof(("", b""))


def _read_entry_weight(cf_key: tuple[str, bytes], value: bytes) -> int:
    return _READ_ENTRY_BYTES + len(cf_key[1]) + len(value)


class _ReadCache:
    """Least-recently-used copy of stored values, bounded in the bytes they hold
    (`domain.lru.Lru`). Not thread-safe: the store uses it under its lock only."""

    def __init__(self, budget: int) -> None:
        self._values: Lru[tuple[str, bytes], bytes] = Lru(budget, weigh=_read_entry_weight)

    def get(self, cf: str, key: bytes) -> bytes | None:
        return self._values.get((cf, key))

    def put(self, cf: str, key: bytes, value: bytes) -> None:
        if len(value) > _READ_CACHE_MAX_VALUE:
            return
        self._values.put((cf, key), value)

    def drop(self, cf: str, key: bytes) -> None:
        self._values.pop((cf, key))

    def clear(self) -> None:
        self._values.clear()


class _Fill:
    """One `get_many` reading RocksDB outside the store's lock: the keys written meanwhile,
    whose values it read must not be cached (they may be older than the write)."""

    __slots__ = ("cf", "dropped")

    def __init__(self, cf: str) -> None:
        self.cf = cf
        self.dropped: set[bytes] = set()


class SchemaVersionError(FailedPreconditionError):
    """The store on disk was written by a newer, unknown schema."""


class StoreInUseError(OSError):
    """Another process has the database open (RocksDB allows one)."""


class StoreOpenError(OSError):
    """RocksDB refused to open the store: a corrupted or unreadable file, a read-only disk."""


class Store:
    """An open RocksDB database in `path`; created on first use. A `seam.StoreBackend` for
    one process: its locks and allocators are in-process."""

    shared = False

    def __init__(self, path: Path, durability: str = "sync") -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}, got {durability!r}")
        path.mkdir(parents=True, exist_ok=True)
        tables = BlockBasedOptions()
        tables.set_block_cache(Cache(BLOCK_CACHE_BYTES))
        if BLOOM_BITS_PER_KEY:
            tables.set_bloom_filter(BLOOM_BITS_PER_KEY, False)  # full filter, not block-based

        def family_options() -> Options:
            family = Options(raw_mode=True)
            family.set_block_based_table_factory(tables)
            return family

        options = family_options()
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        families = {name: family_options() for name in COLUMN_FAMILIES}
        self._families = families
        _check_current(path)
        _check_tables_kept(path, families)
        try:
            self._db = Rdict(str(path), options, column_families=families)
        except Exception as err:  # rocksdict raises a bare Exception carrying RocksDB's status
            if "/LOCK:" in str(err):
                raise StoreInUseError(
                    f"{path} is in use by another pml process (RocksDB holds its LOCK file)"
                ) from err
            raise _open_error(path, err) from err
        self.path = path
        self.durability = durability
        self._cf = {name: self._db.get_column_family(name) for name in COLUMN_FAMILIES}
        # Guards the writer's overlay and the read cache together (see get_many).
        self._lock = threading.Lock()
        # Held by an erase for its whole flush and compaction, and by `close` before it closes
        # the families: closing them under a running compaction failed ("Already borrowed")
        # and left the database open, its LOCK held.
        self._erasing = threading.Lock()
        self._read_cache = _ReadCache(READ_CACHE_BYTES)
        self._fills: list[_Fill] = []  # get_many calls reading RocksDB outside the lock now
        self.schema_version = SCHEMA_VERSION
        try:
            found = _stored_schema(self._db, self._cf[CF_META], path)
        except SchemaVersionError:
            self._close_families()
            raise
        except Exception as err:  # the first read of the store: a corrupted table file
            self._close_families(after_error=True)
            raise _open_error(path, err) from err
        handles = {name: self._db.get_column_family_handle(name) for name in COLUMN_FAMILIES}
        self._writer = GroupCommitWriter(
            self._db, handles, self._lock, self._drop_cached, sync=durability == "sync"
        )
        self._schema = _SchemaMark(self._cf[CF_META], found, self._writer)

    @property
    def location(self) -> str:
        return str(self.path)

    def checkpoint(self, dest: Path) -> int:
        """Write a consistent copy of the store to `dest` (which must not exist yet), openable
        as a data directory, while writes go on: RocksDB's checkpoint, with the SST files
        hard-linked when `dest` is on the same filesystem (they are never modified) and the
        rest copied. It holds every write acknowledged before the call; returns the sequence
        number it holds at least."""
        self._writer.check_open()
        sequence = int(self._db.latest_sequence_number())
        Checkpoint(self._db).create_checkpoint(str(dest))
        return sequence

    def erase_overwritten(self, keys: Sequence[tuple[str, bytes]] | None = None) -> None:
        """Rewrite the store's table files so that no value overwritten or deleted before the
        call stays on disk (docs/storage.md, Data left on disk): every family's memtable is
        flushed (a write-ahead log file goes once no family's memtable needs it), then each
        family's whole range, or with `keys` ((family, key) of the rows deleted) only the range
        from their least to their greatest key, compacted down to the last level, that level
        too. Writes go on meanwhile (the compaction is not exclusive); a checkpoint taken
        before keeps its own hard links to the old files. A `close` waits for an erase begun;
        one begun after it raises StoreClosedError."""
        with self._erasing:
            self._writer.check_open()
            for name in COLUMN_FAMILIES:
                self._family(name).flush(True)
            ranges: dict[str, tuple[bytes | None, bytes | None]]
            if keys is None:
                ranges = dict.fromkeys(COLUMN_FAMILIES, (None, None))
            else:
                by_family: dict[str, list[bytes]] = {}
                for cf, key in keys:
                    by_family.setdefault(cf, []).append(key)
                ranges = {cf: (min(k), max(k) + b"\x00") for cf, k in by_family.items()}
            options = CompactOptions()
            options.set_exclusive_manual_compaction(False)
            options.set_bottommost_level_compaction(BottommostLevelCompaction.force_optimized())
            for cf, (begin, end) in ranges.items():
                self._family(cf).compact_range(begin, end, options)

    def locks(self, name: str, stripes: int) -> LocalLocks:
        return LocalLocks(stripes)

    def allocator(self, name: str) -> IdAllocator:
        from pml_server.storage.allocator import BlockAllocator
        from pml_server.storage.repo import Repository

        return BlockAllocator(Repository(self), name)

    # ---- reads -------------------------------------------------------------------------------

    def get(self, cf: str, key: bytes) -> bytes | None:
        with self._lock:
            pending = self._writer.pending(cf).get(key)
        if pending is not None:
            return pending[1]
        value: bytes | None = self._family(cf).get(key)
        return value

    def get_many(self, cf: str, keys: Sequence[bytes]) -> list[bytes | None]:
        """`get` for each key, in order, as one RocksDB multi-get (which releases the GIL).
        Column families listed in `READ_CACHED` are answered from `_ReadCache` when they can.

        The multi-get runs outside the store's lock: a tenant's Suggest over big patterns reads
        megabytes in it (ten 500 KB records: about 5 ms), and every other call's reads and
        writes queued behind the lock for that long (docs/reliability.md, Expensive tenants: the
        neighbour's p99). What it
        read is cached only for the keys no write dropped meanwhile (`_Fill`), so a value
        older than a write never stays in the cache."""
        if not keys:
            return []
        cached = cf in READ_CACHED
        fill: _Fill | None = None
        with self._lock:
            out: list[bytes | None] = []
            missing: list[int] = []
            overlay = self._writer.pending(cf)
            for i, key in enumerate(keys):
                pending = overlay.get(key)
                value = pending[1] if pending is not None else None
                if pending is None and cached:
                    value = self._read_cache.get(cf, key)
                if pending is None and value is None:
                    missing.append(i)
                out.append(value)
            if not missing:
                return out
            if cached:
                fill = _Fill(cf)
                self._fills.append(fill)
        fetched = False
        try:
            self._fetch(cf, keys, missing, out)
            fetched = True
        finally:
            if fill is not None:
                with self._lock:  # one section: a write after it drops what it cached
                    self._fills.remove(fill)
                    for i in missing if fetched else ():
                        value = out[i]
                        if value is not None and keys[i] not in fill.dropped:
                            self._read_cache.put(cf, keys[i], value)
        return out

    def _drop_cached(self, cf: str, key: bytes) -> None:
        """Under the lock: `key` is being written; no cached copy of it may survive, including
        one a `get_many` in progress read before the write. The writer calls it for every key
        it writes, in the section that queues the write (or, for `fast`, right after it)."""
        if cf not in READ_CACHED:
            return
        self._read_cache.drop(cf, key)
        for fill in self._fills:
            if fill.cf == cf:
                fill.dropped.add(key)

    def _fetch(
        self, cf: str, keys: Sequence[bytes], missing: list[int], out: list[bytes | None]
    ) -> None:
        # rocksdict's stub types a multi-get's result as "Any | None"; it is one value per key
        values: list[bytes | None] = self._family(cf).get([keys[i] for i in missing]) or []
        for i, value in zip(missing, values, strict=True):
            out[i] = value

    def _family(self, cf: str) -> Rdict:
        family = self._cf.get(cf)
        if family is None:
            raise StoreClosedError("store is closed")
        return family

    def scan(
        self,
        cf: str,
        prefix: bytes,
        *,
        start: bytes | None = None,
        limit: int | None = None,
        reverse: bool = False,
    ) -> list[tuple[bytes, bytes]]:
        """Rows whose key starts with `prefix`, in key order (or reversed), from `start` on
        (inclusive; for reverse scans `start` is the exclusive upper bound), at most `limit`."""
        with self._lock:
            pending = {
                key: value
                for key, (_, value) in self._writer.pending(cf).items()
                if key.startswith(prefix)
            }
        wanted = None if limit is None else limit + len(pending)
        rows = dict(self._scan_db(cf, prefix, start, wanted, reverse))
        for key, value in pending.items():
            if value is None:
                rows.pop(key, None)
            else:
                rows[key] = value
        keys = sorted(rows, reverse=reverse)
        if start is not None:
            keys = [k for k in keys if (k < start if reverse else k >= start)]
        if limit is not None:
            keys = keys[:limit]
        return [(k, rows[k]) for k in keys]

    def scan_stored(self, cf: str, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Rows whose key starts with `prefix`, in key order, streamed from the database one at
        a time: for reading a whole column family at open, before anything writes (a write
        not yet applied is not seen). `scan` holds every row in memory at once."""
        with self._lock:
            if self._writer.pending(cf):
                raise RuntimeError(f"scan_stored({cf!r}) while writes to it are pending")
        yield from self._scan_db(cf, prefix, None, None, False)

    def _scan_db(
        self, cf: str, prefix: bytes, start: bytes | None, limit: int | None, reverse: bool
    ) -> Iterable[tuple[bytes, bytes]]:
        it = self._family(cf).iter(ReadOptions())
        if reverse:
            upper = start if start is not None else prefix_end(prefix)
            if upper is None:
                it.seek_to_last()
            else:
                it.seek_for_prev(upper)
                if it.valid() and it.key() >= upper:
                    it.prev()
        else:
            it.seek(start if start is not None and start > prefix else prefix)
        count = 0
        while it.valid() and (limit is None or count < limit):
            key = it.key()
            if not key.startswith(prefix):
                break
            yield key, it.value()
            count += 1
            if reverse:
                it.prev()
            else:
                it.next()

    # ---- writes (`_group_commit.GroupCommitWriter`) ------------------------------------------

    def submit(self, ops: Sequence[Op]) -> WriteTicket:
        """Queue `ops` as one atomic batch. Reads see them at once; `wait()` the ticket before
        acknowledging anything to a client."""
        self._schema.before_write()
        if any(cf == CF_REQUEST_REWRITE for cf, _, _ in ops):
            requests = self._family(CF_REQUESTS)
            decide = functools.partial(_unchanged_rewrites, self._writer, requests, ops)
            return self._writer.submit_decided(decide)[0]
        return self._writer.submit(ops)

    def write(self, ops: Sequence[Op]) -> None:
        self._schema.before_write()
        if any(cf == CF_REQUEST_REWRITE for cf, _, _ in ops):
            self.submit(ops).wait()
        else:
            self._writer.write(ops)

    def delete_unchanged(self, cf: str, rows: Sequence[tuple[bytes, bytes]]) -> int:
        """See `seam.BatchWrites.delete_unchanged`: compared and queued under the store's lock,
        which every write is queued under."""
        self._schema.before_write()
        family = self._family(cf)

        def decide() -> list[Op]:
            now = _values_now(self._writer, family, cf, [key for key, _ in rows])
            return [(cf, key, None) for key, value in rows if now[key] == value]

        ticket, deleted = self._writer.submit_decided(decide)
        ticket.wait()
        return deleted

    def writes_held(self) -> AbstractContextManager[None]:
        """The block's submits are written together once it ends (see
        `GroupCommitWriter.writes_held`)."""
        return self._writer.writes_held()

    def close(self) -> None:
        if not self._writer.close():  # writes everything queued first
            return
        with self._erasing:  # an erase begun ends first
            try:
                self._db.flush()
                failed = False
            except Exception as err:  # a full disk: the WAL holds every acknowledged write, and
                # the next open replays it (docs/storage.md, The embedded store (RocksDB))
                log.error("store at %s not flushed at close: %s", self.path, err)
                failed = True
            self._close_families(after_error=failed)
        if not failed:
            _write_tables_kept(self.path, self._families)
        self._read_cache.clear()

    def _close_families(self, after_error: bool = False) -> None:
        """Column family views hold a reference to the database: close them first, or the
        database stays open (and locked) until they are garbage-collected. `after_error`:
        each close repeats RocksDB's I/O error, and still releases the database."""
        handles = [*self._cf.values(), self._db]
        self._cf.clear()
        for handle in handles:
            if after_error:
                with contextlib.suppress(Exception):
                    handle.close()
            else:
                handle.close()


def _unchanged_rewrites(writer: GroupCommitWriter, requests: Rdict, ops: Sequence[Op]) -> list[Op]:
    """`ops` with each `CF_REQUEST_REWRITE` op a put of its answer in `requests` where the row
    still holds the answer as read, and dropped otherwise (`keys.apply_rewrites`: in the
    batch's order, over the rows as a batch queued now is written over). Called under the
    store's lock in the section that queues the batch (`submit_decided`), as
    `Store.delete_unchanged` decides."""
    rewritten = list({key: None for cf, key, _ in ops if cf == CF_REQUEST_REWRITE})
    return apply_rewrites(ops, _values_now(writer, requests, CF_REQUESTS, rewritten))


def _values_now(
    writer: GroupCommitWriter, family: Rdict, cf: str, keys: Sequence[bytes]
) -> dict[bytes, bytes | None]:
    """Under the store's lock: each key's value in `family` (`cf`) as a batch queued now is
    written over (its queued write, else the database's; None when there is none)."""
    overlay = writer.pending(cf)
    missing = [key for key in keys if key not in overlay]
    # a multi-get (rocksdict types its result as "Any | None": one value per key)
    stored: list[bytes | None] = (family.get([*missing]) or []) if missing else []
    now = dict(zip(missing, stored, strict=True))
    for key in keys:
        pending = overlay.get(key)
        if pending is not None:
            now[key] = pending[1]
    return now


class _SchemaMark:
    """The store's schema version, raised to this build's just before the first write the
    build makes, not at open: a build that refuses the store once open (another embedding
    model) leaves it to the older build that wrote it (docs/storage.md, Migrations). Put ahead
    of that write in the WAL, so no crash keeps the write without it."""

    def __init__(self, meta: Rdict, found: int, writer: GroupCommitWriter) -> None:
        self._meta = meta
        self._found = found
        self._writer = writer

    def before_write(self) -> None:
        if self._found < SCHEMA_VERSION:
            self._writer.check_open()
            self._meta.put(_META_SCHEMA_KEY, struct.pack(">I", SCHEMA_VERSION))
            self._found = SCHEMA_VERSION


def _stored_schema(db: Rdict, meta: Rdict, path: Path) -> int:
    """The store's schema version as found (0: none yet); SchemaVersionError when a newer
    pml wrote it."""
    raw = meta.get(_META_SCHEMA_KEY)
    if raw is None:
        raw = db.get(_META_SCHEMA_KEY)  # stores created before column families existed
    found = 0 if raw is None else int(struct.unpack(">I", raw)[0])
    if found > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"store at {path} has schema version {found}; this pml knows up to "
            f"{SCHEMA_VERSION}: upgrade pml to open it, or restore a backup taken by this "
            "version of pml"
        )
    return found


def _live_tables(path: Path, families: dict[str, Options]) -> set[str]:
    """The table files the MANIFEST of the closed store at `path` lists, read with a read-only
    open (which deletes nothing)."""
    probe = Rdict(
        str(path),
        Options(raw_mode=True),
        column_families=families,
        access_type=AccessType.read_only(),
    )
    try:
        return {str(f["name"]).lstrip("/") for f in probe.live_files()}
    finally:
        probe.close()


def _write_tables_kept(path: Path, families: dict[str, Options]) -> None:
    """Name, at a clean close, the table files the closed store holds (read once every
    background job has ended; docs/storage.md, Opening): the next open checks that its
    MANIFEST still lists them. Written aside, then renamed."""
    part = path / (_TABLES_FILE + ".part")
    try:
        tables = sorted(_live_tables(path, families))
        with open(part, "w", encoding="utf-8") as out:
            json.dump(tables, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(part, path / _TABLES_FILE)
    except Exception as err:  # a full disk (rocksdict raises a bare Exception): the next
        # open checks nothing
        log.warning("store at %s: its table files not listed at close: %s", path, err)


def _check_current(path: Path) -> None:
    """Refuse a store whose `CURRENT` file is gone while its data files are there (a copy
    made without it): RocksDB takes a directory without `CURRENT` for no store, writes a new
    empty one beside the files, and its next open serves that, deleting the old table files
    and log (docs/storage.md, Opening)."""
    if (path / "CURRENT").exists():
        return
    found = sorted(f.name for pattern in ("*.sst", "*.log") for f in path.glob(pattern))
    if found:
        raise StoreOpenError(
            f"cannot open the store at {path}: it has no CURRENT file but holds a store's "
            f"files ({', '.join(found[:5])}{' ...' if len(found) > 5 else ''}); opening it "
            "would start an empty store there and delete them. Restore it from a backup, or "
            "use another data directory"
        )


def _check_tables_kept(path: Path, families: dict[str, Options]) -> None:
    """Refuse a store whose MANIFEST no longer lists a table file it held at its last clean
    close (a truncated or damaged MANIFEST): RocksDB opens such a store as it was before
    those tables (empty, or older) without a word, and deletes their files. Read with a
    read-only open, which deletes nothing; the list is removed before the store opens
    (a later crash leaves none, and the next open checks nothing)."""
    listed = path / _TABLES_FILE
    if not listed.exists():
        return
    try:
        tables = [str(t) for t in json.loads(listed.read_text(encoding="utf-8"))]
    except (OSError, ValueError):
        tables = []  # unreadable: nothing to check against
    if tables:
        try:
            live = _live_tables(path, families)
        except Exception as err:
            if "/LOCK:" in str(err):
                raise StoreInUseError(
                    f"{path} is in use by another pml process (RocksDB holds its LOCK file)"
                ) from err
            raise _open_error(path, err) from err
        lost = [t for t in tables if t not in live]
        if lost:
            raise StoreOpenError(
                f"cannot open the store at {path}: its MANIFEST no longer lists the table "
                f"files {', '.join(lost[:5])}{' ...' if len(lost) > 5 else ''} it held at its "
                "last close (a truncated or damaged MANIFEST; opening it would drop their "
                "rows). Restore it from a backup, or use another data directory"
            )
    listed.unlink()


# RocksDB's "(os error N)" for a data directory whose file system refuses the open, not a
# damaged store: a backup restored there would be refused the same way.
_REFUSED_BY_THE_FILE_SYSTEM = {
    errno.ENOSPC: "free space on its disk",
    errno.EDQUOT: "free space in the disk quota",
    errno.EROFS: "mount its file system read-write",
    errno.EACCES: "give this user write access to it",
    errno.EPERM: "give this user write access to it",
    errno.EMFILE: "raise the open-file limit (ulimit -n)",
    errno.ENFILE: "raise the system's open-file limit",
}


def _open_error(path: Path, err: Exception) -> StoreOpenError:
    """One line naming the data directory, RocksDB's reason and what to do (docs/storage.md,
    The embedded store (RocksDB)): "Restore it from a backup" for a damaged store, not for a
    full or read-only disk, which were told the same."""
    found = re.search(r"\(os error (\d+)\)", str(err))
    remedy = _REFUSED_BY_THE_FILE_SYSTEM.get(int(found.group(1))) if found else None
    if remedy is not None:
        return StoreOpenError(
            f"cannot open the store at {path}: {err}. Its file system refused it: {remedy}, then "
            "start again"
        )
    return StoreOpenError(
        f"cannot open the store at {path}: {err}. Restore it from a backup, or use another "
        "data directory"
    )
