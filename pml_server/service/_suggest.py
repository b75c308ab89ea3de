"""Suggest: retrieve -> rank -> complete. Retrieval and ranking are one call into the Rust
core over the tenant's ranking table (`_suggest_core`), for every request: with or without
`explain`, over either vector index kind, a local or shared store, in the companion's space
(another language) or, without an intent, what usually comes next; the suggested patterns'
views are read afterwards. Plans (several capabilities for one request) are composed here from
the ranked parts (docs/ranking.md, Plans).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from pml_server import _core
from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import SuggestQuery, SuggestResult
from pml_server.domain.vectors import CheckedVector, Vector, client_vector
from pml_server.ranking import resolve_settings
from pml_server.ranking.plans import (
    MIN_PLAN_PARTS,
    PART_HITS,
    WHOLE_HITS,
    WHOLE_INTENTS,
    PartHit,
    compose,
    split_request_weighted,
)
from pml_server.ranking.transitions import transition_factors
from pml_server.search import TenantSearchIndex
from pml_server.search.companion import CompanionView
from pml_server.service import _companion
from pml_server.service import _sessions as sessions
from pml_server.service._arguments import check_tenant
from pml_server.service._state import EngineState, no_words_error, usable
from pml_server.service._suggest_core import suggest_in_core, with_views


def suggest(state: EngineState, tenant: str, query: SuggestQuery) -> SuggestResult:
    """The ranked suggestions (`rank_suggestions`) and, when no one of the capabilities the
    memory holds covers the request, plans composed of several (docs/ranking.md, Plans)."""
    request_parts, weights = (
        split_request_weighted(query.intent) if query.plan_size > 0 else ((), ())
    )
    if len(request_parts) < MIN_PLAN_PARTS or _companion.applies(state.companion, query):
        # a request in another language: ranked in the companion's space, no plan (the parts
        # would be embedded by the English model; docs/ranking.md, Other languages)
        return rank_suggestions(state, tenant, query)
    check_tenant(tenant)
    check_query(query)
    # One model call for the whole request and its parts (docs/ranking.md, Plans, "Cost"):
    # the model's workers run them at once, so the parts cost little more wall time than the
    # whole request alone; a text met twice (a part equal to the request) is embedded once.
    texts = list(dict.fromkeys((query.intent, *request_parts)))
    if query.intent_embedding is not None:
        texts.remove(query.intent)
    vectors = dict(zip(texts, state.embedder.embed(texts), strict=True)) if texts else {}
    if query.intent_embedding is None:
        whole = vectors[query.intent]
        if not usable(whole):
            raise no_words_error()
        query = replace(query, intent_embedding=CheckedVector(np.array(whole, dtype=np.float32)))
        vectors[query.intent] = whole
    result = rank_suggestions(state, tenant, query)
    # the second retrieval: PART_HITS candidates per request part, the same filters, ranked in
    # the core (no explain)
    hits: list[list[PartHit]] = []
    for part in request_parts:
        vector = vectors.get(part)
        if vector is None or not usable(vector):
            hits.append([])
            continue
        sub = replace(
            query,
            intent=part,
            k=PART_HITS,
            intent_embedding=CheckedVector(np.array(vector, dtype=np.float32)),
            explain=False,
            plan_size=0,
            context=None,
        )
        found = rank_suggestions(state, tenant, sub).suggestions
        hits.append([PartHit(s, s.score.match) for s in found])
    whole = _whole_on_parts(state, tenant, result, request_parts, vectors)
    composed = compose(request_parts, hits, query.plan_size, weights=weights, whole=whole)
    return replace(result, plans=composed.plans)


def _whole_on_parts(
    state: EngineState,
    tenant: str,
    result: SuggestResult,
    request_parts: Sequence[str],
    vectors: dict[str, Vector],
) -> list[list[PartHit]]:
    """The whole request's first `WHOLE_HITS` suggestions, each with its semantic score on every
    part (the core's `pattern_semantic` of its intents' exact cosines to the part's vector),
    so a capability that covers the request is known to do so (docs/ranking.md, Plans)."""
    index = state.indexes.get(tenant)
    top = result.suggestions[:WHOLE_HITS]
    if index is None or not top:
        return []
    intents = {s.pattern.id: index.intents_of(s.pattern.id)[:WHOLE_INTENTS] for s in top}
    out: list[list[PartHit]] = []
    for part in request_parts:
        vector = vectors.get(part)
        if vector is None or not usable(vector):
            out.append([])
            continue
        cosines = index.exact_scores(vector, [i for ids in intents.values() for i in ids])
        found = []
        for s in top:
            scores = [cosines[i] for i in intents[s.pattern.id] if i in cosines]
            if scores:
                found.append(PartHit(s, _core.pattern_semantic(scores)))
        out.append(found)
    return out


def rank_suggestions(state: EngineState, tenant: str, query: SuggestQuery) -> SuggestResult:
    """The query ranked in the core over the tenant's ranking table (hybrid retrieval, the
    formula, filters, grouping, the top k and, with `explain`, every other candidate with its
    rule), then the suggested patterns' views (`_suggest_core`)."""
    check_tenant(tenant)
    if query.context is not None:
        sessions.check_context(query.context)
    if not query.intent.strip() and query.context is not None and query.context.names_a_step():
        return suggest_next(state, tenant, query)
    check_query(query)
    state.readiness.require()
    index = state.indexes.get(tenant)
    filler = state.companion_filler
    cross_lingual = (
        filler is not None
        and index is not None
        and _companion.applies(state.companion, query)
        and filler.ready_for(index)
    )
    vector = query_vector(state, query, cross_lingual)
    if index is None:
        return SuggestResult(())
    ranking = state.ranking
    # the session signal (docs/ranking.md, Sessions): {} without a context
    factors = transition_factors(
        sessions.context_weights(state, tenant, query.context, state.clock()), ranking
    )
    searched: TenantSearchIndex | CompanionView = index
    if cross_lingual:
        # another language: the companion's space, the same core call (service/_companion.py)
        searched = index.cross_lingual()
        ranking = _companion.other_language_ranking(ranking)
    now = state.clock()
    return suggest_in_core(
        state.repo, state.views, tenant, searched, vector, query, ranking, now, factors
    )


