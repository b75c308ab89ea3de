"""The step factors of a request read in the companion's space (docs/ranking.md, Other
languages, "Steps in the companion's space"): tool profiles summed from the companion's
vectors, in a ranking table of the companion's own, kept in step with adds and removals."""

from __future__ import annotations

import numpy as np
import pytest

from pml_server.domain.records import IntentRecord
from pml_server.ranking import RankingConfig
from pml_server.search.companion import CompanionView
from pml_server.search.tenant import TenantSearchIndex

PRIMARY_DIM = 8
COMPANION_DIM = 4
FLIGHTS = ("search_flights", "book_hotel")
MAIL = ("send_email", "read_inbox")


def _unit(vector: list[float]) -> np.ndarray:
    v = np.array(vector, dtype=np.float32)
    return v / np.linalg.norm(v)


def _index(kind: str) -> TenantSearchIndex:
    """Two two-tool patterns whose intents point to two different directions of the
    companion's space (the primary vectors are all alike: they cannot tell them apart)."""
    index = TenantSearchIndex(kind, PRIMARY_DIM, companion_dim=COMPANION_DIM)
    same = _unit([1.0] * PRIMARY_DIM)
    for intent_id, pattern_id, tools in (
        (1, "p_flights", FLIGHTS),
        (2, "p_flights", FLIGHTS),
        (3, "p_mail", MAIL),
        (4, "p_mail", MAIL),
    ):
        record = IntentRecord(intent_id, pattern_id, f"intent {intent_id}", 1, 0, "m", same)
        index.add(record, tools)
    assert index.companion is not None
    index.companion.activate()
    companion = {
        1: _unit([1.0, 0.1, 0.0, 0.0]),
        2: _unit([1.0, 0.0, 0.1, 0.0]),
        3: _unit([0.0, 1.0, 0.0, 0.1]),
        4: _unit([0.1, 1.0, 0.0, 0.0]),
    }
    ids = [i for i, _ in index.companion.pending()]
    index.companion.add(ids, np.stack([companion[i] for i in ids]))
    return index


def _factors(view: CompanionView, query: np.ndarray, profile_weight: float) -> list[float]:
    config = RankingConfig(step_profile_weight=profile_weight)
    neighbours = view.semantic(query, 10)
    return view.ranks.step_factors(
        neighbours, ["p_flights", "p_mail"], "", config, view.profile_vectors(), query
    )


@pytest.mark.parametrize("kind", ["hnsw", "exact"])
def test_profiles_in_the_companions_space_lower_the_pattern_they_point_away_from(
    kind: str,
) -> None:
    index = _index(kind)
    view = index.cross_lingual()
    assert isinstance(view, CompanionView)
    assert view.ranks is not index.ranks  # the tenant's own table is not touched
    query = _unit([1.0, 0.0, 0.0, 0.0])  # the flights direction
    with_profiles = _factors(view, query, 0.8)
    without = _factors(view, query, 0.0)
    # the flights pattern's tools' profiles point along the request: no loss from them
    assert with_profiles[0] == pytest.approx(without[0], abs=0.01)
    # the mail pattern's point away: it loses (nothing did before, in this space)
    assert with_profiles[1] < without[1] - 0.1


@pytest.mark.parametrize("kind", ["hnsw", "exact"])
def test_removed_intents_leave_the_companions_step_table(kind: str) -> None:
    index = _index(kind)
    index.remove([3, 4])
    view = index.cross_lingual()
    assert isinstance(view, CompanionView)
    factors = _factors(view, _unit([1.0, 0.0, 0.0, 0.0]), 0.8)
    assert factors[1] == 1.0  # no row left for the mail pattern
    assert view.ranks.intents_of("p_mail") == []
    assert view.ranks.intents_of("p_flights") == [1, 2]
