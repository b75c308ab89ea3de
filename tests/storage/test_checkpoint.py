"""`Store.checkpoint`: a copy of the store taken while writers go on holds every write
acknowledged before it began, opens as a store of its own, and never changes afterwards."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pml_server.storage import Store
from pml_server.storage.keys import CF_PATTERNS


def _key(writer: int, n: int) -> bytes:
    return f"w{writer}-{n:06d}".encode()


def test_a_checkpoint_under_writes_holds_every_write_acknowledged_before_it(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "db", "sync")
    acknowledged: list[list[bytes]] = [[] for _ in range(3)]
    stop = threading.Event()

    def writer(w: int) -> None:
        n = 0
        while not stop.is_set():
            store.submit([(CF_PATTERNS, _key(w, n), b"v" * 100)]).wait()
            acknowledged[w].append(_key(w, n))
            n += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    try:
        while sum(map(len, acknowledged)) < 300:
            threading.Event().wait(0.01)
        before = [list(keys) for keys in acknowledged]  # acknowledged before the call
        sequence = store.checkpoint(tmp_path / "copy")
    finally:
        stop.set()
        for t in threads:
            t.join()
    written_after = sum(map(len, acknowledged))
    store.close()

    copy = Store(tmp_path / "copy", "sync")
    try:
        for keys in before:
            assert keys
            assert all(copy.get(CF_PATTERNS, key) == b"v" * 100 for key in keys)
        in_copy = sum(1 for _ in copy.scan(CF_PATTERNS, b"w"))
    finally:
        copy.close()
    assert sequence >= sum(map(len, before))
    assert sum(map(len, before)) <= in_copy <= written_after


def test_a_checkpoint_is_left_as_it_was_taken(tmp_path: Path) -> None:
    """Later writes and compaction of the live store do not reach the copy, though its SST
    files are hard links of the live ones."""
    store = Store(tmp_path / "db", "sync")
    store.write([(CF_PATTERNS, b"before", b"1")])
    store.checkpoint(tmp_path / "copy")
    store.write([(CF_PATTERNS, b"before", None), (CF_PATTERNS, b"after", b"2")])
    store.close()
    copy = Store(tmp_path / "copy", "sync")
    try:
        assert copy.get(CF_PATTERNS, b"before") == b"1"
        assert copy.get(CF_PATTERNS, b"after") is None
    finally:
        copy.close()


def test_a_checkpoint_refuses_a_path_that_exists(tmp_path: Path) -> None:
    store = Store(tmp_path / "db", "sync")
    try:
        (tmp_path / "taken").mkdir()
        with pytest.raises(Exception, match="exists"):
            store.checkpoint(tmp_path / "taken")
    finally:
        store.close()
