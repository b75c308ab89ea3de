"""A RocksDB data directory with a damaged file is refused at open, naming it, never opened as
a store holding less (docs/storage.md, The embedded store (RocksDB), Opening)."""

from __future__ import annotations

import shutil
from pathlib import Path

from pml_server.storage import Store
from pml_server.storage.keys import CF_META, CF_PATTERNS
from pml_server.storage.rocks import StoreOpenError

ROWS = 200


def _filled(path: Path) -> None:
    """A store of `ROWS` pattern rows, closed cleanly (the close flushes them to table files)."""
    store = Store(path, "sync")
    for start in range(0, ROWS, 50):
        store.write([(CF_PATTERNS, b"p%05d" % n, b"v" * 100) for n in range(start, start + 50)])
    store.close()


def test_a_store_whose_manifest_was_cut_is_refused_or_whole_never_less(tmp_path: Path) -> None:
    """RocksDB opened a store whose MANIFEST was cut as the store it was before the edits the
    lost part held (no rows at all, where it held 200), without a word, and deleted the table
    files only those edits listed: the store's data was gone for good. The open now compares
    the tables the last close named with those the MANIFEST lists (read-only, deleting
    nothing) and refuses, naming the store; the files stay for a repair. Cut at each eighth
    of its length, the store is refused or opens whole, never with fewer rows."""
    source = tmp_path / "source"
    _filled(source)
    [manifest] = source.glob("MANIFEST-*")
    size = manifest.stat().st_size
    refused: list[str] = []
    for eighth in range(8):
        path = tmp_path / f"cut{eighth}"
        shutil.copytree(source, path)
        tables = sorted(p.name for p in path.glob("*.sst"))
        with open(path / manifest.name, "r+b") as out:
            out.truncate(size * eighth // 8)
        try:
            store = Store(path, "sync")
        except StoreOpenError as err:
            refused.append(str(err))
            assert sorted(p.name for p in path.glob("*.sst")) == tables
            continue
        try:
            assert len(store.scan(CF_PATTERNS, b"")) == ROWS, eighth
        finally:
            store.close()
    assert len(refused) >= 4
    assert all("cannot open the store at" in m and "backup" in m for m in refused)


def test_a_store_closed_cleanly_opens_with_every_row(tmp_path: Path) -> None:
    path = tmp_path / "db"
    _filled(path)
    for _ in range(2):
        store = Store(path, "sync")
        try:
            assert len(store.scan(CF_PATTERNS, b"")) == ROWS
            assert store.get(CF_META, b"meta/schema_version") is not None
        finally:
            store.close()


def test_a_store_left_without_a_close_opens_with_every_row(tmp_path: Path) -> None:
    """A crash leaves no list of tables (the open removes it): nothing is checked, and the
    store opens as RocksDB recovers it (here a copy of the directory while it was open)."""
    path = tmp_path / "db"
    _filled(path)
    store = Store(path, "sync")  # the list is removed here
    try:
        store.write([(CF_PATTERNS, b"q", b"w")])
        shutil.copytree(path, tmp_path / "crashed")
    finally:
        store.close()
    store = Store(tmp_path / "crashed", "sync")
    try:
        assert len(store.scan(CF_PATTERNS, b"")) == ROWS + 1
    finally:
        store.close()


def test_a_copy_without_its_current_file_is_refused_never_opened_empty(tmp_path: Path) -> None:
    """A copy of a store (a backup's checkpoint) made without its CURRENT file: RocksDB took
    the directory for no store and wrote a new empty one beside the files, failing that open
    only for the log it found; the next open served the empty store and deleted the table
    files and the log, every row gone. The open refuses it, naming CURRENT, and writes
    nothing: CURRENT put back, the store opens whole."""
    source = tmp_path / "source"
    _filled(source)
    store = Store(source, "sync")
    copy = tmp_path / "copy"
    try:
        store.write([(CF_PATTERNS, b"q00000", b"in the log only")])
        store.checkpoint(copy)
    finally:
        store.close()
    current = (copy / "CURRENT").read_bytes()
    (copy / "CURRENT").unlink()
    files = sorted(p.name for p in copy.iterdir())
    assert any(name.endswith(".sst") for name in files)
    for _ in range(2):
        try:
            opened = Store(copy, "sync")
        except StoreOpenError as err:
            refusal = str(err)
        else:
            rows = len(opened.scan(CF_PATTERNS, b""))
            opened.close()
            raise AssertionError(f"opened without CURRENT, holding {rows} rows")
        assert sorted(p.name for p in copy.iterdir()) == files
        assert f"cannot open the store at {copy}: it has no CURRENT file" in refusal
    (copy / "CURRENT").write_bytes(current)
    store = Store(copy, "sync")
    try:
        assert len(store.scan(CF_PATTERNS, b"")) == ROWS + 1
    finally:
        store.close()
