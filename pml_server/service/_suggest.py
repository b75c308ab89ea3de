"""Suggest: retrieve -> rank -> complete. Retrieval and ranking are one call into the Rust
core over the tenant's ranking table (`_suggest_core`), for every request: with or without
`explain`, over either vector index kind, a local or shared store, in the companion's space
(another language), each intent in the space that reads it (an English request over intents
recorded in another language) or, without an intent, what usually comes next; the suggested
patterns' views are read afterwards. Plans (several capabilities for one request) are
composed here from the ranked parts (docs/ranking.md, Plans).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pml_server import _core
from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import SuggestQuery, SuggestResult
from pml_server.domain.vectors import CheckedVector, Vector, client_vector
from pml_server.embedding.base import EmbedderWrapper
from pml_server.ranking import RankingConfig, RequestParts, resolve_settings
from pml_server.ranking.plans import (
    MIN_PLAN_PARTS,
    PART_HITS,
    WHOLE_HITS,
    WHOLE_INTENTS,
    PartHit,
    compose,
    pooled_part_vectors,
    split_request_spans,
)
from pml_server.ranking.transitions import transition_factors
from pml_server.search import TenantSearchIndex
from pml_server.search.companion import CompanionView, MixedView
from pml_server.service import _companion
from pml_server.service import _sessions as sessions
from pml_server.service._arguments import check_tenant
from pml_server.service._state import EngineState, no_words_error, usable
from pml_server.service._suggest_core import suggest_in_core, with_views


def suggest(state: EngineState, tenant: str, query: SuggestQuery) -> SuggestResult:
    """The ranked suggestions (`rank_suggestions`), the request's parts weighing in the step
    factor, and, when no one of the capabilities the memory holds covers the request, plans
    composed of several (docs/ranking.md, Steps, "Request parts' coverage"; Plans); a request
    that says too little alone is read with the agent's previous step (`as_follow_up`)."""
    # the previous step is read once for every ranking below (`sessions.StepReading`)
    step = sessions.StepReading(state, tenant, query.context)
    result = as_follow_up(state, tenant, query, _suggest_alone(state, tenant, query, step), step)
    return with_removed(state, tenant, query, result, step)


# The most `missing_tools` an answer names.
MISSING_TOOLS_SHOWN = 20


def with_removed(
    state: EngineState,
    tenant: str,
    query: SuggestQuery,
    result: SuggestResult,
    step: sessions.StepReading,
) -> SuggestResult:
    """`result`, and when it is empty under the request's filters (`available_tools`, `tags`,
    `min_success`), what the same request finds without them: how many capabilities, and the
    tools they need that `available_tools` lacks, the best match's first (docs/ranking.md,
    Filters, "What the filters removed"). Ranked once more, only for such an answer."""
    filtered = query.available_tools is not None or query.tags or query.min_success is not None
    if result.suggestions or result.plans or not filtered:
        return result
    unfiltered = replace(
        query, available_tools=None, tags=(), min_success=None, explain=False, plan_size=0
    )
    found = rank_suggestions(state, tenant, unfiltered, step=step).suggestions
    offered = set(query.available_tools or ())
    missing: list[str] = []
    if query.available_tools is not None:
        for s in found:
            missing += [t for t in s.pattern.tools_used if t not in offered and t not in missing]
    return replace(
        result, removed_by_filters=len(found), missing_tools=tuple(missing[:MISSING_TOOLS_SHOWN])
    )


