"""Lazy suggestions: the pure decision logic of Suggest (no storage, no model, no transport).

The engine retrieves candidates (vector index + `LexicalIndex`), builds `Candidate`s and calls
`rank`. The formula and every default are documented in docs/ranking.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pml_server.ranking.candidate import Candidate
    from pml_server.ranking.config import DAY_MS, RankingConfig, default_ranking
    from pml_server.ranking.filters import RULES
    from pml_server.ranking.lazy import Retrieval, match_bound, rank_lazily, score_ceiling
    from pml_server.ranking.lexical import LexicalIndex, tokenize
    from pml_server.ranking.ordering import rank
    from pml_server.ranking.scoring import score
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

# Each name is imported from its module on first use (PEP 562): the client commands import
# `pml_server.ranking.config` (through pml_server.config) and must not pay for numpy, the
# stemmer and the rest of the ranking modules at startup.
_MODULE_OF = {
    "AVAILABLE_TOOLS": "settings",
    "BEYOND_K": "settings",
    "DAY_MS": "config",
    "FLAGGED_FOR_REMOVAL": "settings",
    "MIN_MATCH": "settings",
    "MIN_SUCCESS": "settings",
    "RULES": "filters",
    "SAME_CAPABILITY": "settings",
    "TAGS": "settings",
    "Candidate": "candidate",
    "CoreSuggestion": "table",
    "FilterSettings": "settings",
    "LexicalIndex": "lexical",
    "RankTable": "table",
    "RankingConfig": "config",
    "Retrieval": "lazy",
    "beta_mean": "signals",
    "core_params": "table",
    "default_ranking": "config",
    "fuse_match": "signals",
    "match_bound": "lazy",
    "normalize_lexical": "signals",
    "pattern_semantic": "signals",
    "rank": "ordering",
    "rank_lazily": "lazy",
    "recency_factor": "signals",
    "reliability_factor": "signals",
    "resolve_settings": "settings",
    "score": "scoring",
    "score_ceiling": "lazy",
    "success_estimate": "signals",
    "tokenize": "lexical",
    "usage_factor": "signals",
}


def __getattr__(name: str) -> object:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
