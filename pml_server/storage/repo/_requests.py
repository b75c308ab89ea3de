"""Idempotency: the answer stored under each request id (service/_idempotency.py)."""

from __future__ import annotations

from collections.abc import Sequence

from pml_server.storage.keys import CF_REQUESTS, tenant_key, tenant_prefix
from pml_server.storage.seam import KeyValueReads, Op


class RequestRows:
    def __init__(self, store: KeyValueReads) -> None:
        self.store = store

    def request_result(self, tenant: str, request_id: str) -> bytes | None:
        return self.store.get(CF_REQUESTS, tenant_key(tenant, request_id))

    def request_results(self, tenant: str, request_ids: Sequence[str]) -> list[bytes | None]:
        """`request_result` of each id, in order, in one multi-get."""
        return self.store.get_many(CF_REQUESTS, [tenant_key(tenant, r) for r in request_ids])

    def put_request_result(self, tenant: str, request_id: str, result: bytes) -> Op:
        return (CF_REQUESTS, tenant_key(tenant, request_id), result)

    def request_rows(
        self, tenant: str, start: bytes | None = None, limit: int | None = None
    ) -> list[tuple[bytes, bytes]]:
        """The tenant's (key, answer) rows in key order, from key `start` on, at most `limit`."""
        return self.store.scan(CF_REQUESTS, tenant_prefix(tenant), start=start, limit=limit)

    def delete_request(self, key: bytes) -> Op:
        return (CF_REQUESTS, key, None)