def _suggest_alone(
    state: EngineState, tenant: str, query: SuggestQuery, step: sessions.StepReading
) -> SuggestResult:
    # the parts weigh in the ranking when the server embeds the request (its one model run
    # gives their vectors); a client's vector ranks alike with plans on or off
    ranks_parts = query.intent_embedding is None
    request_parts, weights, spans = (
        split_request_spans(query.intent) if query.plan_size > 0 or ranks_parts else ((), (), ())
    )
    if (
        len(request_parts) < MIN_PLAN_PARTS
        or _companion.applies(state.companion, query)
        or _companion.mixes(state.companion, state.indexes.get(tenant), query)
    ):
        # a request in another language, or an English one over intents recorded in another:
        # ranked with the companion's cosines (its parts embedded by the companion: `prepare`),
        # no plan (the plans' parts are the English model's; docs/ranking.md, Other languages)
        return rank_suggestions(state, tenant, query, step=step)
    check_tenant(tenant)
    check_query(query)
    # One model run for the request and its parts (docs/ranking.md, Plans, "Part vectors")
    whole_vector, vectors, pooled = _part_vectors(state, query, request_parts, spans)
    if whole_vector is not None:
        if not usable(whole_vector):
            raise no_words_error()
        checked = CheckedVector(np.array(whole_vector, dtype=np.float32))
        query = replace(query, intent_embedding=checked)
    parts = request_part_vectors(request_parts, weights, vectors) if ranks_parts else None
    result = rank_suggestions(state, tenant, query, parts=parts, step=step)
    if query.plan_size == 0:
        return result
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
        found = rank_suggestions(state, tenant, sub, part_ranking(state.ranking)).suggestions
        hits.append([PartHit(s, s.score.match) for s in found])
    # plans are composed from rankings without the tool profiles (`part_ranking`): the whole
    # request's first suggestions too
    basis = result
    if state.ranking.step_profile_weight > 0:
        plain = replace(query, explain=False, plan_size=0)
        basis = rank_suggestions(state, tenant, plain, part_ranking(state.ranking), step=step)
    whole = _whole_on_parts(state, tenant, basis, request_parts, vectors)
    composed = compose(
        request_parts, hits, query.plan_size, weights=weights, whole=whole, pooled=pooled
    )
    return replace(result, plans=composed.plans)


def as_follow_up(
    state: EngineState,
    tenant: str,
    query: SuggestQuery,
    alone: SuggestResult,
    step: sessions.StepReading,
) -> SuggestResult:
    """`alone`, the request ranked by itself, or the request read as a follow-up of the
    agent's previous step (docs/ranking.md, Sessions, "Follow-up requests"): with a context
    naming that step and no suggestion of `alone` matching at `follow_up_below` or more, the
    request's vector plus `follow_up_weight` times the profile it is nearer of two (the mean
    of the step's tools' profiles, and that of the steps that usually follow it:
    `sessions.following_profile`), ranked alike (no plans); that reading answers when its
    first suggestion's match is more than `follow_up_margin` above the first of `alone` (or
    `alone` is empty). A request answered in the companion's space (another language) is read
    alone."""
    ranking = state.ranking
    context = query.context
    best_alone = alone.suggestions[0].score.match if alone.suggestions else 0.0
    if (
        ranking.follow_up_weight <= 0
        or best_alone >= ranking.follow_up_below
        or context is None
        or not context.names_a_step()
        or not query.intent.strip()
    ):
        return alone
    index = state.indexes.get(tenant)
    if (
        index is None
        or _companion.applies(state.companion, query)
        or _companion.mixes(state.companion, index, query)
    ):
        return alone
    _, tools = step.step
    own = index.ranks.step_profile(tools, index.ann) if tools else None
    following = sessions.following_profile(state, tenant, step.weights, index)
    vector = np.asarray(query_vector(state, query), dtype=np.float32)
    vector = vector / np.linalg.norm(vector)
    # the request leans towards the step it is nearer: the previous one, said again with other
    # arguments, or what usually follows it, a switch ("now book it"); a tie keeps the step
    # (docs/ranking.md, Sessions, "Follow-up requests")
    toward = [p for p in (own, following) if p is not None]
    if not toward:
        return alone
    profile = max(toward, key=lambda p: float(vector @ p))
    mixed = vector + ranking.follow_up_weight * profile
    norm = float(np.linalg.norm(mixed))
    if not norm > 0.0:  # the request points exactly away from the step
        return alone
    read_vector = CheckedVector((mixed / norm).astype(np.float32))
    read = rank_suggestions(
        state, tenant, replace(query, intent_embedding=read_vector, plan_size=0), step=step
    )
    if read.suggestions and read.suggestions[0].score.match > best_alone + (
        ranking.follow_up_margin
    ):
        return replace(read, read_as_follow_up=True)
    return alone


