"""The parts of the formula, one by one, with the documented default values."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pml_server.ranking import DAY_MS, RankingConfig
from testing.ranking_oracle import (
    fuse_match,
    normalize_lexical,
    pattern_semantic,
    recency_factor,
    reliability_factor,
    success_estimate,
    usage_factor,
)

CONFIG = RankingConfig()
NOW = 1_800_000_000_000


@pytest.mark.parametrize(
    ("successes", "failures", "expected"),
    [(0, 0, 0.5), (1, 0, 2 / 3), (0, 1, 1 / 3), (4, 1, 5 / 7), (19, 1, 20 / 22), (2, 8, 0.25)],
)
def test_success_estimate_is_laplace_posterior_mean(
    successes: int, failures: int, expected: float
) -> None:
    assert success_estimate(successes, failures, CONFIG) == pytest.approx(expected)


@pytest.mark.parametrize("successes", [1, 2, 5, 20, 100, 10_000])
def test_reliability_is_one_without_failures_whatever_the_count(successes: int) -> None:
    assert reliability_factor(successes, 0, CONFIG) == 1.0


@pytest.mark.parametrize(
    ("successes", "failures", "expected"),
    # min(1, (s + 0.9 * 2) / ((s + f + 2) * 0.9))
    [(19, 1, 1.0), (4, 1, 5.8 / 6.3), (1, 1, 2.8 / 3.6), (3, 7, 4.8 / 10.8), (40, 60, 41.8 / 91.8)],
)
def test_reliability_weighs_failures_by_their_evidence(
    successes: int, failures: int, expected: float
) -> None:
    assert reliability_factor(successes, failures, CONFIG) == pytest.approx(expected)


def test_reliability_tends_to_the_rate_over_the_expected_rate() -> None:
    assert reliability_factor(300_000, 700_000, CONFIG) == pytest.approx(0.3 / 0.9, abs=1e-4)
    assert reliability_factor(3, 7, CONFIG) > reliability_factor(30, 70, CONFIG)  # more evidence


def test_success_estimate_prior_is_configurable() -> None:
    strict = RankingConfig(prior_successes=1.0, prior_failures=3.0)
    assert success_estimate(1, 0, strict) == pytest.approx(2 / 5)


def test_lexical_normalization_saturates() -> None:
    assert normalize_lexical(0.0, CONFIG) == 0.0
    assert normalize_lexical(-1.0, CONFIG) == 0.0
    assert normalize_lexical(float("nan"), CONFIG) == 0.0
    assert normalize_lexical(CONFIG.lexical_half_score, CONFIG) == pytest.approx(0.5)
    assert normalize_lexical(1e9, CONFIG) < 1.0
    assert normalize_lexical(3.0, CONFIG) < normalize_lexical(4.0, CONFIG)


def test_fused_match_is_the_cosine_without_lexical_evidence() -> None:
    assert fuse_match(0.85, 0.0, CONFIG) == pytest.approx(0.85)
    assert fuse_match(0.0, 1.0, CONFIG) == pytest.approx(CONFIG.lexical_weight)
    assert fuse_match(0.6, 0.5, CONFIG) == pytest.approx(
        1 - 0.4 * (1 - CONFIG.lexical_weight * 0.5)
    )
    assert fuse_match(-0.3, 0.0, CONFIG) == 0.0
    assert fuse_match(math.nan, 0.0, CONFIG) == 0.0
    assert fuse_match(1.0, 1.0, CONFIG) == 1.0


def test_fusion_weights_switch_a_signal_off() -> None:
    semantic_only = RankingConfig(lexical_weight=0.0)
    lexical_only = RankingConfig(semantic_weight=0.0, lexical_weight=1.0)
    assert fuse_match(0.4, 0.9, semantic_only) == pytest.approx(0.4)
    assert fuse_match(0.4, 0.9, lexical_only) == pytest.approx(0.9)


def test_usage_factor_diminishes_and_saturates() -> None:
    values = [usage_factor(n, CONFIG) for n in (0, 1, 5, 20, 100, 10_000)]
    assert values[0] == pytest.approx(1 - CONFIG.usage_weight)
    assert values == sorted(values)
    assert values[-2] == values[-1] == 1.0
    assert (values[2] - values[1]) / 4 > (values[3] - values[2]) / 15  # diminishing per use


@pytest.mark.parametrize(
    ("days", "expected"),
    [(0, 1.0), (45, 1.0), (90, 1.0), (180, 0.5), (270, 0.25), (10_000, 0.2)],
)
def test_recency_full_weight_to_90_days_then_halves_each_90_days(
    days: float, expected: float
) -> None:
    assert recency_factor(NOW - int(days * DAY_MS), NOW, CONFIG) == pytest.approx(expected)


def test_recency_of_a_future_timestamp_is_full() -> None:
    assert recency_factor(NOW + DAY_MS, NOW, CONFIG) == 1.0


def test_fetch_limit_overfetches() -> None:
    assert CONFIG.fetch_limit(5) == 5 * CONFIG.overfetch


def test_pattern_semantic_weighs_the_best_three_cosines() -> None:
    # one intent keeps its cosine; more: (1 * c1 + 0.25 * c2 + 0.0625 * c3) / 1.3125
    assert pattern_semantic([0.8]) == 0.8
    assert pattern_semantic([0.4, 0.8]) == pytest.approx((0.8 + 0.25 * 0.4) / 1.25)
    assert pattern_semantic([0.1, 0.9, 0.5, 0.7]) == pytest.approx(
        (0.9 + 0.25 * 0.7 + 0.0625 * 0.5) / 1.3125
    )
    assert pattern_semantic([-0.3, -0.1]) == 0.0
    assert pattern_semantic([]) == 0.0


@given(st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=12))
def test_pattern_semantic_is_at_most_the_best_cosine_and_ignores_order(
    cosines: list[float],
) -> None:
    """A big group is never rewarded for its size: its score is at most its best intent's, and
    intents beyond the best three change nothing."""
    best = max(cosines)
    value = pattern_semantic(cosines)
    assert value <= max(best, 0.0) + 1e-12  # a weighted mean of equal values may round up
    assert value == pattern_semantic(sorted(cosines))
    assert value == pattern_semantic(sorted(cosines, reverse=True)[:3])
    # a close second intent lifts a pattern above one whose other intents are far
    assert pattern_semantic([0.8, 0.79]) > pattern_semantic([0.8, 0.1])
