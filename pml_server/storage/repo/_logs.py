"""The three logs: failures (per tenant, newest first when read), the op log (what followers
and index restores replay) and the audit log (retention actions and deletions)."""

from __future__ import annotations

from typing import Any

from pml_server.domain import json_form
from pml_server.storage.keys import (
    CF_AUDIT,
    CF_FAILURES,
    CF_OPLOG,
    from_u64,
    tenant_key,
    tenant_prefix,
    u64,
)
from pml_server.storage.seam import KeyValueReads, Op


class LogRows:
    def __init__(self, store: KeyValueReads) -> None:
        self.store = store

    def put_failure(self, tenant: str, seq: int, entry: dict[str, Any]) -> Op:
        return (CF_FAILURES, tenant_key(tenant, u64(seq)), json_form.dumps(entry))

    def oldest_failure_keys(self, tenant: str, count: int) -> list[bytes]:
        return [k for k, _ in self.store.scan(CF_FAILURES, tenant_prefix(tenant), limit=count)]

    def delete_failure(self, key: bytes) -> Op:
        return (CF_FAILURES, key, None)

    def failures_page(
        self, tenant: str, before: int | None, size: int
    ) -> tuple[list[tuple[int, dict[str, Any]]], int | None]:
        """Newest first; `before` is the exclusive sequence bound returned by the previous page."""
        prefix = tenant_prefix(tenant)
        start = tenant_key(tenant, u64(before)) if before is not None else None
        rows = self.store.scan(CF_FAILURES, prefix, start=start, limit=size + 1, reverse=True)
        page = [(from_u64(k[len(prefix) :]), json_form.loads(v)) for k, v in rows[:size]]
        return page, (page[-1][0] if len(rows) > size else None)

    def put_oplog(self, seq: int, op: dict[str, Any]) -> Op:
        return (CF_OPLOG, u64(seq), json_form.dumps(op))

    def oplog_after(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        rows = self.store.scan(CF_OPLOG, b"", start=u64(seq + 1))
        return [(from_u64(k), json_form.loads(v)) for k, v in rows]

    def delete_oplog_through(self, seq: int) -> list[Op]:
        rows = self.store.scan(CF_OPLOG, b"")
        return [(CF_OPLOG, k, None) for k, _ in rows if from_u64(k) <= seq]

    def put_audit(self, tenant: str, seq: int, entry: dict[str, Any]) -> Op:
        return (CF_AUDIT, tenant_key(tenant, u64(seq)), json_form.dumps(entry))

    def audit_log(self, tenant: str) -> list[dict[str, Any]]:
        return [json_form.loads(v) for _, v in self.store.scan(CF_AUDIT, tenant_prefix(tenant))]