def request_part_vectors(
    parts: Sequence[str], weights: Sequence[float], vectors: dict[str, Vector]
) -> RequestParts | None:
    """The parts the step factor reads (docs/ranking.md, Steps, "Request parts' coverage"):
    each part with a usable vector, with its weight; None when fewer than two have one."""
    kept = [
        (vectors[p], w)
        for p, w in zip(parts, weights, strict=True)
        if p in vectors and usable(vectors[p])
    ]
    if len(kept) < MIN_PLAN_PARTS:
        return None
    return RequestParts(
        tuple(np.asarray(v, dtype=np.float32) for v, _ in kept), tuple(w for _, w in kept)
    )


def part_ranking(ranking: RankingConfig) -> RankingConfig:
    """The ranking plans are composed from: the tool profiles judge how a candidate's steps
    fit the whole request, not one part of it, and the plans' constants were tuned without
    them, so they are left out (docs/ranking.md, Steps, "Tool profiles")."""
    return replace(ranking, step_profile_weight=0.0)


def _part_vectors(
    state: EngineState,
    query: SuggestQuery,
    parts: Sequence[str],
    spans: Sequence[tuple[int, int]],
) -> tuple[Vector | None, dict[str, Vector], bool]:
    """The request's vector (None when the client sent it), its parts' vectors, and whether
    those were pooled (docs/ranking.md, Plans, "Part vectors"). A model that exposes its token
    states (MiniLM) runs once, on the request: its vector is the one `embed` gives, and each
    part's is pooled from the tokens inside the part (`pooled_part_vectors`); a part past the
    model's token limit holds none and is embedded alone. Any other model embeds the request
    (unless the client sent its vector) and its parts in one call, a text met twice once."""
    embedder = state.embedder
    pools = (
        embedder.embed_spans(query.intent, spans) if isinstance(embedder, EmbedderWrapper) else None
    )
    if pools is None:
        texts = list(dict.fromkeys(parts))
        if query.intent_embedding is None:
            texts = list(dict.fromkeys((query.intent, *texts)))
        vectors = dict(zip(texts, embedder.embed(texts), strict=True)) if texts else {}
        whole = vectors[query.intent] if query.intent_embedding is None else None
        return whole, {p: vectors[p] for p in parts}, False
    found = {
        p: v
        for p, ok, v in zip(
            parts, pools.found, pooled_part_vectors(pools.mean, pools.spans), strict=True
        )
        if ok
    }
    alone = list(dict.fromkeys(p for p in parts if p not in found))
    if alone:
        found.update(zip(alone, embedder.embed(alone), strict=True))
    return (pools.vector if query.intent_embedding is None else None), found, True


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


def rank_suggestions(
    state: EngineState,
    tenant: str,
    query: SuggestQuery,
    ranking: RankingConfig | None = None,
    parts: RequestParts | None = None,
    step: sessions.StepReading | None = None,
) -> SuggestResult:
    """The query ranked in the core over the tenant's ranking table (hybrid retrieval, the
    formula, filters, grouping, the top k and, with `explain`, every other candidate with its
    rule), then the suggested patterns' views (`_suggest_core`). `ranking`: the server's
    unless given (a plan's request parts, `part_ranking`); `step`: the query's context read
    (read here unless given)."""
    check_tenant(tenant)
    if query.context is not None:
        sessions.check_context(query.context)
    step = sessions.StepReading(state, tenant, query.context) if step is None else step
    if not query.intent.strip() and query.context is not None and query.context.names_a_step():
        return suggest_next(state, tenant, query, step)
    prepared = prepare(state, tenant, query, ranking, parts, step)
    if prepared is None:
        return SuggestResult(())
    return suggest_in_core(
        state.repo,
        state.views,
        tenant,
        prepared.searched,
        prepared.vector,
        query,
        prepared.ranking,
        state.clock(),
        prepared.transitions,
        prepared.text,
        prepared.parts,
    )


