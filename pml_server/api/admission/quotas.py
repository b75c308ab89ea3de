"""Per-tenant quotas, so one tenant flooding the server cannot starve its neighbours.

Two limits, both answered RESOURCE_EXHAUSTED (never queued for an RPC thread) with a retry delay:
- concurrency: calls of one tenant in progress at the same time (a stream counts for its whole
  life). It keeps a share of the RPC threads free for everybody else. A tenant that reaches it
  while another tenant is active is also held to the retry delay it is told: all its calls are
  refused until the delay is over. Otherwise a flood keeps its slots busy back to back and, the
  server being one process with one GIL, takes most of the CPU from a neighbour that calls one
  call at a time (measured: neighbour p50 x24 without the wait; `tests/reliability`).
- rate (optional): a token bucket of calls per second with a burst.
- cost: the CPU time a tenant's calls take (each call's thread time, measured around it). A
  tenant's CPU debt drains at `CPU_SHARE` seconds per second; while it is over
  `CPU_BURST_SECONDS` and a neighbour is active, its concurrent calls are refused (a call while
  another of its calls is in progress). A tenant calling one call at a time holds one thread at
  most and is refused only past `SERIAL_DEBT_SECONDS`: a busy neighbour calling cheap calls back
  to back is never refused for them. Charging only expensive calls does not work: in a test run,
  four threads of calls under 20 ms of CPU each took a neighbour's p50 20x through the GIL.
  Counting calls alone cannot isolate a tenant whose every call costs seconds (a few Suggests
  over giant patterns took a neighbour's p50 44x).

`hold` is the authoritative check, under a lock. `refusal` is a lock-free peek for the
interceptor's early refusal (see `admission`): a tenant already over quota is turned away before
its request is even read, without taking the lock its own calls in progress release.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pml_server.domain.errors import ResourceExhaustedError

# A tenant at its concurrency limit gets a slot back when one of its calls ends (milliseconds for
# most calls): a short wait, long enough that a client obeying it stops hammering.
CONCURRENCY_RETRY_SECONDS = 0.1
# Another tenant whose call ended this recently (or is in progress) is "active": a tenant that
# reaches its concurrency limit while another is active must then wait out the retry delay.
ACTIVE_SECONDS = 1.0
# CPU seconds per second a tenant may use while a neighbour is active (the server is one process
# with one GIL: about one core in all), and the debt it may run up before it must wait.
CPU_SHARE = 0.5
CPU_BURST_SECONDS = 0.25
COST_RETRY_SECONDS = 0.5
SERIAL_DEBT_SECONDS = 2.0


@dataclass
class _Bucket:
    tokens: float
    updated: float


class TenantQuotas:
    def __init__(
        self,
        max_in_flight: int,
        rate_per_second: float | None = None,
        burst: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if rate_per_second is not None and rate_per_second <= 0:
            raise ValueError("rate_per_second must be > 0")
        self._max_in_flight = max_in_flight
        self._rate = rate_per_second
        self._burst = float(burst if burst is not None else max(1, int(rate_per_second or 1)))
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._cpu_debt: dict[str, _Bucket] = {}  # CPU seconds owed, as of `updated`
        # Tenants that hit their concurrency limit while a neighbour was active: refused until
        # then, whatever their calls in progress (they were told to wait that long).
        self._waiting_until: dict[str, float] = {}
        # The two tenants whose calls ended last, with when: enough to tell whether anybody
        # other than a given tenant was active lately, in O(1) and without the lock.
        self._recent: tuple[tuple[str, float], tuple[str, float]] = (("", -1e9), ("", -1e9))
        # The two refusals, built once: the early path hands them out without allocating.
        self.too_many_in_flight = ResourceExhaustedError(
            f"too many calls in progress for this tenant (limit {max_in_flight}); "
            "retry after the delay in RetryInfo",
            retry_after_seconds=CONCURRENCY_RETRY_SECONDS,
        )
        self.over_rate = ResourceExhaustedError(
            f"call rate over this tenant's quota ({rate_per_second or 0:g}/s); "
            "retry after the delay in RetryInfo",
            retry_after_seconds=1.0 / rate_per_second if rate_per_second else None,
        )
        self.over_cost = ResourceExhaustedError(
            "this tenant's calls used more than its share of the server's CPU time; "
            "retry after the delay in RetryInfo",
            retry_after_seconds=COST_RETRY_SECONDS,
        )

    def _refill(self, tenant: str, now: float) -> _Bucket:
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(self._burst, now)
        assert self._rate is not None
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.updated) * self._rate)
        bucket.updated = now
        return bucket

    def _neighbour_active(self, tenant: str, now: float) -> bool:
        if len(self._in_flight) > (1 if tenant in self._in_flight else 0):
            return True
        (last, last_at), (_, other_at) = self._recent
        return now - (other_at if last == tenant else last_at) < ACTIVE_SECONDS

    def _over_concurrency(self, tenant: str, now: float) -> bool:
        """At its limit, or inside the wait it was told to make. Reaching the limit while a
        neighbour is active starts that wait (alone on the server, a tenant keeps every slot:
        nobody else needs the time)."""
        if self._waiting_until.get(tenant, 0.0) > now:
            return True
        if self._in_flight.get(tenant, 0) < self._max_in_flight:
            return False
        if self._neighbour_active(tenant, now):
            self._waiting_until[tenant] = now + CONCURRENCY_RETRY_SECONDS
        return True

    def _debt(self, tenant: str, now: float) -> float:
        debt = self._cpu_debt.get(tenant)
        return 0.0 if debt is None else max(0.0, debt.tokens - (now - debt.updated) * CPU_SHARE)

    def _over_cost(self, tenant: str, now: float) -> bool:
        debt = self._debt(tenant, now)
        if debt <= CPU_BURST_SECONDS or not self._neighbour_active(tenant, now):
            return False
        return self._in_flight.get(tenant, 0) > 0 or debt > SERIAL_DEBT_SECONDS

    def _charge(self, tenant: str, cpu_seconds: float, now: float) -> None:
        self._cpu_debt[tenant] = _Bucket(self._debt(tenant, now) + cpu_seconds, now)
        if len(self._cpu_debt) > 4 * len(self._in_flight) + 64:  # forget the paid-up tenants
            for name in [t for t in self._cpu_debt if self._debt(t, now) == 0.0]:
                del self._cpu_debt[name]

    def refusal(self, tenant: str) -> ResourceExhaustedError | None:
        """Lock-free: the refusal `tenant` would get now, or None if a call may be tried. Reads
        and writes of one dict entry are atomic under the GIL; a stale answer only moves a call
        between this early refusal and `hold`, which decides exactly."""
        if self._over_concurrency(tenant, self._clock()):
            return self.too_many_in_flight
        if self._over_cost(tenant, self._clock()):
            return self.over_cost
        if self._rate is not None:
            bucket = self._buckets.get(tenant)
            if bucket is not None:
                elapsed = self._clock() - bucket.updated
                if bucket.tokens + elapsed * self._rate < 1.0:
                    return self.over_rate
        return None

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        """One call of `tenant`; raises ResourceExhaustedError when over a quota."""
        with self._lock:
            busy = self._in_flight.get(tenant, 0)
            if self._over_concurrency(tenant, self._clock()):
                raise ResourceExhaustedError(
                    str(self.too_many_in_flight), CONCURRENCY_RETRY_SECONDS
                )
            if self._over_cost(tenant, self._clock()):
                raise ResourceExhaustedError(str(self.over_cost), COST_RETRY_SECONDS)
            if self._rate is not None:
                bucket = self._refill(tenant, self._clock())
                if bucket.tokens < 1.0:
                    raise ResourceExhaustedError(
                        str(self.over_rate), self.over_rate.retry_after_seconds
                    )
                bucket.tokens -= 1.0
            self._in_flight[tenant] = busy + 1
        started_cpu = time.thread_time()
        try:
            yield
        finally:
            cpu = time.thread_time() - started_cpu
            with self._lock:
                last = self._recent[0]
                now = self._clock()
                self._charge(tenant, cpu, now)
                self._recent = ((tenant, now), self._recent[1] if last[0] == tenant else last)
                left = self._in_flight[tenant] - 1
                if left:
                    self._in_flight[tenant] = left
                else:
                    del self._in_flight[tenant]
