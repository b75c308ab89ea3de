"""Restoring the in-memory search indexes at open: each tenant's vector snapshot with the op
log's removals replayed, its intents re-added, or a rebuild from the store when the snapshot
is stale or foreign."""

from __future__ import annotations

from typing import Any

from pml_server import _core
from pml_server.capture.records import IntentRecord
from pml_server.embedding.search_index import TenantSearchIndex
from pml_server.storage.repo import Repository


def restore_indexes(repo: Repository, kind: str, dim: int) -> dict[str, TenantSearchIndex]:
    by_tenant: dict[str, list[IntentRecord]] = {}
    for tenant, intent in repo.all_intents():
        by_tenant.setdefault(tenant, []).append(intent)
    oplog = repo.oplog_after(0)
    indexes: dict[str, TenantSearchIndex] = {}
    for tenant, intents in by_tenant.items():
        # one scan of the tenant's patterns: a read per pattern cost most of a 100k start
        tools_of = {p.id: p.tools_used for p in repo.all_patterns(tenant)}
        index = _restored_or_new(repo, tenant, kind, dim, oplog)
        for intent in intents:
            index.add(intent, tools_of.get(intent.pattern_id, ()))
        complete = index.vector_count() == len(intents) and all(
            index.ann.contains(i.id) for i in intents
        )
        if not complete:  # stale or foreign snapshot: rebuild from the store
            index = TenantSearchIndex(kind, dim)
            for intent in intents:
                index.add(intent, tools_of.get(intent.pattern_id, ()))
        indexes[tenant] = index
    return indexes


def _restored_or_new(
    repo: Repository, tenant: str, kind: str, dim: int, oplog: list[tuple[int, dict[str, Any]]]
) -> TenantSearchIndex:
    snapshot = repo.snapshot(tenant)
    if snapshot is None:
        return TenantSearchIndex(kind, dim)
    _, data = snapshot
    try:
        index = TenantSearchIndex.restore(kind, dim, data)
    except (_core.CoreError, ValueError, OSError):
        return TenantSearchIndex(kind, dim)
    # Every removal still in the log, not only those after the snapshot's sequence: a
    # snapshot taken while captures run may miss a removal allocated just before it, and
    # intent ids are never reused, so replaying an older removal is harmless.
    removed = [
        intent_id
        for _, op in oplog
        if op["tenant"] == tenant and op["op"] == "remove"
        for intent_id in op["ids"]
    ]
    index.remove_vectors(removed)
    return index  # additions since the snapshot are re-added from the intents column
