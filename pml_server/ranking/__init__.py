"""Lazy suggestions: Suggest's decision (no storage, no model, no transport).

The formula, filters, grouping and order run in the Rust core over each tenant's ranking
table (`RankTable`, `pml_core_rs/src/ranking/`); this package holds what feeds it: the
settings (`RankingConfig`), the request's resolved filters (`resolve_settings`), the lexical
index, the session signal (`transitions`) and plans. The formula and every default are
documented in docs/ranking.md; its Python twin is the tests' oracle (`testing/ranking_oracle`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pml_server.ranking.config import DAY_MS, RankingConfig, default_ranking
    from pml_server.ranking.lexical import LexicalIndex, tokenize
    from pml_server.ranking.settings import (
        AVAILABLE_TOOLS,
        BEYOND_K,
        FLAGGED_FOR_REMOVAL,
        MIN_MATCH,
        MIN_SUCCESS,
        RULES,
        SAME_CAPABILITY,
        TAGS,
        FilterSettings,
        resolve_settings,
    )
    from pml_server.ranking.table import (
        CoreSuggestion,
        Foreign,
        RankRequest,
        RankTable,
        RequestParts,
        core_params,
    )

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
    "CoreSuggestion",
    "FilterSettings",
    "Foreign",
    "LexicalIndex",
    "RankRequest",
    "RankTable",
    "RankingConfig",
    "RequestParts",
    "core_params",
    "default_ranking",
    "resolve_settings",
    "tokenize",
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
    "RULES": "settings",
    "SAME_CAPABILITY": "settings",
    "TAGS": "settings",
    "CoreSuggestion": "table",
    "FilterSettings": "settings",
    "Foreign": "table",
    "LexicalIndex": "lexical",
    "RankRequest": "table",
    "RankTable": "table",
    "RankingConfig": "config",
    "RequestParts": "table",
    "core_params": "table",
    "default_ranking": "config",
    "resolve_settings": "settings",
    "tokenize": "lexical",
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
