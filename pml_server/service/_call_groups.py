"""Concurrent calls of one key run together.

Unary captures from many callers of one tenant each paid for what a batch pays once: an
embedding call, a durability wait, an index insert (docs/capture.md, Concurrent unary captures:
with 8 callers, `record` spent
about 1.15 ms of CPU a capture outside the model, where a streamed capture's `record_many`
spent about 0.45; `python -m benches.profile.capture_profile`). Here a call
that finds a run slot free runs at once; calls that arrive while every slot is busy queue by
key, and whichever caller next finds a slot free runs its key's queued calls (up to
`max_batch`) as one batch and hands each caller its outcome. Nobody waits for a batch to fill: a
lone caller runs alone, through `run_one`, as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class _Call(Generic[T, R]):
    item: T
    outcome: R | BaseException | None = None
    done: bool = False


class CallGroups(Generic[K, T, R]):
    """At most `slots` runs in flight at once (a run holds its slot until its batch is done,
    durability wait included: while one run waits for the disk, another uses the CPU)."""

    def __init__(self, slots: int, max_batch: int) -> None:
        if slots < 1 or max_batch < 1:
            raise ValueError("slots and max_batch must be >= 1")
        self._free = slots
        self._max_batch = max_batch
        self._queues: dict[K, list[_Call[T, R]]] = {}
        self._changed = threading.Condition()
        self.runs = 0  # batches run, for tests and stats

    def call(
        self,
        key: K,
        item: T,
        run_one: Callable[[T], R],
        run_many: Callable[[Sequence[T]], Sequence[R | BaseException]],
    ) -> R:
        """`run_one(item)`, or `item`'s outcome in `run_many(items)` with the calls queued
        beside it: what `run_one` returns, or raises what refused it. `run_many` must give
        each item the outcome `run_one` would have (the errors as values)."""
        mine: _Call[T, R] = _Call(item)
        with self._changed:
            self._queues.setdefault(key, []).append(mine)
            while not mine.done:
                queue = self._queues.get(key)
                if self._free == 0 or not queue:
                    self._changed.wait()
                    continue
                self._free -= 1
                batch = queue[: self._max_batch]
                del queue[: self._max_batch]
                if not queue:
                    del self._queues[key]
                self._changed.release()
                outcomes: list[R | BaseException] | None = None
                try:
                    outcomes = _run(batch, run_one, run_many)
                finally:
                    self._changed.acquire()
                    self._free += 1
                    self.runs += 1
                    if outcomes is None:  # interrupted (e.g. KeyboardInterrupt): nobody hangs
                        outcomes = [RuntimeError("the grouped call was interrupted")] * len(batch)
                    for call, outcome in zip(batch, outcomes, strict=True):
                        call.outcome = outcome
                        call.done = True
                    self._changed.notify_all()
        done = mine.outcome
        if isinstance(done, BaseException):
            raise done
        return done  # type: ignore[return-value]  # done and not an error: run_one's R


def _run(
    batch: list[_Call[T, R]],
    run_one: Callable[[T], R],
    run_many: Callable[[Sequence[T]], Sequence[R | BaseException]],
) -> list[R | BaseException]:
    """Each call's outcome, in order."""
    try:
        if len(batch) == 1:
            return [run_one(batch[0].item)]
        outcomes = list(run_many([call.item for call in batch]))
    except Exception as error:  # refuses every call of the batch
        return [error] * len(batch)
    if len(outcomes) != len(batch):
        mismatch = RuntimeError(f"{len(outcomes)} outcomes for {len(batch)} grouped calls")
        return [mismatch] * len(batch)
    return outcomes
