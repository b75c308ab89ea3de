"""Similarity decisions: intent near-duplicates (rule 5) and capability grouping.

Vectors are L2-normalized float32, so a dot product is the cosine. Thresholds depend on the
embedding model (a sentence model and a hashing embedder spread similarities very differently);
`docs/capture.md` records how the defaults were measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pml_server.domain.vectors import Vector


@dataclass(frozen=True)
class SimilarityThresholds:
    # cosine at or above which a new intent text is the same mapping as an existing one
    intent_duplicate: float
    # cosine at or above which a new pattern with the same tool signature joins a capability
    capability_group: float


# Defaults per embedder family, calibrated in docs/capture.md (section "Thresholds").
DEFAULT_THRESHOLDS: dict[str, SimilarityThresholds] = {
    "minilm": SimilarityThresholds(intent_duplicate=0.92, capability_group=0.55),
    "hashing": SimilarityThresholds(intent_duplicate=0.90, capability_group=0.50),
}


def best_match(candidates: Sequence[Vector], query: Vector) -> tuple[int, float] | None:
    """Index and cosine of the candidate closest to `query` (None when there is none)."""
    if not candidates:
        return None
    # In float64, where a product of two float32 values is exact, rounded back to float32: a
    # row's score then does not depend on the other rows (a float32 matrix product rounds a
    # row's sum differently with the matrix's shape), so two equal intents compared in two
    # groups of different sizes tie, and the first in order wins, wherever they are compared.
    rows = np.stack(candidates).astype(np.float64)
    scores = (rows @ query.astype(np.float64)).astype(np.float32)
    best = int(np.argmax(scores))
    return best, float(scores[best])


def near_duplicate(candidates: Sequence[Vector], query: Vector, threshold: float) -> int | None:
    """Rule 5: the index of an existing intent within the near-duplicate threshold, if any."""
    match = best_match(candidates, query)
    if match is None or match[1] < threshold:
        return None
    return match[0]


def choose_capability(
    capabilities: Sequence[tuple[str, Sequence[Vector]]], query: Vector, threshold: float
) -> str | None:
    """Among capabilities with the same tool signature, the one holding the intent most similar
    to `query`, if that similarity reaches the grouping threshold."""
    best_id, best_score = None, threshold
    for capability_id, vectors in capabilities:
        match = best_match(vectors, query)
        if match is not None and match[1] >= best_score:
            best_id, best_score = capability_id, match[1]
    return best_id
