"""The cross-lingual companion of the default embedder (docs/ranking.md, Other languages).

MiniLM, the default model, reads English only. Beside it, a multilingual model (`cross_lingual`
setting: USE multilingual by default) embeds every intent too, kept in a second, in-memory
vector index per tenant (`TenantSearchIndex.companion`); a Suggest whose request is not English
(`embedding.language.is_english`: script, then function words) is answered in that space: the
same retrieval, formula, filters and grouping on the Python path, with the companion's cosines
as the semantic part and the lexical part weighed `OTHER_LANGUAGE_LEXICAL_WEIGHT` at most (a
French request's words rarely match English documents, and when they do it is mostly by
accident). English requests, a client-supplied `intent_embedding` (a vector of the primary
model) and the primary index are untouched.

The companion vectors are never stored: they are computed from the intent texts the index
already holds, at open (before the server is ready), after each capture (the new intents
only) and, for what other replicas wrote, at the next Suggest that needs them.
"""

from __future__ import annotations

from dataclasses import replace

from pml_server.config import EngineConfig
from pml_server.domain.model import SuggestQuery
from pml_server.embedding import CachedEmbedder, make_embedder
from pml_server.embedding.language import is_english
from pml_server.ranking import RankingConfig
from pml_server.search import TenantSearchIndex

# The lexical weight of a request that is not English, at most (the tenant's own weight if
# lower): chosen on the multilingual probe's tune part (benches/results/multilingual.md).
OTHER_LANGUAGE_LEXICAL_WEIGHT = 0.3
# Texts per companion embedding call while filling an index.
FILL_BATCH = 64


def make_companion(config: EngineConfig) -> CachedEmbedder | None:
    """The companion model the configuration asks for (none with the hashing embedder)."""
    if config.cross_lingual == "none" or config.embedder == "hashing":
        return None
    return make_embedder(config.cross_lingual, config.embedding_cache_size)


def applies(companion: CachedEmbedder | None, query: SuggestQuery) -> bool:
    """Whether `query` is answered in the companion's space."""
    return companion is not None and query.intent_embedding is None and not is_english(query.intent)


def fill(companion: CachedEmbedder | None, index: TenantSearchIndex) -> int:
    """Embed the intents of `index` that have no companion vector yet; returns how many."""
    if companion is None or index.companion is None:
        return 0
    pending = index.companion_pending()
    for first in range(0, len(pending), FILL_BATCH):
        chunk = pending[first : first + FILL_BATCH]
        vectors = companion.embed([text for _, text in chunk])
        index.add_companion([intent_id for intent_id, _ in chunk], vectors)
    return len(pending)


def other_language_ranking(ranking: RankingConfig) -> RankingConfig:
    """The ranking settings of a request answered in the companion's space."""
    weight = min(ranking.lexical_weight, OTHER_LANGUAGE_LEXICAL_WEIGHT)
    return replace(ranking, lexical_weight=weight)
