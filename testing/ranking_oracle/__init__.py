"""The Python ranking: Suggest's formula, filters, grouping and order written a second time,
in Python, as the oracle the Rust core (`pml_core_rs/src/ranking/`) is checked against, score
parts bit for bit (`tests/service/test_suggest_core.py`,
`tests/ranking/oracle/test_core_functions.py`), and Suggest's former Python path over a real
engine's state (`path`). The service never imports it: it ranks in the core alone
(docs/ranking.md, Pipeline). In `testing/`, the support package tests and benchmarks share,
because benchmarks replay it too (`benches/calibrate/ranking.py`, `benches/bench_context.py`)
and never import `tests`.

    signals    one small pure function per factor (formula.rs' functions)
    scoring    the formula: every part of a candidate's score
    filters    the named rules, first failure wins
    ordering   score, filter, group by capability, top k, explain the rest
    lazy       the same answer reading only the candidates that can still matter
"""

from __future__ import annotations

from pml_server.ranking.settings import (
    AVAILABLE_TOOLS,
    BEYOND_K,
    FLAGGED_FOR_REMOVAL,
    MIN_MATCH,
    MIN_SUCCESS,
    SAME_CAPABILITY,
    TAGS,
    FilterSettings,
    resolve_settings,
)
from testing.ranking_oracle.candidate import Candidate
from testing.ranking_oracle.filters import RULES, first_failed_rule
from testing.ranking_oracle.lazy import Retrieval, match_bound, rank_lazily, score_ceiling
from testing.ranking_oracle.ordering import rank, rank_next, rank_scored
from testing.ranking_oracle.scoring import match_array, relevance, score, score_next
from testing.ranking_oracle.signals import (
    beta_mean,
    fuse_match,
    normalize_lexical,
    pattern_semantic,
    recency_factor,
    reliability_factor,
    success_estimate,
    usage_factor,
)

__all__ = [
    "AVAILABLE_TOOLS",
    "BEYOND_K",
    "FLAGGED_FOR_REMOVAL",
    "MIN_MATCH",
    "MIN_SUCCESS",
    "RULES",
    "SAME_CAPABILITY",
    "TAGS",
    "Candidate",
    "FilterSettings",
    "Retrieval",
    "beta_mean",
    "first_failed_rule",
    "fuse_match",
    "match_array",
    "match_bound",
    "normalize_lexical",
    "pattern_semantic",
    "rank",
    "rank_lazily",
    "rank_next",
    "rank_scored",
    "recency_factor",
    "relevance",
    "reliability_factor",
    "resolve_settings",
    "score",
    "score_ceiling",
    "score_next",
    "success_estimate",
    "usage_factor",
]
