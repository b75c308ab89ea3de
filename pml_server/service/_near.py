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
    their intents closest to `vector`, whenever that one is within `threshold`. On a shared
    store whose index the caller could not bring up to date (`index_current` false:
    `index_is_current`), other replicas' intents may be missing from the index: a bounded
    read of the store adds them (`_lagging`)."""
    return closest_candidates_of(state, tenant, [pattern_ids], vector, threshold, index_current)[0]


def closest_candidates_of(
    state: EngineState,
    tenant: str,
    groups: Sequence[Sequence[str]],
    vector: Vector,
    threshold: float,
    index_current: bool = False,
) -> list[list[IntentRecord]]:
    """`closest_candidates` of each group of patterns (a capability's), for one decision:
    when the index lags, the groups share one bounded read of the store."""
    index = state.indexes.for_tenant(tenant)
    wanted = [index.closest_candidates(group, vector, threshold) for group in groups]
    if (state.store.shared and not index_current) or None in wanted:
        room = [LAGGING_READ]  # (None: the index cannot name them)
        return [
            _lagging(state, tenant, g, w or [], room) for g, w in zip(groups, wanted, strict=True)
        ]
    return [
        [i for i in state.repo.intents.intents_by_id(tenant, w or []) if i is not None]
        for w in wanted
    ]


# The stored intents read, at most, in store order for one decision when a shared store's index
# lags (docs/capture.md, "Rule 5 on a shared store").
LAGGING_READ = 512


def _lagging(
    state: EngineState,
    tenant: str,
    pattern_ids: Sequence[str],
    wanted: list[tuple[str, int]],
    room: list[int],
) -> list[IntentRecord]:
    """The candidates when the index may miss intents other replicas committed: the index's
    own (`wanted`, among those it holds), and the patterns' first stored intents in the
    store's order, as many as `room[0]` has left of `LAGGING_READ` (taken from it): on a store
    of fewer, every intent the index misses. In the store's order (pattern by pattern, then by
    intent id)."""
    order = {pattern_id: n for n, pattern_id in enumerate(pattern_ids)}
    found: dict[tuple[int, int], IntentRecord] = {}
    for pattern_id in pattern_ids:
        if room[0] <= 0:
            break
        read = state.repo.intents.of_pattern(tenant, pattern_id, limit=room[0])
        room[0] -= len(read)
        found.update(((order[pattern_id], intent.id), intent) for intent in read)
    missing = [(p, i) for p, i in wanted if (order[p], i) not in found]
    for intent in state.repo.intents.intents_by_id(tenant, missing):
        if intent is not None:
            found[(order[intent.pattern_id], intent.id)] = intent
    return [found[key] for key in sorted(found)]


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
