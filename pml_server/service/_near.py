"""The stored intents a similarity decision needs (rule 5's near-duplicate, a new pattern's
capability), without reading every intent of the patterns compared.

Both decisions take the intent closest to a vector among some patterns' intents (the first in
the store's order among equals: pattern by pattern, then by intent id) and act if it is within
a threshold. Reading all those intents made a capture's cost grow with its pattern's intents (a
pattern of 2,500 to 3,000 intents: 13.1 ms a capture, `benches/profile/popular_pattern.py`). The
in-memory vector index scores them all instead (its cosines are within `HNSW_SCORE_ERROR` of
the exact ones), and only the intents whose exact cosine could still be both the best and
within the threshold are read (`TenantSearchIndex.closest_candidates`); their stored vectors
decide, so the decision is the one all the intents would have given.
"""

from __future__ import annotations

from collections.abc import Sequence

from pml_server.domain.records import IntentRecord
from pml_server.domain.vectors import Vector
from pml_server.service._state import EngineState


def closest_candidates(
    state: EngineState,
    tenant: str,
    pattern_ids: Sequence[str],
    vector: Vector,
    threshold: float,
    index_current: bool = False,
) -> list[IntentRecord]:
    """Stored intents of `pattern_ids`, in the store's order, among which lies the one of all
    their intents closest to `vector`, whenever that one is within `threshold`. A shared
    store reads them all (other replicas' intents reach this replica's index late) unless
    `index_current`: the caller brought the tenant's index up to date (`index_is_current`)."""
    index = state.indexes.for_tenant(tenant)
    wanted = (
        None
        if state.store.shared and not index_current
        else index.closest_candidates(pattern_ids, vector, threshold)
    )
    if wanted is None:
        return [
            i
            for pattern_id in pattern_ids
            for i in state.repo.intents.of_pattern(tenant, pattern_id)
        ]
    return [i for i in state.repo.intents.intents_by_id(tenant, wanted) if i is not None]


# How long a capture waits for the follower's own catch-up to end before it reads the store.
FOLLOWER_WAIT_SECONDS = 1.0


def index_is_current(state: EngineState, tenant: str) -> bool:
    """Whether the tenant's vector index holds every intent committed so far: always over the
    embedded store (the engine indexes each write as it commits it); over a shared store once
    the follower applied the tenant's op log up to now (`OplogFollower.catch_up_tenant`)."""
    if not state.store.shared:
        return True
    follower = state.follower
    return follower is not None and follower.catch_up_tenant(tenant, FOLLOWER_WAIT_SECONDS)
