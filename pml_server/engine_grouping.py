"""Looking for the capability a new pattern joins, among those of its tool signature."""

from __future__ import annotations

from pml_server.embedding.base import Vector
from pml_server.embedding.search_index import TenantSearchIndex
from pml_server.storage.repo import Repository


def capability_vectors(
    repo: Repository, tenant: str, capability_ids: list[str]
) -> list[tuple[str, list[Vector]]]:
    """Every intent vector of each capability, for the exact comparison (few capabilities)."""
    candidates = []
    for capability_id in capability_ids:
        capability = repo.capability(tenant, capability_id)
        if capability is not None:
            vectors = [
                i.vector for pid in capability.pattern_ids for i in repo.intents(tenant, pid)
            ]
            candidates.append((capability_id, vectors))
    return candidates


def nearest_allowed_capability(
    repo: Repository,
    tenant: str,
    index: TenantSearchIndex,
    vector: Vector,
    allowed: set[str],
    threshold: float,
    nearest: int,
) -> str | None:
    """The capability, among `allowed`, of the nearest intent at least `threshold` close, asking
    the vector index for the `nearest` intents (many capabilities: never reads them all)."""
    for intent_id, score in index.semantic(vector, nearest):
        if score < threshold:
            break  # best first: nothing further can qualify
        pattern_id = index.pattern_of(intent_id)
        pattern = repo.pattern(tenant, pattern_id) if pattern_id else None
        if pattern is not None and pattern.capability_id in allowed:
            return pattern.capability_id
    return None
