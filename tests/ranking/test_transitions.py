"""The session signal (docs/ranking.md, Sessions): its weights and factor stay in their bounds,
it is the identity without a context, and it never lets a capability win on the transition
alone against one whose score without it is more than (1 + transition_weight) times higher."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.domain.model import SuggestQuery
from pml_server.ranking import RankingConfig
from pml_server.ranking.config import DAY_MS
from pml_server.ranking.transitions import (
    transition_ceiling,
    transition_factor,
    transition_factors,
    transition_weights,
)
from testing.ranking_oracle import Candidate, rank, score
from tests.ranking.oracle.test_properties import candidates
from tests.support import NOW_MS, candidate, pattern

CONFIG = RankingConfig()
capability = st.sampled_from([f"c{i}" for i in range(6)])
transitions = st.lists(
    st.tuples(
        capability,
        st.integers(min_value=0, max_value=10_000),
        st.integers(min_value=NOW_MS - 2_000 * DAY_MS, max_value=NOW_MS),
    ),
    max_size=12,
)
weights = st.dictionaries(capability, st.floats(min_value=0.0, max_value=0.999999))
configs = st.builds(
    RankingConfig,
    transition_weight=st.floats(min_value=0.0, max_value=1.0),
    transition_smoothing=st.floats(min_value=0.01, max_value=50.0),
)


@settings(deadline=None)
@given(transitions, configs)
def test_weights_and_factors_stay_in_their_bounds(
    seen: list[tuple[str, int, int]], config: RankingConfig
) -> None:
    found = transition_weights(seen, config, NOW_MS)
    assert set(found) == {c for c, n, _ in seen if n > 0}
    for weight in found.values():
        assert 0.0 < weight < 1.0
        factor = transition_factor(weight, config)
        assert 1.0 <= factor <= transition_ceiling(config) == 1.0 + config.transition_weight


def test_weights_are_relative_to_the_usual_next_step_and_age() -> None:
    now = NOW_MS
    found = transition_weights([("a", 7, now), ("b", 1, now), ("a", 0, now)], CONFIG, now)
    assert found == {"a": 7 / 9, "b": 1 / 9}
    # 270 days unused: 180 days past the full period, two half-lives: a quarter of the count
    old = transition_weights([("a", 8, now - 270 * DAY_MS), ("b", 2, now)], CONFIG, now)
    assert old == {"a": 2 / 4, "b": 2 / 4}
    assert transition_weights([], CONFIG, now) == {}


@settings(deadline=None)
@given(st.lists(candidates(), max_size=8), st.integers(min_value=1, max_value=6))
def test_without_a_context_the_formula_is_the_identity(cands: list[Candidate], k: int) -> None:
    """No context, an empty one, or transitions naming none of the candidates: every score part
    bit for bit as the formula without the signal."""
    query = SuggestQuery("q", k=k, explain=True, include_flagged=True)
    plain = rank(query, cands, CONFIG, NOW_MS)
    for given_transitions in (None, {}, {"elsewhere": 1.2}):
        assert rank(query, cands, CONFIG, NOW_MS, given_transitions) == plain
    for cand in cands:
        parts = score(cand, CONFIG, NOW_MS)
        assert parts.transition == 1.0
        product = parts.match * parts.reliability * parts.usage * parts.recency
        assert parts.total == product * parts.superseded_penalty


@settings(deadline=None)
@given(candidates(), candidates(), weights, configs)
def test_a_clearly_better_candidate_is_never_overtaken_on_the_transition(
    better: Candidate, other: Candidate, given_weights: dict[str, float], config: RankingConfig
) -> None:
    """If a's total without the signal exceeds (1 + transition_weight) times b's, a ranks above
    b whatever the transitions say (b may be the usual next step, a never seen after it)."""
    better = replace(better, capability_id="a", pattern=replace(better.pattern, id="pa"))
    other = replace(other, capability_id="b", pattern=replace(other.pattern, id="pb"))
    total_a = score(better, config, NOW_MS).total
    total_b = score(other, config, NOW_MS).total
    if not total_a > (1.0 + config.transition_weight) * total_b:
        return
    factors = transition_factors({"b": max(given_weights.values(), default=0.99)}, config)
    factors.update(transition_factors({"a": given_weights.get("a", 0.0)}, config))
    query = SuggestQuery("q", k=2, min_match=0.0, min_success=0.0, include_flagged=True)
    ranked = rank(query, [better, other], config, NOW_MS, factors)
    order = [s.capability_id for s in ranked.suggestions]
    if "a" in order and "b" in order:  # both passed the filters (tools, tags)
        assert order == ["a", "b"]


def test_the_bound_in_match_terms() -> None:
    """Between patterns without failures, used alike and recently: a match more than
    1 + transition_weight times the other's keeps first place; within it the usual next step
    may win (docs/ranking.md, Sessions)."""
    clear, usual = pattern("p1", capability_id="a"), pattern("p2", capability_id="b")
    strongest = transition_factors({"b": 0.999999}, CONFIG)
    query = SuggestQuery("q", k=2, min_match=0.0)
    ranked = rank(query, [candidate(clear, 0.76), candidate(usual, 0.6)], CONFIG, NOW_MS, strongest)
    assert [s.capability_id for s in ranked.suggestions] == ["a", "b"]  # 0.76 > 1.25 * 0.6
    ranked = rank(query, [candidate(clear, 0.7), candidate(usual, 0.6)], CONFIG, NOW_MS, strongest)
    assert [s.capability_id for s in ranked.suggestions] == ["b", "a"]  # 0.7 < 1.25 * 0.6
    assert ranked.suggestions[0].score.transition == strongest["b"]
