"""`rank_lazily` gives exactly `rank`'s answer while reading fewer candidates."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.domain.model import SuggestQuery
from pml_server.ranking import RankingConfig
from testing.ranking_oracle import (
    Candidate,
    Retrieval,
    match_bound,
    rank,
    rank_lazily,
    score_ceiling,
)
from testing.ranking_oracle import score as score_of
from testing.ranking_oracle.scoring import match_array, relevance
from tests.ranking.oracle.test_properties import TOOLS
from tests.support import NOW_MS, candidate, pattern

CONFIG = RankingConfig()


@st.composite
def candidates(draw: st.DrawFn) -> Candidate:
    """Candidates of up to 30 capabilities, mostly healthy, with close matches (the case where
    stopping early is hard to get right)."""
    i = draw(st.integers(min_value=0, max_value=10_000))
    p = pattern(
        f"p{i}",
        successes=draw(st.integers(min_value=0, max_value=60)),
        failures=draw(st.sampled_from([0, 0, 0, 1, 3, 12])),
        capability_id=f"c{draw(st.integers(min_value=0, max_value=30))}",
        tools=tuple(draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=2))),
        days_unused=draw(st.sampled_from([0.0, 10.0, 200.0, 900.0])),
        flagged=draw(st.integers(min_value=0, max_value=9)) == 0,
        superseded_by=draw(st.sampled_from(["", "", "", "other"])),
    )
    semantic = draw(st.floats(min_value=0.2, max_value=0.9))
    lexical = draw(st.sampled_from([0.0, 0.0, 2.0, 8.0]))
    return candidate(p, semantic, lexical, tuple(draw(st.lists(st.sampled_from("ab"), max_size=2))))


class CountingLoader:
    def __init__(self, pool: Sequence[Candidate]) -> None:
        self.by_id = {c.pattern.id: c for c in pool}
        self.loaded: list[str] = []

    def __call__(self, retrievals: Sequence[Retrieval]) -> list[Candidate]:
        self.loaded += [r.pattern_id for r in retrievals]
        return [self.by_id[r.pattern_id] for r in retrievals if r.pattern_id in self.by_id]


def _retrievals(pool: Sequence[Candidate]) -> list[Retrieval]:
    return [Retrieval(c.pattern.id, c.semantic, c.lexical) for c in pool]


@settings(deadline=None, max_examples=300)
@given(
    st.lists(candidates(), max_size=40, unique_by=lambda c: c.pattern.id),
    st.integers(min_value=1, max_value=6),
    st.booleans(),
    st.sampled_from([None, 0.0, 0.4]),
    st.sampled_from([None, 0.0, 0.6]),
    st.integers(min_value=1, max_value=8),
)
def test_lazy_answer_equals_the_full_ranking(
    pool: list[Candidate],
    k: int,
    explain: bool,
    min_match: float | None,
    min_success: float | None,
    batch: int,
) -> None:
    query = SuggestQuery("q", k=k, explain=explain, min_match=min_match, min_success=min_success)
    full = rank(query, pool, CONFIG, NOW_MS)
    most_successes = max((c.pattern.success_count for c in pool), default=0)
    most_uses = max((c.pattern.usage_count for c in pool), default=0)
    for ceiling in (1.0, score_ceiling(most_successes, most_uses, CONFIG)):
        loader = CountingLoader(pool)
        retrievals = _retrievals(pool)
        lazy = rank_lazily(query, retrievals, loader, CONFIG, NOW_MS, ceiling, batch=batch)
        assert lazy == full
        if explain:
            assert sorted(loader.loaded) == sorted(c.pattern.id for c in pool)


@settings(deadline=None)
@given(
    candidates(), st.integers(min_value=0, max_value=100), st.integers(min_value=0, max_value=100)
)
def test_score_ceiling_bounds_every_pattern_within_the_counts(
    cand: Candidate, more_successes: int, more_uses: int
) -> None:
    p = cand.pattern
    ceiling = score_ceiling(p.success_count + more_successes, p.usage_count + more_uses, CONFIG)
    parts = score_of(cand, CONFIG, NOW_MS)
    assert parts.total <= parts.match * ceiling


@settings(deadline=None)
@given(candidates())
def test_match_bound_is_an_upper_bound_of_the_total(cand: Candidate) -> None:
    retrieval = Retrieval(cand.pattern.id, cand.semantic, cand.lexical)
    parts = score_of(cand, CONFIG, NOW_MS)
    assert parts.match == match_bound(retrieval, CONFIG)
    assert parts.total <= match_bound(retrieval, CONFIG)


def test_clear_winners_stop_the_reading_early() -> None:
    # 60 capabilities; the first two are proven and clearly the best match
    pool = [candidate(pattern(f"p{i:02d}", successes=50), 0.95 - i * 0.001) for i in range(2)]
    pool += [candidate(pattern(f"q{i:02d}"), 0.3 + i * 0.001) for i in range(58)]
    loader = CountingLoader(pool)
    query = SuggestQuery("q", k=2)
    lazy = rank_lazily(query, _retrievals(pool), loader, CONFIG, NOW_MS)
    assert [s.pattern.id for s in lazy.suggestions] == ["p00", "p01"]
    assert lazy == rank(query, pool, CONFIG, NOW_MS)
    assert len(loader.loaded) < 20  # one batch, not 60 reads


def test_the_ceiling_stops_early_among_equally_fresh_patterns() -> None:
    # a fresh store: every pattern ran once, so every total is its match times the usage
    # factor of one use (1 - usage_weight, a little below 1); with matches that close, without
    # the ceiling every candidate must be read, with it the first batch settles the answer
    # (60 matches spread over 0.6 of the tie-break's width)
    step = CONFIG.usage_weight / 100
    pool = [candidate(pattern(f"p{i:02d}"), 0.9 - i * step) for i in range(60)]
    query = SuggestQuery("q", k=5)
    plain, bounded = CountingLoader(pool), CountingLoader(pool)
    full = rank(query, pool, CONFIG, NOW_MS)
    assert rank_lazily(query, _retrievals(pool), plain, CONFIG, NOW_MS) == full
    ceiling = score_ceiling(1, 1, CONFIG)
    assert rank_lazily(query, _retrievals(pool), bounded, CONFIG, NOW_MS, ceiling) == full
    assert len(plain.loaded) == 60
    assert len(bounded.loaded) == 10


def test_patterns_deleted_before_loading_are_skipped() -> None:
    pool = [candidate(pattern(f"p{i}"), 0.9 - i * 0.1) for i in range(3)]
    present = CountingLoader(pool[1:])  # p0 vanished between retrieval and loading
    lazy = rank_lazily(SuggestQuery("q", k=3), _retrievals(pool), present, CONFIG, NOW_MS)
    assert [s.pattern.id for s in lazy.suggestions] == ["p1", "p2"]


_SIGNAL = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-0.5, max_value=40.0),
)


@settings(deadline=None, max_examples=300)
@given(st.lists(st.tuples(_SIGNAL, _SIGNAL), min_size=1, max_size=20))
def test_the_vectorized_bounds_equal_the_scalar_match_exactly(
    signals: list[tuple[float, float]],
) -> None:
    """rank_lazily orders candidates by `match_array`; the proof needs each value to be the very
    match `score` gives (equality, not closeness), NaN and infinities included."""
    semantic = np.array([s for s, _ in signals], dtype=np.float64)
    lexical = np.array([lex for _, lex in signals], dtype=np.float64)
    vectorized = match_array(semantic, lexical, CONFIG).tolist()
    assert vectorized == [relevance(s, lex, CONFIG)[2] for s, lex in signals]
