"""Per-tenant quotas, so one tenant flooding the server cannot starve its neighbours.

Two limits, both answered RESOURCE_EXHAUSTED at once (never queued, so a flood costs the server
almost nothing):
- concurrency: calls of one tenant in progress at the same time (a stream counts for its whole
  life). It keeps a share of the RPC threads free for everybody else.
- rate (optional): a token bucket of calls per second with a burst.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pml_server.domain.errors import ResourceExhaustedError


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
        self._max_in_flight = max_in_flight
        self._rate = rate_per_second
        self._burst = float(burst if burst is not None else max(1, int(rate_per_second or 1)))
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight: dict[str, int] = {}
        self._buckets: dict[str, _Bucket] = {}

    def _take_token(self, tenant: str, now: float) -> bool:
        if self._rate is None:
            return True
        bucket = self._buckets.get(tenant)
        if bucket is None:
            bucket = self._buckets[tenant] = _Bucket(self._burst, now)
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.updated) * self._rate)
        bucket.updated = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        """One call of `tenant`; raises ResourceExhaustedError when over a quota."""
        with self._lock:
            busy = self._in_flight.get(tenant, 0)
            if busy >= self._max_in_flight:
                raise ResourceExhaustedError(
                    f"too many calls in progress for this tenant (limit {self._max_in_flight}); "
                    "retry with backoff"
                )
            if not self._take_token(tenant, self._clock()):
                raise ResourceExhaustedError(
                    f"call rate over this tenant's quota ({self._rate:g}/s); retry with backoff"
                )
            self._in_flight[tenant] = busy + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._in_flight[tenant] - 1
                if left:
                    self._in_flight[tenant] = left
                else:
                    del self._in_flight[tenant]
