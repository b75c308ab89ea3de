"""The embedded store's group commit under `writes_held`: a batch's captures wait for the
batch to end and go to disk together; nothing else waits for a batch."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from rocksdict import WriteBatch

from pml_server.storage import Store, _group_commit
from pml_server.storage.keys import CF_META, CF_PATTERNS
from pml_server.storage.seam import Op, WriteTicket

# Long enough that only the end of the block (or an eager write) can release a held write
# while a test looks; a correct store never waits for it.
HOLD_FOR_THE_TEST = 120.0
LOOK_SECONDS = 0.3


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.setattr(_group_commit, "_HOLD_SECONDS", HOLD_FOR_THE_TEST)
    opened = Store(tmp_path / "db", "sync")
    yield opened
    opened.close()


def _finished(ticket: WriteTicket, timeout: float) -> bool:
    """The ticket's write is finished within `timeout` (its lock is free)."""
    if not ticket._pending.acquire(timeout=timeout):
        return False
    ticket._pending.release()
    return True


def _count_groups(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every group the writer writes (one RocksDB write and one fsync each): its op count."""
    groups: list[int] = []
    build = store._writer._batch

    def counted(ops: Iterable[Op]) -> WriteBatch:
        listed = list(ops)
        groups.append(len(listed))
        return build(listed)

    monkeypatch.setattr(store._writer, "_batch", counted)
    return groups


def test_a_held_batch_is_written_as_one_group_when_its_block_ends(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = _count_groups(store, monkeypatch)
    with store.writes_held():
        tickets = [store.submit([(CF_PATTERNS, bytes([i]), b"v")]) for i in range(8)]
        assert not _finished(tickets[0], LOOK_SECONDS)  # held: the batch is still coming
        assert groups == []
    assert all(_finished(t, 30.0) for t in tickets)
    assert groups == [8]
    assert store.get_many(CF_PATTERNS, [bytes([i]) for i in range(8)]) == [b"v"] * 8


def test_a_write_from_outside_the_block_is_not_held(store: Store) -> None:
    entered, leave = threading.Event(), threading.Event()
    held: list[WriteTicket] = []

    def batch() -> None:
        with store.writes_held():
            held.append(store.submit([(CF_PATTERNS, b"held", b"1")]))
            entered.set()
            leave.wait(60)

    worker = threading.Thread(target=batch)
    worker.start()
    try:
        assert entered.wait(30)
        lone = store.submit([(CF_PATTERNS, b"lone", b"2")])  # a single capture beside it
        assert _finished(lone, 30.0)
        assert _finished(held[0], 0.0)  # taken in the same group, not left behind
        store.write([(CF_META, b"waited", b"3")])  # returns: `write` is never held either
    finally:
        leave.set()
        worker.join()


def test_write_inside_a_block_is_not_held(store: Store) -> None:
    with store.writes_held():
        ticket = store.submit([(CF_PATTERNS, b"a", b"1")])
        store.write([(CF_META, b"mark", b"1")])  # an id block's mark: its caller waits now
        assert _finished(ticket, 0.0)  # written with it


def test_close_writes_what_a_block_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_group_commit, "_HOLD_SECONDS", HOLD_FOR_THE_TEST)
    first = Store(tmp_path / "db", "sync")
    with first.writes_held():
        ticket = first.submit([(CF_PATTERNS, b"k", b"v")])
        closer = threading.Thread(target=first.close)
        closer.start()
        closer.join(30)
        assert not closer.is_alive()
    ticket.wait()
    again = Store(tmp_path / "db", "sync")
    try:
        assert again.get(CF_PATTERNS, b"k") == b"v"
    finally:
        again.close()
