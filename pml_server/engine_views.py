"""Read views of stored patterns and capabilities (a pattern whose counters are gone, i.e.
deleted meanwhile, has no view)."""

from __future__ import annotations

from pml_server.capture.records import CapabilityRecord, PatternRecord
from pml_server.capture.views import pattern_view
from pml_server.domain.model import PatternView
from pml_server.storage.repo import Repository


def stored_pattern_view(repo: Repository, tenant: str, record: PatternRecord) -> PatternView | None:
    counters = repo.counters(tenant, record.id)
    if counters is None:
        return None
    return pattern_view(record, counters, repo.intents(tenant, record.id))


def capability_members(
    repo: Repository, tenant: str, record: CapabilityRecord
) -> list[PatternView]:
    views = []
    for pattern_id in record.pattern_ids:
        pattern = repo.pattern(tenant, pattern_id)
        view = stored_pattern_view(repo, tenant, pattern) if pattern else None
        if view is not None:
            views.append(view)
    return views


def views_by_capability(repo: Repository, tenant: str) -> dict[str, list[PatternView]]:
    """Every pattern's view of the tenant, grouped by capability (what retention evaluates)."""
    groups: dict[str, list[PatternView]] = {}
    for pattern in repo.all_patterns(tenant):
        view = stored_pattern_view(repo, tenant, pattern)
        if view is not None:
            groups.setdefault(pattern.capability_id, []).append(view)
    return groups
