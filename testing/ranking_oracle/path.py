"""Suggest as the Python path answered it, on a real engine's state: retrieval from the
tenant's indexes (`retrieve`, `Retrieved`), then `rank_lazily` (or `rank_next`) of the oracle's
formula over the candidates read from the store, and the suggested patterns' views. The
service ranks in the core alone (`pml_server/ranking/table.py`); the tests compare its answers
with these, score parts bit for bit (docs/ranking.md, Pipeline).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pml_server.capture.views import pattern_view
from pml_server.domain.model import SuggestQuery, SuggestResult
from pml_server.domain.records import PatternCounters, PatternRecord
from pml_server.domain.shown_intents import SHOWN_INTENTS
from pml_server.domain.vectors import Vector
from pml_server.ranking import RankingConfig, RequestParts, resolve_settings
from pml_server.ranking.table import STEP_NEIGHBOURS
from pml_server.search import TenantSearchIndex
from pml_server.search.companion import CompanionView, MixedView
from pml_server.search.vectors import EXACT_SCAN_MIN
from pml_server.service import _sessions as sessions
from pml_server.service._arguments import check_tenant
from pml_server.service._state import EngineState
from pml_server.service._suggest import prepare
from pml_server.storage.repo import Repository
from testing.ranking_oracle.candidate import Candidate
from testing.ranking_oracle.lazy import Retrieval, rank_lazily, score_ceiling
from testing.ranking_oracle.ordering import rank_next
from testing.ranking_oracle.signals import pattern_semantic


def rank_suggestions(
    state: EngineState, tenant: str, query: SuggestQuery, ranking: RankingConfig | None = None
) -> SuggestResult:
    """Hybrid retrieval (vector + lexical, over-fetched), one Candidate per pattern with
    its best semantic and lexical scores, then `ranking.rank_lazily` filters, groups and
    orders, and the suggested patterns' views are completed: the service's Suggest (without
    plans) as the Python path answered it, with or without `explain`."""
    check_tenant(tenant)
    if query.context is not None:
        sessions.check_context(query.context)
    if not query.intent.strip() and query.context is not None and query.context.names_a_step():
        return suggest_next(state, tenant, query)
    prepared = prepare(state, tenant, query, ranking)
    if prepared is None:
        return SuggestResult(())
    index = state.indexes.get(tenant)
    assert index is not None  # `prepare` found it
    searched, vector, text = prepared.searched, prepared.vector, prepared.text
    ranking, factors = prepared.ranking, prepared.transitions
    limit = ranking.fetch_limit(query.k)
    permitted = index.permitted(resolve_settings(query, ranking), ranking)
    found = retrieve(state.repo, tenant, searched, vector, text, limit, ranking, permitted)
    if permitted is not None and query.explain:
        # `explain` also lists what the filters removed from the unrestricted shortlist, each
        # with its rule; they fail those filters, so the answer is that of the allow-list.
        found.add(retrieve(state.repo, tenant, searched, vector, text, limit, ranking))
    # the ceiling bounds the counters read after it: both from one state of the store
    with state.repo.consistent_reads():
        ceiling = score_ceiling(*state.repo.patterns.counter_ceilings(tenant), ranking)
        now = state.clock()
        result = rank_lazily(
            query, found.retrievals, found.load, ranking, now, ceiling, transitions=factors
        )
        return found.complete(result)


def suggest_next(state: EngineState, tenant: str, query: SuggestQuery) -> SuggestResult:
    """A request without an intent but with a previous step: the capabilities that usually
    come next (docs/ranking.md, Sessions), ranked by `ranking.rank_next` with every filter but
    `min_match`; empty when nothing ever followed that step."""
    resolve_settings(query, state.ranking)  # k and the filters, checked as for any request
    state.readiness.require()
    index = state.indexes.get(tenant)
    if index is None:
        return SuggestResult(())
    now = state.clock()
    weights = sessions.context_weights(state, tenant, query.context, now)
    permitted = index.permitted(resolve_settings(query, state.ranking), state.ranking)
    allowed = None if permitted is None else frozenset(permitted[0])
    chosen = sessions.next_patterns(state, tenant, weights, allowed, query.explain)
    retrievals = [Retrieval(p, 0.0, 0.0) for p in chosen]
    intents = {r.pattern_id: tuple(index.intents_of(r.pattern_id)) for r in retrievals}
    found = Retrieved(state.repo, tenant, retrievals, intents)
    with state.repo.consistent_reads():
        result = rank_next(query, found.load(retrievals), weights, state.ranking, now)
        return found.complete(result)


@dataclass
class Retrieved:
    repo: Repository
    tenant: str
    retrievals: list[Retrieval]
    # the intent ids the index held for each retrieved pattern (what `complete` reads)
    intent_ids: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # what each loaded candidate was built from, so `complete` shows the counters rank saw
    sources: dict[str, tuple[PatternRecord, PatternCounters]] = field(default_factory=dict)

    def add(self, other: Retrieved) -> None:
        """Also the patterns `other` retrieved that this did not (scores are the same)."""
        known = {r.pattern_id for r in self.retrievals}
        self.retrievals.extend(r for r in other.retrievals if r.pattern_id not in known)
        for pattern_id, intent_ids in other.intent_ids.items():
            self.intent_ids.setdefault(pattern_id, intent_ids)

    def load(self, retrievals: Sequence[Retrieval]) -> list[Candidate]:
        ids = [r.pattern_id for r in retrievals]
        candidates = []
        for retrieval, found in zip(
            retrievals, self.repo.views.patterns_with_counters(self.tenant, ids), strict=True
        ):
            if found is None:
                continue  # deleted since the index answered
            record, counters = found
            self.sources[record.id] = found
            candidates.append(
                Candidate(
                    capability_id=record.capability_id,
                    pattern=pattern_view(record, counters, (), with_params=False),
                    semantic=retrieval.semantic,
                    lexical=retrieval.lexical,
                    tags=tuple(counters.tags),
                    steps=retrieval.steps,
                )
            )
        return candidates

    def complete(self, result: SuggestResult) -> SuggestResult:
        """`result` with each suggestion's full view: its intents of most hits (then oldest),
        at most `SHOWN_INTENTS`, and how many it has, from every stored intent of the pattern
        (not from the counters' summary the service reads). A pattern deleted since retrieval
        is dropped rather than shown without its intents."""
        suggestions = []
        for suggestion in result.suggestions:
            record, counters = self.sources[suggestion.pattern.id]
            if every := self.repo.intents.of_pattern(self.tenant, record.id):
                every.sort(key=lambda i: (-i.hit_count, i.id))
                view = pattern_view(
                    record, counters, every[:SHOWN_INTENTS], intent_count=len(every)
                )
                suggestions.append(replace(suggestion, pattern=view))
        return replace(result, suggestions=tuple(suggestions))


def retrieve(
    repo: Repository,
    tenant: str,
    index: TenantSearchIndex | CompanionView | MixedView,
    vector: Vector,
    text: str,
    limit: int,
    config: RankingConfig,
    permitted: tuple[list[str], list[int]] | None = None,
    parts: RequestParts | None = None,
) -> Retrieved:
    """`limit` hits of each index; with `permitted` (pattern ids, their intents: the
    context filters' allow-list) among those patterns alone, all of them when they hold at
    most `EXACT_SCAN_MIN` intents (docs/ranking.md, Context filters). `parts`: the request's
    parts, in the space the step factor reads the tool profiles in (docs/ranking.md, Steps,
    "Request parts' coverage")."""
    if permitted is None:
        semantic_hits = index.semantic(vector, limit)
        lexical = dict(index.lexical_hits(text, limit))
    else:
        pattern_ids, allowed = permitted
        whole = len(allowed) <= EXACT_SCAN_MIN
        semantic_hits = index.semantic_among(vector, len(allowed) if whole else limit, allowed)
        lexical_limit = len(pattern_ids) if whole else limit
        lexical = dict(index.lexical.search_among(text, lexical_limit, pattern_ids))
    patterns = {p for i, _ in semantic_hits if (p := index.pattern_of(i)) is not None}
    patterns.update(lexical)
    intents_of = {p: tuple(index.intents_of(p)) for p in patterns}
    # Every intent of each pattern is scored (`pattern_semantic` weighs its best three): the ANN
    # returns only some of them, with exact scores; the others (a lexical-only hit has none) are
    # scored exactly in one call.
    cosine = dict(semantic_hits)
    unscored = [i for ids in intents_of.values() for i in ids if i not in cosine]
    if unscored:
        cosine.update(index.exact_scores(vector, unscored))
    # how well each pattern's steps fit the tools the request asks for (docs/ranking.md, Steps)
    neighbours = index.semantic(vector, STEP_NEIGHBOURS) if config.step_weight > 0 else []
    # the tool profiles of the request's space: the tenant's own index's, or the companion's
    # for a request in another language, and when the scoring mixes both, with the request's
    # companion vector (docs/ranking.md, Other languages)
    if isinstance(index, TenantSearchIndex):
        ann, toward = index.ann, vector
    else:
        ann, toward = index.companion_profiles(vector)
    steps = index.ranks.step_factors(
        neighbours,
        list(intents_of),
        text,
        config,
        ann,
        toward,
        companion=not isinstance(index, TenantSearchIndex),
        parts=parts,
    )
    retrievals = []
    for (pattern_id, intent_ids), fit in zip(intents_of.items(), steps, strict=True):
        scores = [cosine[i] for i in intent_ids if i in cosine]
        if scores:  # none: deleted since the index answered
            semantic = pattern_semantic(scores)
            retrievals.append(Retrieval(pattern_id, semantic, lexical.get(pattern_id, 0.0), fit))
    return Retrieved(repo, tenant, retrievals, intents_of)