@dataclass(frozen=True)
class Prepared:
    """A request ready to rank: the index or view it is searched in (the tenant's, the
    companion's space for another language, or each intent in its own space), its vector and
    lexical words there, the ranking settings for that space and the session signal's factors
    (docs/ranking.md, Other languages, Sessions)."""

    searched: TenantSearchIndex | CompanionView | MixedView
    vector: Vector
    text: str
    ranking: RankingConfig
    transitions: dict[str, float]
    # the request's parts, in the space the tool profiles are read in (docs/ranking.md, Steps,
    # "Request parts' coverage")
    parts: RequestParts | None = None


def prepare(
    state: EngineState,
    tenant: str,
    query: SuggestQuery,
    ranking: RankingConfig | None = None,
    parts: RequestParts | None = None,
    step: sessions.StepReading | None = None,
) -> Prepared | None:
    """The checked request ready to rank (`ranking`: the server's unless given; `step`: the
    query's context read, read here unless given); None when the tenant holds nothing yet."""
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
        return None
    # an English request over intents recorded in another language: those are compared in the
    # companion's space, the English ones in the primary's (service/_companion.py)
    mixed = (
        not cross_lingual
        and filler is not None
        and _companion.mixes(state.companion, index, query)
        and filler.ready_for(index)
    )
    ranking = state.ranking if ranking is None else ranking
    # the session signal (docs/ranking.md, Sessions): {} without a context
    step = sessions.StepReading(state, tenant, query.context) if step is None else step
    factors = transition_factors(step.weights, ranking)
    if cross_lingual:
        # another language: the companion's space, the same core call (service/_companion.py)
        text = _companion.lexical_text(query.intent)
        # its parts embedded by the companion too (docs/ranking.md, Steps, "Request parts'
        # coverage"): the same factor, read in the companion's space
        assert state.companion is not None
        foreign_parts = _companion.request_parts(state.companion, query.intent)
        return Prepared(
            index.cross_lingual(),
            vector,
            text,
            _companion.other_language_ranking(ranking),
            factors,
            foreign_parts,
        )
    if mixed:
        searched = index.cross_lingual(companion_vector(state, query))
        # its parts embedded by the companion: the profiles are read in its space
        assert state.companion is not None
        mixed_parts = _companion.request_parts(state.companion, query.intent)
        return Prepared(
            searched,
            vector,
            query.intent,
            _companion.mixed_ranking(ranking),
            factors,
            mixed_parts,
        )
    return Prepared(index, vector, query.intent, ranking, factors, parts)


def suggest_next(
    state: EngineState, tenant: str, query: SuggestQuery, step: sessions.StepReading
) -> SuggestResult:
    """A request without an intent but with a previous step: the capabilities that usually
    come next (docs/ranking.md, Sessions), ranked in the core (`RankTable.rank_next`) with
    every filter but `min_match`; empty when nothing ever followed that step."""
    if query.intent_embedding is not None:  # was ignored without a word
        raise InvalidArgumentError(
            FieldViolation(
                "intent_embedding",
                "is given without an intent: a Suggest without one asks what usually comes "
                "next, which reads no vector",
            )
        )
    settings = resolve_settings(query, state.ranking)  # k and the filters, checked
    state.readiness.require()
    index = state.indexes.get(tenant)
    if index is None:
        return SuggestResult(())
    weights = step.weights
    now = state.clock()
    permitted = index.ranks.permitted(settings, state.ranking) if weights else None
    allowed = None if permitted is None else frozenset(permitted[0])
    pattern_ids = sessions.next_patterns(state, tenant, weights, allowed, query.explain)
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
        vector = companion_vector(state, query)
        if not usable(vector):
            raise no_words_error()
        return vector
    return state.embed_one(query.intent)


def companion_vector(state: EngineState, query: SuggestQuery) -> Vector:
    """The request embedded by the cross-lingual companion (set)."""
    assert state.companion is not None
    vector: Vector = state.companion.embed([query.intent])[0]
    return vector


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
