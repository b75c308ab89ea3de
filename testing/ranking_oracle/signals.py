"""The parts of the score, each a small pure function of one pattern (docs/ranking.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from pml_server.ranking.config import DAY_MS, RankingConfig

# Weights of a pattern's best, second and third intent cosines in its semantic part; the Rust
# core's `formula::pattern_semantic` uses the same ones in the same order (docs/ranking.md).
SEMANTIC_TOP_WEIGHTS = (1.0, 0.25, 0.0625)


def clamp_unit(value: float) -> float:
    """A signal clipped to [0, 1]; a negative cosine means "unrelated", NaN means no signal."""
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else 0.0


def pattern_semantic(cosines: Iterable[float]) -> float:
    """The query's semantic score for a pattern from its intents' cosines: the weighted mean of
    the best three (weights 1, 0.25, 0.0625, over the intents there are), at least 0.

    At most the best cosine, so a big group is never rewarded for its size (a pattern of one
    intent keeps its cosine); among close candidates, one whose second and third intents are
    close too outranks one that a single stray intent brought near the query. On the dev set
    (replayed offline, docs/ranking.md) about +0.01 hit@1 on both variants' held-apart queries."""
    top = sorted(cosines, reverse=True)[: len(SEMANTIC_TOP_WEIGHTS)]
    weighted = 0.0
    weights = 0.0
    for weight, cosine in zip(SEMANTIC_TOP_WEIGHTS, top, strict=False):
        weighted += weight * cosine
        weights += weight
    return max(0.0, weighted / weights) if weights > 0.0 else 0.0


def success_estimate(successes: int, failures: int, config: RankingConfig) -> float:
    """Posterior mean of the success rate under a Beta(prior_successes, prior_failures) prior.

    Chosen over the Wilson lower bound because the bound rates a pattern that succeeded once
    at 0.21 (z = 1.96), which would hide every freshly captured pattern behind any sensible
    min_success; the posterior mean rates it 0.67 and still keeps one failure in one try
    (0.33) far from 0%.
    """
    return beta_mean(successes, failures, config.prior_successes, config.prior_failures)


def reliability_factor(successes: int, failures: int, config: RankingConfig) -> float:
    """Failures' evidence against a pattern, in (0, 1]: min(1, posterior mean / rate) where
    rate = expected_success_rate and the prior is Beta(rate * strength, (1 - rate) * strength).

    Without failures the posterior mean is at least the prior's, so the factor is exactly 1 for a
    pattern that worked once or a thousand times: success counts say nothing about relevance,
    and an exact solution captured once must not lose to a popular near miss. Each failure pulls
    it down, in proportion to the evidence: a failure among many successes barely moves it
    (19 of 20: 1.0; 4 of 5: 0.92), and with many tries it tends to observed rate / expected rate
    (3 of 10: 0.44; 40 of 100: 0.45), so a pattern that mostly fails sinks.
    """
    rate = config.expected_success_rate
    strength = config.reliability_prior_strength
    mean = beta_mean(successes, failures, rate * strength, (1.0 - rate) * strength)
    return min(1.0, mean / rate)


def beta_mean(
    successes: int, failures: int, prior_successes: float, prior_failures: float
) -> float:
    """(s + a) / (s + f + a + b): the posterior mean of a Beta(a, b) prior after s and f."""
    s, f = max(successes, 0), max(failures, 0)
    return (s + prior_successes) / (s + f + prior_successes + prior_failures)


def normalize_lexical(raw_bm25: float, config: RankingConfig) -> float:
    """Saturating map of a raw BM25 score to [0, 1): s / (s + half). Independent of the other
    candidates, so a weak best lexical hit stays weak instead of being stretched to 1.0."""
    if not raw_bm25 > 0.0:  # also maps NaN to 0
        return 0.0
    return raw_bm25 / (raw_bm25 + config.lexical_half_score)


def fuse_match(semantic: float, lexical_norm: float, config: RankingConfig) -> float:
    """Noisy-or of the weighted signals: 1 - (1 - ws*sem)(1 - wl*lex).

    With no lexical evidence the match is the cosine itself; lexical evidence closes a share of
    the remaining gap to 1. Monotone in both signals and bounded to [0, 1].
    """
    sem = clamp_unit(semantic)
    lex = clamp_unit(lexical_norm)
    return 1.0 - (1.0 - config.semantic_weight * sem) * (1.0 - config.lexical_weight * lex)


def usage_factor(usage_count: int, config: RankingConfig) -> float:
    """A bounded tie-break for use: 1 - w + w * min(1, ln(1+n) / ln(1+saturation)). With the
    default w = 0.002, use reorders two candidates only when their totals are otherwise within
    0.2% (a near tie); it never lets popularity beat a clearly better match."""
    n = max(usage_count, 0)
    saturation = math.log1p(n) / math.log1p(config.usage_saturation)
    return 1.0 - config.usage_weight + config.usage_weight * min(1.0, saturation)


def recency_factor(last_used_ms: int, now_ms: int, config: RankingConfig) -> float:
    """1.0 while unused for at most recency_full_days, then halving every half-life, floored."""
    age_days = max(now_ms - last_used_ms, 0) / DAY_MS
    overdue = age_days - config.recency_full_days
    if overdue <= 0:
        return 1.0
    decayed = math.exp2(-(overdue / config.recency_half_life_days))  # 0.5 ** x, as the core
    return max(decayed, config.recency_floor)
