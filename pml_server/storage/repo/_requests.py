"""Idempotency: the answer stored under each request id (service/_idempotency.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from pml_server.domain import json_form
from pml_server.storage.keys import (
    CF_REQUEST_REWRITE,
    CF_REQUESTS,
    rewrite_value,
    split_tenant,
    tenant_key,
    tenant_prefix,
)
from pml_server.storage.seam import KeyValueReads, Op

# Answers read at a time when looking for a deleted pattern's.
_SCAN_PAGE = 1000


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

    def rewrite_request(self, key: bytes, read: bytes, result: bytes) -> Op:
        """The stored answer `read` at `key` rewritten in place as `result` (a user's deletion
        erasing what it held, a merge naming its survivor), written by the batch only if the
        row still holds `read` (`CF_REQUEST_REWRITE`): a rewrite racing the answer's expiry
        (`prune_request_ids`, which takes no pattern lock) never puts it back."""
        return (CF_REQUEST_REWRITE, key, rewrite_value(read, result))

    def answers_of(
        self, tenant: str, pattern_id: str, request_ids: Callable[[], set[str]]
    ) -> Iterator[tuple[bytes, bytes]]:
        """The (key, answer) rows of the tenant that name `pattern_id`, or whose request id is
        in `request_ids()` (read once, if any answer names no pattern). Reads every answer of
        the tenant, `_SCAN_PAGE` at a time; only those holding the pattern id's bytes (in
        their compact JSON) or naming no pattern are decoded."""
        named = json_form.dumps({"pattern_id": pattern_id})[1:-1]
        unnamed = json_form.dumps({"pattern_id": ""})[1:-1]
        wanted: set[str] | None = None
        start: bytes | None = None
        while True:
            rows = self.request_rows(tenant, start=start, limit=_SCAN_PAGE)
            for key, raw in rows:
                if named in raw and json_form.loads(raw).get("pattern_id") == pattern_id:
                    yield key, raw
                elif unnamed in raw:
                    if wanted is None:
                        wanted = request_ids()
                    if split_tenant(key)[1].decode() in wanted:
                        yield key, raw
            if len(rows) < _SCAN_PAGE:
                return
            start = rows[-1][0] + b"\x00"
