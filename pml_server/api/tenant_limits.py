"""Per-tenant admission: at most `limit` calls of one tenant inside the server at once. More are
refused at once with RESOURCE_EXHAUSTED, so a tenant flooding the server cannot take every RPC
thread and its neighbours keep being served. Only used with a keys file (multi-tenant)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from pml_server.domain.errors import ResourceExhaustedError


class TenantLimiter:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the per-tenant call limit must be >= 1")
        self._limit = limit
        self._active: dict[str, int] = {}
        self._lock = threading.Lock()

    def enter(self, tenant: str) -> Callable[[], None]:
        """Admit one call of `tenant` or raise ResourceExhaustedError; returns the release
        function to run exactly once when the call ends."""
        with self._lock:
            active = self._active.get(tenant, 0)
            if active >= self._limit:
                raise ResourceExhaustedError(
                    f"this tenant already has {active} calls in progress (the limit is "
                    f"{self._limit}); retry with backoff"
                )
            self._active[tenant] = active + 1
        released = threading.Event()

        def release() -> None:
            if released.is_set():
                return
            released.set()
            with self._lock:
                left = self._active[tenant] - 1
                if left:
                    self._active[tenant] = left
                else:
                    del self._active[tenant]

        return release

    def active(self, tenant: str) -> int:
        with self._lock:
            return self._active.get(tenant, 0)
