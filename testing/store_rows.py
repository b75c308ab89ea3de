"""Every row of a kind a tenant stores, read whole for tests and benches that compare what a
store holds: nothing in the server reads a tenant's records at once (a read is bounded or a
stream: docs/storage.md, The key-value layout), so these are not in its repository."""

from __future__ import annotations

from pml_server.domain.records import PatternRecord
from pml_server.storage.keys import CF_PATTERNS, tenant_prefix
from pml_server.storage.repo import Repository


def all_patterns(repo: Repository, tenant: str) -> list[PatternRecord]:
    """Every pattern record of `tenant`, in id order, built in memory at once."""
    rows = repo.patterns.store.scan(CF_PATTERNS, tenant_prefix(tenant))
    return [PatternRecord.from_json(v) for _, v in rows]
