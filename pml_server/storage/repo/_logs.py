"""The three logs: failures (per tenant, newest first when read), the op log (what followers
and index restores replay) and the audit log (retention actions and deletions)."""

from __future__ import annotations

from collections.abc import Iterator
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

# What an erased failure log entry holds: nothing of the run.
_ERASED = json_form.dumps({"erased": True})
# Failure log entries read at a time when looking for a pattern's.
_SCAN_PAGE = 256


def names_pattern(entry: dict[str, Any], pattern_id: str, code_hash: str) -> bool:
    """Whether a failure log entry is one of pattern `pattern_id`'s failed runs or a rejected
    first try (no pattern) of the code hashing to `code_hash`."""
    named = entry.get("pattern_id")
    return named == pattern_id if named else entry.get("code_hash") == code_hash


class LogRows:
    def __init__(self, store: KeyValueReads) -> None:
        self.store = store

    def put_failure(self, tenant: str, seq: int, entry: dict[str, Any]) -> Op:
        return (CF_FAILURES, tenant_key(tenant, u64(seq)), json_form.dumps(entry))

    def oldest_failure_keys(self, tenant: str, count: int) -> list[bytes]:
        return [k for k, _ in self.store.scan(CF_FAILURES, tenant_prefix(tenant), limit=count)]

    def delete_failure(self, key: bytes) -> Op:
        return (CF_FAILURES, key, None)

    def failures_of(self, tenant: str, pattern_id: str, code_hash: str) -> list[bytes]:
        """The keys of the entries of a pattern's failed runs and of its code's rejected first
        tries (`entries_of`)."""
        return [key for key, _ in self.entries_of(tenant, pattern_id, code_hash)]

    def entries_of(
        self, tenant: str, pattern_id: str, code_hash: str
    ) -> list[tuple[bytes, dict[str, Any]]]:
        """The (key, entry) of a pattern's failed runs and of its code's rejected first tries.
        Reads the tenant's whole log (its size bounds it), `_SCAN_PAGE` entries at a time: an
        entry holds up to 20 KiB."""
        return [
            (key, entry)
            for key, entry in self._entries(tenant)
            if names_pattern(entry, pattern_id, code_hash)
        ]

    def keys_by_owner(self, tenant: str) -> tuple[dict[str, list[bytes]], dict[str, list[bytes]]]:
        """One read of the tenant's whole log (as `entries_of` reads it): the keys of its
        entries by the pattern id of a failed run, and by the code hash of a rejected first
        try (no pattern). What a pass moving many patterns' entries reads once per tenant
        (service/_older_builds.py), its size bounded by the log's."""
        by_pattern: dict[str, list[bytes]] = {}
        by_hash: dict[str, list[bytes]] = {}
        for key, entry in self._entries(tenant):
            pattern_id = entry.get("pattern_id")
            if pattern_id:
                by_pattern.setdefault(str(pattern_id), []).append(key)
            else:
                by_hash.setdefault(str(entry.get("code_hash", "")), []).append(key)
        return by_pattern, by_hash

    def entries_at(self, keys: list[bytes]) -> list[tuple[bytes, dict[str, Any]]]:
        """The (key, entry) still at `keys`, in one multi-get: an entry trimmed or erased
        meanwhile is none."""
        rows = self.store.get_many(CF_FAILURES, keys)
        return [
            (key, json_form.loads(raw))
            for key, raw in zip(keys, rows, strict=True)
            if raw is not None and raw != _ERASED
        ]

    def _entries(self, tenant: str) -> Iterator[tuple[bytes, dict[str, Any]]]:
        """Every (key, entry) of the tenant's log not erased, `_SCAN_PAGE` at a time."""
        start: bytes | None = None
        while True:
            rows = self.store.scan(
                CF_FAILURES, tenant_prefix(tenant), start=start, limit=_SCAN_PAGE
            )
            for key, raw in rows:
                if raw != _ERASED:
                    yield key, json_form.loads(raw)
            if len(rows) < _SCAN_PAGE:
                return
            start = rows[-1][0] + b"\x00"

    def rejected_request_ids(self, tenant: str, code_hash: str) -> set[str]:
        """The request ids of the entries of a code's rejected first tries (no pattern), read
        as `failures_of` reads the log."""
        found: set[str] = set()
        start: bytes | None = None
        while True:
            rows = self.store.scan(
                CF_FAILURES, tenant_prefix(tenant), start=start, limit=_SCAN_PAGE
            )
            for _, raw in rows:
                if raw == _ERASED:
                    continue
                entry = json_form.loads(raw)
                if not entry.get("pattern_id") and entry.get("code_hash") == code_hash:
                    found.add(str(entry.get("request_id", "")))
            if len(rows) < _SCAN_PAGE:
                return found
            start = rows[-1][0] + b"\x00"

    def rewrite_failure(self, key: bytes, entry: dict[str, Any]) -> Op:
        """The entry rewritten in place (a merge naming its survivor); the caller holds the
        tenant lock that trims the log, so a trimmed entry is not put back."""
        return (CF_FAILURES, key, json_form.dumps(entry))

    def erase_failure(self, key: bytes) -> Op:
        """The entry overwritten in place with `_ERASED`: its run's intent and error go, while
        the log keeps its length, which its bound counts from a running total."""
        return (CF_FAILURES, key, _ERASED)

    def failures_page(
        self, tenant: str, before: int | None, size: int
    ) -> tuple[list[tuple[int, dict[str, Any]]], int | None]:
        """Newest first, erased entries skipped; `before` is the exclusive sequence bound
        returned by the previous page."""
        prefix = tenant_prefix(tenant)
        start = tenant_key(tenant, u64(before)) if before is not None else None
        page: list[tuple[int, dict[str, Any]]] = []
        while True:
            rows = self.store.scan(CF_FAILURES, prefix, start=start, limit=size + 1, reverse=True)
            for key, raw in rows:
                if raw == _ERASED:
                    continue
                if len(page) == size:
                    return page, page[-1][0]
                page.append((from_u64(key[len(prefix) :]), json_form.loads(raw)))
            if len(rows) <= size:
                return page, None
            start = rows[-1][0]  # exclusive: the reverse scan's start is after this key

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
