"""The core's formula functions the service calls directly (the session signal's aging, the
retention's success estimate, the plans' cover test) equal the oracle's, bit for bit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pml_server import _core
from pml_server.ranking import RankingConfig, core_params
from testing.ranking_oracle import beta_mean, pattern_semantic, recency_factor

CONFIGS = st.builds(
    RankingConfig,
    recency_full_days=st.floats(0.0, 400.0),
    recency_half_life_days=st.floats(0.5, 400.0),
    recency_floor=st.floats(0.0, 1.0),
)
MS = st.integers(0, 4_000_000_000_000)


@given(cosines=st.lists(st.floats(-1.0, 1.0, width=32), max_size=8))
def test_pattern_semantic(cosines: list[float]) -> None:
    assert _core.pattern_semantic(cosines) == pattern_semantic(cosines)


@given(config=CONFIGS, last=MS, now=MS)
def test_recency_factor(config: RankingConfig, last: int, now: int) -> None:
    got = _core.recency_factor(last, now, core_params(config))
    assert got == recency_factor(last, now, config)


@given(
    successes=st.integers(-5, 10**9),
    failures=st.integers(-5, 10**9),
    prior_successes=st.floats(0.01, 50.0),
    prior_failures=st.floats(0.01, 50.0),
)
def test_beta_mean(
    successes: int, failures: int, prior_successes: float, prior_failures: float
) -> None:
    got = _core.beta_mean(successes, failures, prior_successes, prior_failures)
    assert got == beta_mean(successes, failures, prior_successes, prior_failures)
