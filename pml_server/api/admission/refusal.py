"""Early refusal: a call of a tenant already over its quota is turned away before anything is
spent on it.

grpcio's synchronous server runs the interceptors in its single poll thread, before the request
message is read and before any RPC thread is taken. There the tenant is resolved from the API key
(a cached dict lookup) and its quota peeked at without a lock (`TenantQuotas.refusal`). A call
over quota gets a handler that only aborts with a status built once (RESOURCE_EXHAUSTED,
`google.rpc.RetryInfo`, `grpc-retry-pushback-ms`). That handler runs on a small pool of its own:
grpcio hands a behavior carrying an `experimental_thread_pool` to that pool instead of the
server's (grpc/_server.py `_select_thread_pool_for_behavior`, grpcio 1.85), so a flood of
refusals never queues in front of the neighbours' calls on the RPC threads. Calls that pass the
peek are checked exactly by `TenantQuotas.hold` in the servicer.

Each refusal is answered after a short hold. A client that ignores the retry delay and calls
again at once (a flood) then gets at most REFUSAL_THREADS / REFUSAL_HOLD_SECONDS answers a
second: even a cheap refusal costs the server a few hundred microseconds of CPU in grpcio, so an
instant refusal would only let the flood spend the server's time on refusals instead. A client
that obeys the delay loses nothing (it waits longer than the hold anyway). The hold is skipped
when many refusals are already waiting, so held calls never approach the server-wide
`maximum_concurrent_rpcs` limit that would refuse everybody.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import grpc

from pml_server.api import errors
from pml_server.api.admission.quotas import TenantQuotas
from pml_server.api.security.auth import KeyStore
from pml_server.domain.errors import UnauthenticatedError

REFUSAL_THREADS = 2
REFUSAL_HOLD_SECONDS = 0.05  # at most 40 refusals a second, half the 0.1 s retry delay
HOLD_MAX_WAITING = 64  # more refusals waiting than this: answer at once (see the module doc)


class RefusalPool(ThreadPoolExecutor):
    """A thread pool that knows how many submitted calls wait for a thread."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._count_lock = threading.Lock()
        self.waiting = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._count_lock:
            self.waiting += 1

        def started() -> Any:
            with self._count_lock:
                self.waiting -= 1
            return fn(*args, **kwargs)

        return super().submit(started)


class Refuse:
    """A handler behavior that only aborts with a fixed status, on the refusal pool."""

    def __init__(self, pool: RefusalPool, status: grpc.Status, count: Callable[[], None]) -> None:
        self.experimental_thread_pool = pool  # read by grpcio, see the module doc
        self._pool = pool
        self._status = status
        self._count = count  # the refusal's metrics

    def __call__(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count()
        if self._pool.waiting < HOLD_MAX_WAITING:
            time.sleep(REFUSAL_HOLD_SECONDS)
        context.abort_with_status(self._status)


class EarlyRefusal:
    """The interceptor's peek (`status_for`) and the pool its refusals run on."""

    def __init__(self, keys: KeyStore, quotas: TenantQuotas) -> None:
        self._keys = keys
        self._quotas = quotas
        self.pool = RefusalPool(REFUSAL_THREADS, thread_name_prefix="pml-refuse")
        self._statuses = {
            refusal: errors.grpc_status(refusal)
            for refusal in (quotas.too_many_in_flight, quotas.over_rate, quotas.over_cost)
        }
        self._unauthenticated = errors.grpc_status(
            UnauthenticatedError("missing or unknown API key: send `authorization: Bearer <key>`")
        )

    def status_for(self, metadata: Sequence[tuple[str, str | bytes]]) -> grpc.Status | None:
        """The refusal for a call with `metadata`, or None to let it through."""
        tenant = self._keys.tenant_of(metadata)
        if tenant is None:
            # Held and paced like a quota refusal: answered at once, guessing keys or calling
            # without one cost the server about 1 ms of CPU each, at any rate the client likes.
            return self._unauthenticated
        refusal = self._quotas.refusal(tenant)
        return None if refusal is None else self._statuses[refusal]

    def close(self) -> None:
        self.pool.shutdown(wait=True)
