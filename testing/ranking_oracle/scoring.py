"""The one ranking formula (docs/ranking.md):

    total = match * reliability * usage * recency * superseded_penalty * steps

with match = 1 - (1 - ws*semantic) * (1 - wl*lexical_norm). Every factor is in [0, 1], so the
total is monotone in each part. The success estimate (Beta(1, 1) mean) is reported and filtered
on (min_success) but is not a factor: reliability carries the counters' evidence into the score.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from pml_server.domain.model import ScoreParts
from pml_server.ranking.config import RankingConfig
from testing.ranking_oracle.candidate import Candidate
from testing.ranking_oracle.signals import (
    clamp_unit,
    fuse_match,
    normalize_lexical,
    recency_factor,
    reliability_factor,
    success_estimate,
    usage_factor,
)


def relevance(
    semantic_cosine: float, lexical_bm25: float, config: RankingConfig
) -> tuple[float, float, float]:
    """(semantic, lexical, match) from the two retrieval signals: the one place the match is
    computed, so `score` and the bound `ranking.lazy` reads candidates by always agree."""
    semantic = clamp_unit(semantic_cosine)
    lexical = normalize_lexical(lexical_bm25, config)
    return semantic, lexical, fuse_match(semantic, lexical, config)


def match_array(
    semantic_cosine: NDArray[np.float64], lexical_bm25: NDArray[np.float64], config: RankingConfig
) -> NDArray[np.float64]:
    """`relevance(...)[2]` of many candidates at once: the same IEEE operations in the same
    order, element by element, so each value equals the scalar one exactly."""
    with np.errstate(invalid="ignore"):  # inf / inf is NaN here as in Python, then zeroed
        semantic = np.where(np.isfinite(semantic_cosine), np.clip(semantic_cosine, 0.0, 1.0), 0.0)
        positive = lexical_bm25 > 0.0  # also False for NaN, as in normalize_lexical
        safe = np.where(positive, lexical_bm25, 1.0)
        lexical = np.where(positive, safe / (safe + config.lexical_half_score), 0.0)
        lexical = np.where(np.isfinite(lexical), np.clip(lexical, 0.0, 1.0), 0.0)
    return 1.0 - (1.0 - config.semantic_weight * semantic) * (1.0 - config.lexical_weight * lexical)


def score(
    candidate: Candidate, config: RankingConfig, now_ms: int, transition: float = 1.0
) -> ScoreParts:
    """Every part of the candidate's score; `transition` is the session signal's factor of its
    capability (docs/ranking.md, Sessions), multiplied in last: at 1.0 the total's bits are
    those of the formula without it."""
    pattern = candidate.pattern
    semantic, lexical, match = relevance(candidate.semantic, candidate.lexical, config)
    success = success_estimate(pattern.success_count, pattern.failure_count, config)
    reliability = reliability_factor(pattern.success_count, pattern.failure_count, config)
    usage = usage_factor(pattern.usage_count, config)
    recency = recency_factor(pattern.last_used_ms, now_ms, config)
    penalty = config.superseded_penalty if pattern.superseded_by else 1.0
    return ScoreParts(
        match=match,
        semantic=semantic,
        lexical=lexical,
        success_estimate=success,
        usage=usage,
        recency=recency,
        superseded_penalty=penalty,
        total=match * reliability * usage * recency * penalty * candidate.steps * transition,
        reliability=reliability,
        steps=candidate.steps,
        transition=transition,
    )


def score_next(
    candidate: Candidate, config: RankingConfig, now_ms: int, weight: float
) -> ScoreParts:
    """A candidate's score when the request has no intent, only a previous step (docs/ranking.md,
    Sessions): the transition's relative likelihood `weight` stands where the match would,
    times the counters' factors; `transition` reports it, `match` is 0."""
    parts = score(candidate, config, now_ms)
    rest = parts.reliability * parts.usage * parts.recency * parts.superseded_penalty
    return replace(parts, total=weight * rest, transition=weight)
