"""Suggest ranked in the core, and each tenant's ranking table filled from the store at open.

The table (`TenantSearchIndex.ranks`, `ranking.table`) is filled here at open and updated by
`_writes.commit` with every change's pattern records, counters and deletions, so a Suggest
is one core call (retrieval, formula, filters, grouping, top k and with `explain` every other
candidate with its rule, GIL released) and then the k suggested patterns' views: from the
cache of the views answers showed lately (`_views`), or read from the store. Over a shared
store (replicas) the table also follows what other replicas write (`replication`: the pattern
and counters rows changed since its last read), and the views are one round trip to the
database.
"""

from __future__ import annotations

from collections.abc import Mapping

from pml_server.capture.views import pattern_view
from pml_server.domain import yielding
from pml_server.domain.model import (
    FilteredCandidate,
    PatternView,
    Suggestion,
    SuggestQuery,
    SuggestResult,
)
from pml_server.domain.vectors import Vector
from pml_server.ranking import (
    CoreSuggestion,
    RankingConfig,
    RankRequest,
    RequestParts,
    resolve_settings,
)
from pml_server.search import TenantSearchIndex
from pml_server.search.companion import CompanionView, MixedView
from pml_server.service._views import ViewCache
from pml_server.storage.codec import stored_view
from pml_server.storage.repo import Repository


def fill_rank_tables(repo: Repository, indexes: dict[str, TenantSearchIndex]) -> None:
    """Every tenant's table from the store at open (before anything writes): one streamed
    scan of its patterns and one of its counters."""
    for tenant, index in indexes.items():
        table = index.ranks
        for pattern_id, capability_id, tools, flagged, superseded in repo.views.pattern_rank_rows(
            tenant
        ):
            table.set_pattern(pattern_id, capability_id, tools, flagged, superseded)
        for row in repo.views.counter_rank_rows(tenant):
            table.set_counters(*row)


def suggest_in_core(
    repo: Repository,
    views: ViewCache | None,
    tenant: str,
    index: TenantSearchIndex | CompanionView | MixedView,
    vector: Vector,
    query: SuggestQuery,
    config: RankingConfig,
    now_ms: int,
    transitions: Mapping[str, float] | None = None,
    text: str | None = None,
    parts: RequestParts | None = None,
) -> SuggestResult:
    """The query's answer ranked in the core (with `explain`, every other candidate with its
    rule too), then the suggested patterns' views (`with_views`). `transitions`: the session
    signal's factor by capability (docs/ranking.md, Sessions); `text`: the words searched
    lexically, the intent's unless given (accents folded for another language)."""
    request = RankRequest(
        vector,
        query.intent if text is None else text,
        config.fetch_limit(query.k),
        query.k,
        resolve_settings(query, config),
        config,
        now_ms,
        transitions,
        parts,
    )
    if query.explain:
        ranked, filtered = index.explain(request)
    else:
        ranked, filtered = index.rank(request), []
    return with_views(repo, views, tenant, ranked, filtered)


def with_views(
    repo: Repository,
    views: ViewCache | None,
    tenant: str,
    ranked: list[CoreSuggestion],
    filtered: list[FilteredCandidate],
) -> SuggestResult:
    """The core's suggestions with their views: only those `views` does not hold are read
    from the store (their records, counters and shown intents: domain/shown_intents.py). A
    pattern deleted since the core ranked it is dropped rather than shown half-read. The views
    show the stored counters, which a capture may have raised since the ranking."""
    if not ranked:
        return SuggestResult((), filtered=tuple(filtered))
    shown: list[PatternView | None] = (
        [None] * len(ranked) if views is None else [views.get(tenant, r.pattern_id) for r in ranked]
    )
    missing = [r.pattern_id for r, view in zip(ranked, shown, strict=True) if view is None]
    if missing:
        token = 0 if views is None else views.token()  # before the store is read
        read = _read_views(repo, tenant, missing)
        for n, (suggestion, view) in enumerate(zip(ranked, shown, strict=True)):
            if view is None and (view := read.get(suggestion.pattern_id)) is not None:
                shown[n] = view
                if views is not None:
                    views.fill(tenant, suggestion.pattern_id, view, token)
    suggestions = []
    for suggestion, view in zip(ranked, shown, strict=True):
        yielding.checkpoint()
        if view is not None:
            suggestions.append(Suggestion(suggestion.capability_id, view, suggestion.score))
    return SuggestResult(suggestions=tuple(suggestions), filtered=tuple(filtered))


def _read_views(repo: Repository, tenant: str, pattern_ids: list[str]) -> dict[str, PatternView]:
    """The full views of these patterns from the store, by pattern id: none for a pattern
    deleted since the ranking."""
    rows = repo.views.view_rows(tenant, pattern_ids)
    if rows is None:
        return _read_decoded_views(repo, tenant, pattern_ids)
    out = {}
    for pattern_id, pattern, counters, intents, count in zip(
        pattern_ids, rows.patterns, rows.counters, rows.intents, rows.intent_counts, strict=True
    ):
        yielding.checkpoint()
        if pattern is not None and counters is not None and intents:
            out[pattern_id] = stored_view(pattern, counters, intents, count)
    return out


def _read_decoded_views(
    repo: Repository, tenant: str, pattern_ids: list[str]
) -> dict[str, PatternView]:
    """`_read_views` over a repository that hands out decoded records (`view_rows` is None)."""
    out = {}
    for pattern_id, found in zip(
        pattern_ids, repo.views.shown_views(tenant, pattern_ids), strict=True
    ):
        yielding.checkpoint()
        if found is not None and found.intents:
            out[pattern_id] = pattern_view(
                found.record, found.counters, found.intents, intent_count=found.intent_count
            )
    return out
