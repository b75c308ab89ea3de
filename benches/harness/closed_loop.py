"""The closed loop of the load clients (`service_load`, `service_chroma`, `service_lancedb`):
`concurrency` callers, each sending its next request when its last is answered, take request
numbers until they run out or the time is up; the summary every load client prints (count,
errors, elapsed seconds, qps and latency percentiles in ms)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial

import numpy as np


def run_timed(targets: Sequence[Callable[[], object]]) -> float:
    """Each of `targets` on a thread of its own, all started at once; the seconds until all
    have ended."""
    threads = [threading.Thread(target=target) for target in targets]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


class Load:
    """Request numbers handed out to `concurrency` callers from `numbers` until they run out or
    `seconds` have passed since it was made; caller `n` keeps its answers' latencies (seconds)
    in `latencies[n]` and its failures in `errors[n]`."""

    def __init__(self, concurrency: int, seconds: float, numbers: Iterable[int]) -> None:
        self.latencies: list[list[float]] = [[] for _ in range(concurrency)]
        self.errors = [0] * concurrency
        self._cursor = iter(numbers)
        self._lock = threading.Lock()
        self._deadline = time.perf_counter() + seconds

    def take(self) -> int | None:
        """The next request number, or None once the time is up or none are left."""
        if time.perf_counter() >= self._deadline:
            return None
        with self._lock:
            return next(self._cursor, None)

    def timed(
        self,
        n: int,
        call: Callable[[], object],
        failure: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    ) -> None:
        """`call()` for caller `n`: its latency kept, or a `failure` it raises counted."""
        start = time.perf_counter()
        try:
            call()
        except failure:
            self.errors[n] += 1
            return
        self.latencies[n].append(time.perf_counter() - start)

    def run(self, caller: Callable[[int], None]) -> dict[str, float]:
        """`caller(n)` on a thread of its own for each caller, all at once; the summary of what
        they kept once all have ended."""
        elapsed = run_timed([partial(caller, n) for n in range(len(self.latencies))])
        flat = np.array([x for per in self.latencies for x in per]) * 1000.0
        count = len(flat)
        return {
            "count": count,
            "errors": sum(self.errors),
            "elapsed": elapsed,
            "qps": count / elapsed if elapsed > 0 else 0.0,
            "p50_ms": float(np.percentile(flat, 50)) if count else float("nan"),
            "p99_ms": float(np.percentile(flat, 99)) if count else float("nan"),
        }
