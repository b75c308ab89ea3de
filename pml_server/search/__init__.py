"""Per-tenant in-memory search state: vector indexes over intent vectors (the Rust HNSW
index, walked or scanned exactly), the lexical index of each tenant's patterns, and the
intent <-> pattern maps.

Derived from the store (restored or rebuilt at open by the service), updated by every capture
and deletion. Imports no storage, model or grpc.
"""

from __future__ import annotations

from pml_server.search.registry import TenantIndexes
from pml_server.search.tenant import TenantSearchIndex, best_score, restore_index
from pml_server.search.vectors import EXACT_SCAN_MIN, index_from_bytes, new_index

__all__ = [
    "EXACT_SCAN_MIN",
    "TenantIndexes",
    "TenantSearchIndex",
    "best_score",
    "index_from_bytes",
    "new_index",
    "restore_index",
]
