"""Similarity decisions (capture/dedup.py): a row's score does not depend on the rows compared
beside it, so equal intents tie wherever they are compared and the first in order wins."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.capture.dedup import best_match, choose_capability


def _unit(rng: np.random.Generator, dim: int) -> np.ndarray:
    v = rng.standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


@settings(max_examples=200)
@given(seed=st.integers(0, 2**32 - 1), others=st.integers(1, 40))
def test_a_rows_score_is_the_same_alone_and_among_others(seed: int, others: int) -> None:
    rng = np.random.default_rng(seed)
    query, row = _unit(rng, 384), _unit(rng, 384)
    if row @ query < 0:
        row = -row
    # rows pointing away from the query: the row stays the closest among them
    crowd = [-np.abs(_unit(rng, 384)) * np.sign(query) for _ in range(others)]
    assert best_match([*crowd, row], query) == (others, best_match([row], query)[1])  # type: ignore[index]


@settings(max_examples=100)
@given(seed=st.integers(0, 2**32 - 1), before=st.integers(0, 20), after=st.integers(0, 20))
def test_the_same_intent_in_two_capabilities_ties_and_the_later_wins(
    seed: int, before: int, after: int
) -> None:
    rng = np.random.default_rng(seed)
    query, shared = _unit(rng, 384), _unit(rng, 384)
    # every other intent is far from the query: the shared one is each capability's closest
    far = [-query] * (before + after)
    first = [shared]
    second = [*far[:before], shared, *far[before:]]
    score = float(shared.astype(np.float64) @ query.astype(np.float64))
    chosen = choose_capability([("a", first), ("b", second)], query, score - 0.01)
    assert chosen == "b"  # a tie: `choose_capability` keeps the later of equals
