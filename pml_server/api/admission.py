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
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from pml_server.api import errors
from pml_server.api.auth import KeyStore
from pml_server.api.quotas import TenantQuotas

# Refusing takes microseconds; two threads keep up with any flood the poll thread can feed.
REFUSAL_THREADS = 2


class Refuse:
    """A handler behavior that only aborts with a fixed status, on the refusal pool."""

    def __init__(self, pool: ThreadPoolExecutor, status: grpc.Status, count: Any) -> None:
        self.experimental_thread_pool = pool  # read by grpcio, see the module doc
        self._status = status
        self._count = count  # zero-argument callable: the refusal's metrics

    def __call__(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._count()
        context.abort_with_status(self._status)


class EarlyRefusal:
    def __init__(self, keys: KeyStore, quotas: TenantQuotas) -> None:
        self._keys = keys
        self._quotas = quotas
        self.pool = ThreadPoolExecutor(max_workers=REFUSAL_THREADS, thread_name_prefix="pml-refuse")
        self._statuses = {
            refusal: errors.grpc_status(refusal)
            for refusal in (quotas.too_many_in_flight, quotas.over_rate)
        }

    def status_for(self, metadata: Sequence[tuple[str, str | bytes]]) -> grpc.Status | None:
        """The refusal for a call with `metadata`, or None to let it through."""
        tenant = self._keys.tenant_of(metadata)
        if tenant is None:
            return None
        refusal = self._quotas.refusal(tenant)
        return None if refusal is None else self._statuses[refusal]

    def close(self) -> None:
        self.pool.shutdown(wait=True)
