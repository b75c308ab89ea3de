"""`Store.get_many` and its read cache: the same answers as `get`, never a stale value, bounded
memory. Real RocksDB in tmp_path, both durability modes."""

from __future__ import annotations

import gc
import threading
import tracemalloc
from pathlib import Path

import pytest

from pml_server.domain.records import PatternCounters
from pml_server.storage import Store
from pml_server.storage.keys import CF_COUNTERS, CF_INTENTS, CF_PATTERNS
from pml_server.storage.rocks import _read_entry_weight, _ReadCache


@pytest.mark.parametrize("durability", ["sync", "fast"])
@pytest.mark.parametrize("cf", [CF_PATTERNS, CF_COUNTERS, CF_INTENTS])  # cached and not
def test_get_many_follows_every_write(tmp_path: Path, durability: str, cf: str) -> None:
    store = Store(tmp_path, durability)
    keys = [b"a", b"b", b"c"]
    assert store.get_many(cf, keys) == [None, None, None]
    store.write([(cf, b"a", b"1"), (cf, b"c", b"3")])
    assert store.get_many(cf, keys) == [b"1", None, b"3"]
    assert store.get_many(cf, keys) == [b"1", None, b"3"]  # a second read, from the cache
    store.write([(cf, b"a", b"1'"), (cf, b"b", b"2"), (cf, b"c", None)])
    assert store.get_many(cf, keys) == [b"1'", b"2", None]
    assert store.get_many(cf, keys) == [store.get(cf, k) for k in keys]
    store.close()
    reopened = Store(tmp_path, durability)
    assert reopened.get_many(cf, keys) == [b"1'", b"2", None]
    reopened.close()


def test_queued_writes_are_seen_before_commit(tmp_path: Path) -> None:
    store = Store(tmp_path, "sync")
    store.write([(CF_COUNTERS, b"k", b"old")])
    assert store.get_many(CF_COUNTERS, [b"k"]) == [b"old"]  # now cached
    ticket = store.submit([(CF_COUNTERS, b"k", b"new")])
    assert store.get_many(CF_COUNTERS, [b"k"]) == [b"new"]
    ticket.wait()
    assert store.get_many(CF_COUNTERS, [b"k"]) == [b"new"]
    store.close()


@pytest.mark.parametrize("durability", ["sync", "fast"])
def test_readers_never_see_a_value_older_than_an_acknowledged_write(
    tmp_path: Path, durability: str
) -> None:
    """A writer bumps a counter; readers racing with it must always see at least the value
    acknowledged before their read started (a stale cache entry would show an older one)."""
    store = Store(tmp_path, durability)
    keys = [b"n0", b"n1"]
    store.write([(CF_COUNTERS, k, b"0") for k in keys])
    acknowledged = [0]
    stale: list[tuple[int, int]] = []
    done = threading.Event()

    def writer() -> None:
        for n in range(1, 1500):
            store.write([(CF_COUNTERS, k, str(n).encode()) for k in keys])
            acknowledged[0] = n
        done.set()

    def reader() -> None:
        reads = 0
        while not done.is_set() or reads < 100:
            floor = acknowledged[0]
            for value in store.get_many(CF_COUNTERS, keys):
                assert value is not None
                if int(value) < floor:
                    stale.append((int(value), floor))
            reads += 1

    threads = [threading.Thread(target=writer)] + [
        threading.Thread(target=reader) for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stale == []
    assert store.get_many(CF_COUNTERS, keys) == [b"1499", b"1499"]
    store.close()


def test_cache_stays_within_its_byte_budget() -> None:
    # an entry counts its key's and value's bytes and what holding them costs besides
    one = _read_entry_weight((CF_PATTERNS, b"k000"), b"x" * 96)
    assert one == 100 + 320 + 2 * 33 + 56  # the LRU's entry, two bytes objects, the key tuple
    cache = _ReadCache(budget=10 * one)
    for i in range(100):
        cache.put(CF_PATTERNS, f"k{i:03}".encode(), b"x" * 96)
    kept = [i for i in range(100) if cache.get(CF_PATTERNS, f"k{i:03}".encode()) is not None]
    assert kept == list(range(90, 100))  # the ten most recent
    cache.get(CF_PATTERNS, b"k090")  # touched: now the most recently used
    cache.put(CF_PATTERNS, b"new", b"y" * 97)
    assert cache.get(CF_PATTERNS, b"k090") is not None
    assert cache.get(CF_PATTERNS, b"k091") is None  # the least recently used went
    cache.put(CF_PATTERNS, b"huge", b"z" * 100_000)  # larger than any value worth caching
    assert cache.get(CF_PATTERNS, b"huge") is None


def test_cache_holds_at_most_its_budget_of_short_values() -> None:
    """Counted in bytes, the cache must hold no more than its budget: each entry's key and value
    objects and its place in the cache cost about 300 bytes besides their bytes, as much as a
    new pattern's counters (about 240 bytes) and more than twice the budget when uncounted."""
    budget = 4 * 1024 * 1024
    counters = PatternCounters(1, 1, 0, 1_700_000_000_000, 5.0, 1, 0, {"$P0": ['"a.json"']})
    value = counters.to_json()
    cache = _ReadCache(budget)
    count = 2 * budget // len(value)  # past the budget twice over, whatever it counts
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(count):  # keys and values as a store read hands them out
            cache.put(
                CF_COUNTERS, bytes(bytearray(b"\x00\x02t1pat_%016x" % n)), bytes(bytearray(value))
            )
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= budget, f"{held} bytes held for a budget of {budget}"


@pytest.mark.parametrize("durability", ["sync", "fast"])
def test_a_slow_multi_get_holds_no_one_else_up(
    tmp_path: Path, durability: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multi-get of big values takes milliseconds (issue 18: a tenant's Suggest over ten
    500 KB patterns); other calls' reads and writes must not queue behind it, and a write made
    while it reads must not leave the older value it read in the cache."""
    store = Store(tmp_path, durability)
    store.write([(CF_PATTERNS, b"big", b"old"), (CF_PATTERNS, b"small", b"s")])
    assert store.get_many(CF_PATTERNS, [b"small"]) == [b"s"]  # cached
    reading, release = threading.Event(), threading.Event()
    fetch = Store._fetch

    def slow_fetch(self: Store, cf: str, keys: object, missing: object, out: object) -> None:
        fetch(self, cf, keys, missing, out)  # type: ignore[arg-type]
        if threading.current_thread().name == "slow-reader":
            reading.set()
            assert release.wait(10)

    monkeypatch.setattr(Store, "_fetch", slow_fetch)
    got: list[list[bytes | None]] = []
    slow = threading.Thread(
        target=lambda: got.append(store.get_many(CF_PATTERNS, [b"big"])), name="slow-reader"
    )
    slow.start()
    assert reading.wait(10)
    # While the slow read is inside RocksDB: another read and a write go through.
    others = threading.Thread(
        target=lambda: (
            got.append(store.get_many(CF_PATTERNS, [b"small"])),
            store.write([(CF_PATTERNS, b"big", b"new")]),
        )
    )
    others.start()
    others.join(5)
    assert not others.is_alive(), "a read or write waited for another call's multi-get"
    release.set()
    slow.join(10)
    assert got == [[b"s"], [b"old"]]  # the slow read began before the write
    assert store.get_many(CF_PATTERNS, [b"big"]) == [b"new"]  # and did not cache "old"
    store.close()
