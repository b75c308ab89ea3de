"""Every tenant's search state in one process, created on a tenant's first capture."""

from __future__ import annotations

import threading

from pml_server.search.tenant import TenantSearchIndex


class TenantIndexes:
    """The per-tenant `TenantSearchIndex`es of one engine (all of one kind and dimension)."""

    def __init__(self, kind: str, dim: int, companion_dim: int = 0) -> None:
        self.kind = kind
        self.dim = dim
        # the cross-lingual companion's dimension (0: none; docs/ranking.md, Other languages)
        self.companion_dim = companion_dim
        self._indexes: dict[str, TenantSearchIndex] = {}
        self._lock = threading.Lock()

    def get(self, tenant: str) -> TenantSearchIndex | None:
        """The tenant's index, or None when nothing of the tenant was ever indexed."""
        with self._lock:
            return self._indexes.get(tenant)

    def for_tenant(self, tenant: str) -> TenantSearchIndex:
        """The tenant's index, created empty on first use."""
        with self._lock:
            index = self._indexes.get(tenant)
            if index is None:
                index = TenantSearchIndex(self.kind, self.dim, companion_dim=self.companion_dim)
                self._indexes[tenant] = index
            return index

    def all(self) -> dict[str, TenantSearchIndex]:
        """A copy of the tenant -> index map (safe to iterate while captures add tenants)."""
        with self._lock:
            return dict(self._indexes)

    def tenants(self) -> list[str]:
        with self._lock:
            return list(self._indexes)

    def replace(self, tenant: str, index: TenantSearchIndex) -> None:
        """Install a tenant's rebuilt index: calls holding the old one finish on it."""
        with self._lock:
            self._indexes[tenant] = index

    def replace_all(self, indexes: dict[str, TenantSearchIndex]) -> None:
        """Install the indexes restored at open."""
        with self._lock:
            self._indexes = dict(indexes)
