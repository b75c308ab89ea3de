"""Cost-fair scheduling (`api.fairness`): a tenant's long calls give way to the short calls of
lighter tenants, at their checkpoints and before they start, for a bounded time. The clock is
fake (a pause ends on a condition or on the fake deadline, never on a real timing)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pml_server.api.admission.fairness import (
    CHECK_EVERY,
    MAX_PAUSE_SECONDS,
    NEIGHBOUR_GAP_SECONDS,
    QUANTUM_EVERY_SECONDS,
    SHORT_CALL_SECONDS,
    CpuFairness,
)
from pml_server.domain import yielding


def _burn_cpu(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _checkpoints() -> None:
    for _ in range(CHECK_EVERY):
        yielding.checkpoint()


class _Held:
    """A call of `tenant` in another thread, in progress until `release`."""

    def __init__(self, fairness: CpuFairness, tenant: str) -> None:
        self._inside = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(fairness, tenant))
        self._thread.start()
        assert self._inside.wait(10)

    def _run(self, fairness: CpuFairness, tenant: str) -> None:
        with fairness.call(tenant):
            self._inside.set()
            self._release.wait(30)

    def release(self) -> None:
        self._release.set()
        self._thread.join(30)


def _in_thread(work: Callable[[], None]) -> tuple[threading.Thread, list[str]]:
    done: list[str] = []

    def run() -> None:
        work()
        done.append("done")

    thread = threading.Thread(target=run)
    thread.start()
    return thread, done


def test_a_long_call_pauses_while_a_lighter_tenants_call_runs() -> None:
    now = [0.0]
    fairness = CpuFairness(clock=lambda: now[0])
    light = _Held(fairness, "light")
    assert yielding.contended is False  # one tenant: checkpoints do nothing

    def heavy_call() -> None:
        with fairness.call("heavy"):
            _burn_cpu(SHORT_CALL_SECONDS * 2)  # now long
            _checkpoints()

    thread, done = _in_thread(heavy_call)
    thread.join(0.5)
    assert done == []  # paused at its checkpoint: the clock does not move, light still runs
    assert thread.is_alive()
    light.release()
    thread.join(0.3)
    assert done == []  # light's next call may be on its way: the gap after its call
    now[0] += NEIGHBOUR_GAP_SECONDS
    thread.join(30)
    assert done == ["done"]
    assert fairness.pauses == 1


def test_a_tenant_with_long_calls_queues_behind_a_lighter_one_before_it_starts() -> None:
    now = [0.0]
    fairness = CpuFairness(clock=lambda: now[0])
    with fairness.call("heavy"):
        _burn_cpu(SHORT_CALL_SECONDS * 2)  # heavy's calls are long from now on
    light = _Held(fairness, "light")
    entered: list[str] = []

    def heavy_call() -> None:
        with fairness.call("heavy"):
            entered.append("heavy")

    thread, _ = _in_thread(heavy_call)
    thread.join(0.5)
    assert entered == []
    light.release()
    now[0] += NEIGHBOUR_GAP_SECONDS
    thread.join(30)
    assert entered == ["heavy"]


def test_a_heavier_tenant_is_not_yielded_to_and_alone_nothing_pauses() -> None:
    now = [0.0]
    fairness = CpuFairness(clock=lambda: now[0])
    for _ in range(40):  # busy makes many short calls: more CPU than anybody in all
        with fairness.call("busy"):
            _burn_cpu(SHORT_CALL_SECONDS * 0.75)
    for _ in range(3):
        with fairness.call("other"):  # alone on the server: never paused
            _burn_cpu(SHORT_CALL_SECONDS * 2)
            _checkpoints()
    assert fairness.pauses == 0
    busy = _Held(fairness, "busy")  # a short call of a heavier tenant: not lighter
    with fairness.call("other"):
        _checkpoints()
    busy.release()
    assert fairness.pauses == 0


def test_a_pause_is_bounded() -> None:
    now = [0.0]
    fairness = CpuFairness(clock=lambda: now[0])
    light = _Held(fairness, "light")

    def heavy_call() -> None:
        with fairness.call("heavy"):
            _burn_cpu(SHORT_CALL_SECONDS * 2)
            _checkpoints()

    thread, done = _in_thread(heavy_call)
    thread.join(0.3)
    assert done == []
    now[0] += MAX_PAUSE_SECONDS  # past its deadline: it goes on while light still runs
    thread.join(30)
    assert done == ["done"]
    light.release()


def test_a_paused_tenant_gets_one_quantum_at_a_time_whatever_its_number_of_calls() -> None:
    """Beside a neighbour that keeps calling, a paused tenant's calls share one quantum every
    QUANTUM_EVERY_SECONDS: each quantum slows the neighbour's calls beside it, so four paused
    calls must not mean four quanta at once (issue 18: the neighbour's p99)."""
    now = [0.0]
    fairness = CpuFairness(clock=lambda: now[0])
    light = _Held(fairness, "light")
    done: list[str] = []
    lock = threading.Lock()

    def heavy_call() -> None:
        with fairness.call("heavy"):
            _burn_cpu(SHORT_CALL_SECONDS * 2)
            _checkpoints()  # paused here until its quantum
        with lock:
            done.append("done")

    threads = [threading.Thread(target=heavy_call) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 10
    while fairness._paused < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fairness._paused == 3
    assert done == []
    for served in (1, 2, 3):
        now[0] += QUANTUM_EVERY_SECONDS
        deadline = time.monotonic() + 10
        while len(done) < served and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # long enough for a second call to slip through, if one could
        assert len(done) == served
    for thread in threads:
        thread.join(10)
    light.release()
