"""CallGroups: a lone call runs alone; calls arriving while every slot is busy run as one batch
per key, each caller getting its own outcome or error."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from pml_server.service._call_groups import CallGroups


class Recorder:
    """run_one / run_many that log what they ran; the first run blocks until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ones: list[int] = []
        self.manys: list[list[int]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def _gate(self) -> None:
        if not self.started.is_set():
            self.started.set()
            assert self.release.wait(10)

    def one(self, item: int) -> int:
        self._gate()
        with self.lock:
            self.ones.append(item)
        if item < 0:
            raise ValueError(f"refused {item}")
        return item * 10

    def many(self, items: Sequence[int]) -> list[int | BaseException]:
        self._gate()
        with self.lock:
            self.manys.append(list(items))
        return [ValueError(f"refused {i}") if i < 0 else i * 10 for i in items]


def _call_in_threads(
    groups: CallGroups[str, int, int], recorder: Recorder, calls: list[tuple[str, int]]
) -> dict[int, int | BaseException]:
    outcomes: dict[int, int | BaseException] = {}

    def caller(key: str, item: int) -> None:
        try:
            outcomes[item] = groups.call(key, item, recorder.one, recorder.many)
        except BaseException as error:
            outcomes[item] = error

    threads = [threading.Thread(target=caller, args=call) for call in calls]
    for thread in threads:
        thread.start()
        time.sleep(0.02)  # arrival order = list order
    recorder.release.set()
    for thread in threads:
        thread.join(10)
    return outcomes


def test_a_lone_call_runs_alone() -> None:
    groups: CallGroups[str, int, int] = CallGroups(slots=2, max_batch=8)
    recorder = Recorder()
    recorder.started.set()  # no gate
    assert groups.call("t", 3, recorder.one, recorder.many) == 30
    with pytest.raises(ValueError, match="refused -1"):
        groups.call("t", -1, recorder.one, recorder.many)
    assert recorder.ones == [3, -1]
    assert recorder.manys == []


def test_calls_arriving_while_the_slots_are_busy_run_as_one_batch_each_with_its_outcome() -> None:
    groups: CallGroups[str, int, int] = CallGroups(slots=1, max_batch=8)
    recorder = Recorder()
    outcomes = _call_in_threads(groups, recorder, [("t", 1), ("t", 2), ("t", -3), ("t", 4)])
    assert recorder.ones == [1]  # ran alone, holding the only slot
    assert recorder.manys == [[2, -3, 4]]  # queued meanwhile, in arrival order
    assert (outcomes[1], outcomes[2], outcomes[4]) == (10, 20, 40)
    assert isinstance(outcomes[-3], ValueError)
    assert "refused -3" in str(outcomes[-3])
    assert groups.runs == 2


def test_batches_never_mix_keys_and_stay_within_the_batch_bound() -> None:
    groups: CallGroups[str, int, int] = CallGroups(slots=1, max_batch=2)
    recorder = Recorder()
    calls = [("a", 1), ("a", 2), ("b", 3), ("a", 4), ("b", 5), ("a", 6)]
    outcomes = _call_in_threads(groups, recorder, calls)
    assert outcomes == {item: item * 10 for _, item in calls}
    keys = {item: key for key, item in calls}
    for batch in recorder.manys:
        assert 1 < len(batch) <= 2
        assert len({keys[i] for i in batch}) == 1
    # 1 alone; a's 2 and 4, b's 3 and 5 in batches; a's 6 left alone
    assert recorder.ones == [1, 6]
    assert sorted(map(sorted, recorder.manys)) == [[2, 4], [3, 5]]


def test_a_batch_that_fails_as_a_whole_refuses_each_of_its_calls() -> None:
    groups: CallGroups[str, int, int] = CallGroups(slots=1, max_batch=8)
    recorder = Recorder()

    def broken(items: Sequence[int]) -> list[int | BaseException]:
        raise OSError("store closed")

    outcomes: dict[int, int | BaseException] = {}

    def caller(item: int) -> None:
        try:
            outcomes[item] = groups.call("t", item, recorder.one, broken)
        except BaseException as error:
            outcomes[item] = error

    threads = [threading.Thread(target=caller, args=(i,)) for i in (1, 2, 3)]
    for thread in threads:
        thread.start()
        time.sleep(0.02)
    recorder.release.set()
    for thread in threads:
        thread.join(10)
    assert outcomes[1] == 10
    assert all(isinstance(outcomes[i], OSError) for i in (2, 3))


def test_slots_and_batch_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        CallGroups(slots=0, max_batch=8)
    with pytest.raises(ValueError, match="must be >= 1"):
        CallGroups(slots=1, max_batch=0)
