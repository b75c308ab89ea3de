"""KeyedLocks: one lock per key in use (request ids), taken in sorted order by batches."""

from __future__ import annotations

import threading
import time

from pml_server.capture.locks import KeyedLocks


def test_distinct_keys_never_block_each_other() -> None:
    locks = KeyedLocks()
    with locks.hold([("t", f"r{i}") for i in range(64)]):
        # With 1,024 stripes, two batches of 64 ids almost surely shared one; keyed, never.
        got = threading.Event()

        def take() -> None:
            with locks.hold([("t", f"s{i}") for i in range(64)]):
                got.set()

        other = threading.Thread(target=take)
        other.start()
        assert got.wait(5)
        other.join()


def test_same_key_is_exclusive_and_entries_are_dropped() -> None:
    locks = KeyedLocks()
    inside = 0
    most = 0
    guard = threading.Lock()

    def worker() -> None:
        nonlocal inside, most
        for _ in range(200):
            with locks.lock_for("t", "same"):
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1
    assert len(locks) == 0  # nothing held or waited for: no entry kept


def test_overlapping_batches_in_any_order_do_not_deadlock() -> None:
    locks = KeyedLocks()
    keys = [("t", f"r{i}") for i in range(20)]
    errors: list[BaseException] = []

    def batch(order: list[tuple[str, str]]) -> None:
        try:
            for _ in range(100):
                with locks.hold(order + order[:3]):  # duplicates are held once
                    pass
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [
        threading.Thread(target=batch, args=(keys[::step] if step > 0 else keys[::-1],))
        for step in (1, -1, 2, 3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors
    assert len(locks) == 0


def test_a_failed_acquire_leaves_no_entry() -> None:
    locks = KeyedLocks()

    class StopError(Exception):
        pass

    try:
        with locks.hold([("t", "a"), ("t", "b")]):
            raise StopError
    except StopError:
        pass
    assert len(locks) == 0
    with locks.lock_for("t", "a"):
        assert len(locks) == 1