def suggest_next(state: EngineState, tenant: str, query: SuggestQuery) -> SuggestResult:
    """A request without an intent but with a previous step: the capabilities that usually
    come next (docs/ranking.md, Sessions), ranked in the core (`RankTable.rank_next`) with
    every filter but `min_match`; empty when nothing ever followed that step."""
    settings = resolve_settings(query, state.ranking)  # k and the filters, checked
    state.readiness.require()
    index = state.indexes.get(tenant)
    if index is None:
        return SuggestResult(())
    now = state.clock()
    weights = sessions.context_weights(state, tenant, query.context, now)
    pattern_ids: list[str] = []
    for capability_id in sorted(weights, key=lambda c: (-weights[c], c)):
        capability = state.repo.capabilities.capability(tenant, capability_id)
        if capability is None:
            continue  # deleted since
        pattern_ids += capability.pattern_ids
        if len(pattern_ids) >= LIMITS.transitions_read.bound:
            break  # bounded like the transitions read
    ranked, filtered = index.ranks.rank_next(
        pattern_ids, weights, query.k, settings, state.ranking, now, query.explain
    )
    return with_views(state.repo, state.views, tenant, ranked, filtered)


def query_vector(state: EngineState, query: SuggestQuery, cross_lingual: bool = False) -> Vector:
    """The query's vector (the client's, or the intent embedded: by the cross-lingual
    companion when `cross_lingual`)."""
    check_query(query)
    if query.intent_embedding is not None:
        return client_vector(query.intent_embedding, state.embedder.dim, "intent_embedding")
    if cross_lingual and state.companion is not None:
        vector: Vector = state.companion.embed([query.intent])[0]
        if not usable(vector):
            raise no_words_error()
        return vector
    return state.embed_one(query.intent)


def check_query(query: SuggestQuery) -> None:
    """INVALID_ARGUMENT naming each field out of its bounds."""
    bad = []
    if not query.intent.strip():
        bad.append(
            FieldViolation("intent", "must not be empty without a context naming a previous step")
        )
    if not 1 <= query.k <= LIMITS.suggestions.bound:
        bad.append(FieldViolation("k", f"must be between 1 and {LIMITS.suggestions.bound}"))
    for name in ("min_match", "min_success"):
        value = getattr(query, name)
        if value is not None and not 0.0 <= value <= 1.0:
            bad.append(FieldViolation(name, "must be between 0 and 1"))
    if bad:
        raise InvalidArgumentError(bad)
