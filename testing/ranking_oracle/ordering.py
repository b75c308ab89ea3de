"""Suggest's decision: score, filter, group by capability, keep the top k, explain the rest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from pml_server.domain.model import (
    FilteredCandidate,
    ScoreParts,
    Suggestion,
    SuggestQuery,
    SuggestResult,
)
from pml_server.ranking.config import RankingConfig
from pml_server.ranking.settings import resolve_settings
from testing.ranking_oracle.candidate import Candidate
from testing.ranking_oracle.filters import (
    BEYOND_K,
    SAME_CAPABILITY,
    FilterSettings,
    first_failed_rule,
)
from testing.ranking_oracle.scoring import score, score_next

__all__ = ["rank", "rank_next", "rank_scored", "resolve_settings"]


def _merge_duplicates(candidates: Sequence[Candidate]) -> list[Candidate]:
    """One candidate per pattern: the same pattern retrieved twice keeps its best signals."""
    merged: dict[str, Candidate] = {}
    for cand in candidates:
        seen = merged.get(cand.pattern.id)
        if seen is None:
            merged[cand.pattern.id] = cand
        else:
            merged[cand.pattern.id] = replace(
                seen,
                semantic=max(seen.semantic, cand.semantic),
                lexical=max(seen.lexical, cand.lexical),
                tags=tuple(dict.fromkeys(seen.tags + cand.tags)),
            )
    return list(merged.values())


def _order(item: tuple[Candidate, ScoreParts]) -> tuple[float, float, float, str, str]:
    cand, parts = item
    return (
        -parts.total,
        -parts.match,
        -parts.success_estimate,
        cand.capability_id,
        cand.pattern.id,
    )


def rank(
    query: SuggestQuery,
    candidates: Sequence[Candidate],
    config: RankingConfig,
    now_ms: int,
    transitions: Mapping[str, float] | None = None,
) -> SuggestResult:
    """The top `query.k` capabilities, each represented by its best passing pattern.

    With `query.explain`, `filtered` lists every other candidate with the rule that kept it
    out: a filter name, `same_capability` (a better pattern represents its capability) or
    `beyond_k` (it ranked after the k-th suggestion).
    """
    settings = resolve_settings(query, config)
    merged = _merge_duplicates(candidates)
    factor = transitions or {}
    scored = [(c, score(c, config, now_ms, factor.get(c.capability_id, 1.0))) for c in merged]
    return rank_scored(query, settings, scored)


def rank_next(
    query: SuggestQuery,
    candidates: Sequence[Candidate],
    weights: Mapping[str, float],
    config: RankingConfig,
    now_ms: int,
) -> SuggestResult:
    """What usually comes next (a request without an intent, docs/ranking.md, Sessions): the
    patterns of the capabilities that followed the previous step, scored by `score_next`, with
    every filter but `min_match` (there is no match)."""
    settings = replace(resolve_settings(query, config), min_match=0.0)
    merged = _merge_duplicates(candidates)
    scored = [(c, score_next(c, config, now_ms, weights.get(c.capability_id, 0.0))) for c in merged]
    return rank_scored(query, settings, scored)


def rank_scored(
    query: SuggestQuery,
    settings: FilterSettings,
    candidates: Sequence[tuple[Candidate, ScoreParts]],
) -> SuggestResult:
    """`rank` of candidates already scored, at most one per pattern."""
    scored = sorted(candidates, key=_order)
    filtered: list[FilteredCandidate] = []
    chosen: dict[str, tuple[Candidate, ScoreParts]] = {}
    for cand, parts in scored:
        failed = first_failed_rule(cand, parts, settings)
        if failed is not None:
            rule, detail = failed
        elif cand.capability_id in chosen:
            rule = SAME_CAPABILITY
            detail = f"capability represented by pattern {chosen[cand.capability_id][0].pattern.id}"
        else:
            chosen[cand.capability_id] = (cand, parts)
            continue
        filtered.append(FilteredCandidate(cand.capability_id, cand.pattern.id, rule, detail, parts))
    ranked = list(chosen.values())  # already in score order: dicts keep insertion order
    suggestions = tuple(Suggestion(c.capability_id, c.pattern, p) for c, p in ranked[: query.k])
    if not query.explain:
        return SuggestResult(suggestions=suggestions)
    for position, (cand, parts) in enumerate(ranked[query.k :], start=query.k + 1):
        detail = f"ranked {position}, after the k={query.k} suggestions"
        filtered.append(
            FilteredCandidate(cand.capability_id, cand.pattern.id, BEYOND_K, detail, parts)
        )
    return SuggestResult(suggestions=suggestions, filtered=tuple(filtered))
