"""Suggest's candidate building: hybrid retrieval (vector + lexical, over-fetched) turned into
one `ranking.Candidate` per pattern with its best semantic and lexical scores."""

from __future__ import annotations

from pml_server.capture.views import pattern_view
from pml_server.embedding.base import Vector
from pml_server.embedding.search_index import TenantSearchIndex
from pml_server.ranking import Candidate
from pml_server.storage.repo import Repository


def suggest_candidates(
    repo: Repository,
    tenant: str,
    index: TenantSearchIndex,
    vector: Vector,
    text: str,
    limit: int,
) -> list[Candidate]:
    lexical: dict[str, float] = {}
    patterns: set[str] = set()
    for intent_id, _ in index.semantic(vector, limit):
        if (pattern_id := index.pattern_of.get(intent_id)) is not None:
            patterns.add(pattern_id)
    for pattern_id, score in index.lexical_hits(text, limit):
        patterns.add(pattern_id)
        lexical[pattern_id] = score
    candidates = []
    for pattern_id in sorted(patterns):
        record = repo.pattern(tenant, pattern_id)
        counters = repo.counters(tenant, pattern_id) if record else None
        if record is None or counters is None:
            continue  # deleted since the index answered
        intents = repo.intents(tenant, pattern_id)
        if not intents:
            continue
        # exact cosine over the pattern's own vectors (the ANN scores are approximate and
        # a lexical-only hit has none)
        semantic = float(max(float(i.vector @ vector) for i in intents))
        candidates.append(
            Candidate(
                capability_id=record.capability_id,
                pattern=pattern_view(record, counters, intents),
                semantic=max(0.0, semantic),
                lexical=lexical.get(pattern_id, 0.0),
                tags=tuple(counters.tags),
            )
        )
    return candidates
