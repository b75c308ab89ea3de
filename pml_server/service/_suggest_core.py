"""Suggest ranked in the core, and each tenant's ranking table filled from the store at open.

The table (`TenantSearchIndex.ranks`, `ranking.table`) is filled here at open and updated by
`_writes.commit` with every change's pattern records, counters and deletions, so a Suggest
without `explain` is one core call (retrieval, formula, filters, grouping, top k, GIL
released) and then one read of the k suggested patterns' views. Over a shared store (replicas)
the table also follows what other replicas write (`replication`: the pattern and counters rows
changed since its last read), and the views are one round trip to the database.
"""

from __future__ import annotations

from pml_server.capture.views import pattern_view
from pml_server.domain import yielding
from pml_server.domain.model import Suggestion, SuggestQuery, SuggestResult
from pml_server.domain.records import IntentRecord
from pml_server.domain.vectors import Vector
from pml_server.ranking import RankingConfig, resolve_settings
from pml_server.search import TenantSearchIndex
from pml_server.storage.repo import Repository


def fill_rank_tables(repo: Repository, indexes: dict[str, TenantSearchIndex]) -> None:
    """Every tenant's table from the store at open (before anything writes): one streamed
    scan of its patterns and one of its counters."""
    for tenant, index in indexes.items():
        table = index.ranks
        for pattern_id, capability_id, tools, flagged, superseded in repo.pattern_rank_rows(tenant):
            table.set_pattern(pattern_id, capability_id, tools, flagged, superseded)
        for row in repo.counter_rank_rows(tenant):
            table.set_counters(*row)


def suggest_in_core(
    repo: Repository,
    tenant: str,
    index: TenantSearchIndex,
    vector: Vector,
    query: SuggestQuery,
    config: RankingConfig,
    now_ms: int,
) -> SuggestResult:
    """`rank`'s answer for a query without `explain`, ranked in the core; only the k
    suggested patterns are read from the store (their records, counters and intents). A
    pattern deleted since the core ranked it is dropped rather than shown half-read. The
    views show the stored counters, which a capture may have raised since the ranking."""
    settings = resolve_settings(query, config)
    limit = config.fetch_limit(query.k)
    ranked = index.rank(vector, query.intent, limit, query.k, settings, config, now_ms)
    if not ranked:
        return SuggestResult(())
    wanted = [(r.pattern_id, i) for r in ranked for i in r.intent_ids]
    found, views = repo.patterns_and_intent_views(tenant, [r.pattern_id for r in ranked], wanted)
    intents: dict[str, list[IntentRecord]] = {}
    for intent in views:
        if intent is not None:
            intents.setdefault(intent.pattern_id, []).append(intent)
    suggestions = []
    for suggestion, stored in zip(ranked, found, strict=True):
        yielding.checkpoint()
        if stored is None or not intents.get(suggestion.pattern_id):
            continue
        record, counters = stored
        view = pattern_view(record, counters, intents[suggestion.pattern_id])
        suggestions.append(Suggestion(suggestion.capability_id, view, suggestion.score))
    return SuggestResult(suggestions=tuple(suggestions))
