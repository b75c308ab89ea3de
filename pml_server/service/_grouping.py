"""Looking for the capability a new pattern joins, among those of its tool signature. The
caller holds the signature's group lock, so two new patterns of one signature never both
create a capability."""

from __future__ import annotations

from pml_server import _core
from pml_server.capture.dedup import choose_capability
from pml_server.domain.vectors import Vector
from pml_server.search import TenantSearchIndex, best_score
from pml_server.service._near import closest_candidates_of, index_is_current
from pml_server.service._state import EngineState
from pml_server.service._writes import apply_staged_adds
from pml_server.storage.repo import Repository

# Capabilities compared when a new pattern looks for a group (same tool signature).
MAX_GROUP_CANDIDATES = 64
# Beyond that many, the nearest intents the vector index is asked for.
NEAREST_INTENTS_FOR_GROUPING = 256


def capability_for_new_pattern(
    state: EngineState, tenant: str, signature: tuple[str, ...], vector: Vector
) -> str | None:
    """The capability of the same tool signature holding the intent closest to `vector`,
    if close enough. Few such capabilities: compare with all their intents (exact). Many
    (a popular tool): ask the vector index for the nearest intents instead, so creating a
    pattern never reads a whole crowded signature."""
    same_tools = state.repo.capabilities.capabilities_with_tools(tenant, signature)
    threshold = state.rules.thresholds.capability_group
    if len(same_tools) <= MAX_GROUP_CANDIDATES:
        # a shared store's index is brought up to date first, else every intent is read
        current = index_is_current(state, tenant)
        decided, contenders = (
            decide_by_index(state, tenant, same_tools, vector, threshold)
            if current
            else (False, same_tools)
        )
        if decided:
            return contenders[0] if contenders else None
        candidates = capability_vectors(state, tenant, contenders, vector, threshold, current)
        return choose_capability(candidates, vector, threshold)
    apply_staged_adds(state, tenant)  # the earlier records of a batch are candidates too
    # other replicas' intents too (a shared store's index is otherwise behind by the lag)
    index_is_current(state, tenant)
    return nearest_allowed_capability(
        state.repo,
        tenant,
        state.indexes.for_tenant(tenant),
        vector,
        set(same_tools),
        threshold,
        NEAREST_INTENTS_FOR_GROUPING,
    )


def decide_by_index(
    state: EngineState, tenant: str, capability_ids: list[str], vector: Vector, threshold: float
) -> tuple[bool, list[str]]:
    """`choose_capability` over every intent of `capability_ids` from the vector index's
    scores alone when they settle it (docs/capture.md, "Grouping into capabilities"): (True,
    [the one] or [] for none); else (False, the capabilities that may still win, in the order
    given). Each capability's best exact cosine lies within `HNSW_SCORE_ERROR` of its best
    score, so one whose best is surely within the threshold and surely above every other's
    is the answer, with no stored vector read: a crowded capability (thousands of patterns
    recorded with one request's words, the same vector) is not read whole at each new pattern."""
    index = state.indexes.for_tenant(tenant)
    error = _core.HNSW_SCORE_ERROR
    scored: list[tuple[str, float]] = []
    for capability_id in capability_ids:
        capability = state.repo.capabilities.capability(tenant, capability_id)
        best = best_score(index, capability.pattern_ids, vector) if capability else None
        if best is not None and best + error >= threshold:
            scored.append((capability_id, best))
    if not scored:
        return True, []
    surest = max(best for _, best in scored) - error
    contenders = [(c, best) for c, best in scored if best + error >= surest]
    if len(contenders) == 1 and contenders[0][1] - error >= threshold:
        return True, [contenders[0][0]]
    return False, [c for c, _ in contenders]


def capability_vectors(
    state: EngineState,
    tenant: str,
    capability_ids: list[str],
    vector: Vector,
    threshold: float,
    index_current: bool,
) -> list[tuple[str, list[Vector]]]:
    """For each capability, the vectors of its intents among which lies its closest to
    `vector` when that one is within `threshold` (`_near`): the exact comparison (few
    capabilities) without reading every intent of a crowded capability."""
    found = [
        (capability_id, capability.pattern_ids)
        for capability_id in capability_ids
        if (capability := state.repo.capabilities.capability(tenant, capability_id)) is not None
    ]
    near = closest_candidates_of(
        state, tenant, [ids for _, ids in found], vector, threshold, index_current
    )
    return [
        (capability_id, [i.vector for i in intents])
        for (capability_id, _), intents in zip(found, near, strict=True)
    ]


def nearest_allowed_capability(
    repo: Repository,
    tenant: str,
    index: TenantSearchIndex,
    vector: Vector,
    allowed: set[str],
    threshold: float,
    nearest: int,
) -> str | None:
    """The capability, among `allowed`, of the nearest intent at least `threshold` close, asking
    the vector index for the `nearest` intents (many capabilities: never reads them all)."""
    for intent_id, score in index.semantic(vector, nearest):
        if score < threshold:
            break  # best first: nothing further can qualify
        pattern_id = index.pattern_of(intent_id)
        pattern = repo.patterns.pattern(tenant, pattern_id) if pattern_id else None
        if pattern is not None and pattern.capability_id in allowed:
            return pattern.capability_id
    return None
