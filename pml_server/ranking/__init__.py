"""Lazy suggestions: the pure decision logic of Suggest (no storage, no model, no transport).

The engine retrieves candidates (vector index + `LexicalIndex`), builds `Candidate`s and calls
`rank`. The formula and every default are documented in docs/ranking.md.
"""

from __future__ import annotations

from pml_server.ranking.candidate import Candidate
from pml_server.ranking.config import DAY_MS, RankingConfig, default_ranking
from pml_server.ranking.filters import (
    AVAILABLE_TOOLS,
    BEYOND_K,
    FLAGGED_FOR_REMOVAL,
    MIN_MATCH,
    MIN_SUCCESS,
    RULES,
    SAME_CAPABILITY,
    TAGS,
    FilterSettings,
)
from pml_server.ranking.lazy import Retrieval, match_bound, rank_lazily, score_ceiling
from pml_server.ranking.lexical import LexicalIndex, tokenize
from pml_server.ranking.rank import rank, resolve_settings
from pml_server.ranking.scoring import score
from pml_server.ranking.signals import (
    beta_mean,
    fuse_match,
    normalize_lexical,
    pattern_semantic,
    recency_factor,
    reliability_factor,
    success_estimate,
    usage_factor,
)
from pml_server.ranking.table import CoreSuggestion, RankTable, core_params

__all__ = [
    "AVAILABLE_TOOLS",
    "BEYOND_K",
    "DAY_MS",
    "FLAGGED_FOR_REMOVAL",
    "MIN_MATCH",
    "MIN_SUCCESS",
    "RULES",
    "SAME_CAPABILITY",
    "TAGS",
    "Candidate",
    "CoreSuggestion",
    "FilterSettings",
    "LexicalIndex",
    "RankTable",
    "RankingConfig",
    "Retrieval",
    "beta_mean",
    "core_params",
    "default_ranking",
    "fuse_match",
    "match_bound",
    "normalize_lexical",
    "pattern_semantic",
    "rank",
    "rank_lazily",
    "recency_factor",
    "reliability_factor",
    "resolve_settings",
    "score",
    "score_ceiling",
    "success_estimate",
    "tokenize",
    "usage_factor",
]
