"""Every threshold and weight of the ranking, with the defaults documented in docs/ranking.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

DAY_MS = 86_400_000
# Retrieval fetches at least the candidates of this many suggestions (a default request's k),
# so a request for fewer answers the first suggestions of the default k, never a worse first
# one (docs/ranking.md, Pipeline, "Retrieve").
FETCH_MIN_SUGGESTIONS = 5
# The bounds of the ranking's counts (docs/configuration.md, `[engine.ranking]`): unbounded, an
# overfetch past about 10**17 / k asked the index for hits no 64-bit integer holds, and a
# usage_saturation past 2**1024 is no float: either made every Suggest fail (INTERNAL).
COUNT_BOUNDS = {"usage_saturation": 1_000_000_000, "overfetch": 1024}


@dataclass(frozen=True)
class RankingConfig:
    """Server defaults of Suggest. A SuggestQuery field left None takes the value here."""

    # Filters (server defaults; min_match and min_success can be overridden per request).
    min_match: float = 0.3
    min_success: float = 0.5
    # Fusion of the two relevance signals: noisy-or of weighted signals (docs/ranking.md).
    semantic_weight: float = 1.0
    lexical_weight: float = 0.9
    # BM25 score mapped to 0.5 by the saturating normalization s / (s + half).
    lexical_half_score: float = 10.0
    # Beta prior of the success estimate (min_success compares it): Laplace's rule of succession.
    prior_successes: float = 1.0
    prior_failures: float = 1.0
    # Reliability, the success factor of the score: min(1, posterior mean / expected_success_rate)
    # under a Beta(rate * strength, (1 - rate) * strength) prior. 1.0 without failures, whatever
    # the count; tends to observed rate / expected rate as failures accumulate.
    expected_success_rate: float = 0.9
    reliability_prior_strength: float = 2.0
    # Usage, a bounded tie-break: (1 - usage_weight) + usage_weight * min(1, ln(1+n) / ln(1+sat)).
    # 0.2%: it reorders only candidates whose matches are within 0.2% (a near tie), since on
    # all-success sets use is popularity, not quality (docs/ranking.md, the dev-set replay).
    usage_weight: float = 0.002
    usage_saturation: int = 100
    # Recency: 1.0 up to full_days unused, then halves every half_life_days, never below floor.
    recency_full_days: float = 90.0
    recency_half_life_days: float = 90.0
    recency_floor: float = 0.2
    # Multiplier of a pattern retention marked as superseded by a better one.
    superseded_penalty: float = 0.5
    # Step fit (docs/ranking.md, Steps): the share of the total a pattern whose steps miss the
    # tools the request asks for (or add others) can lose; 0 turns it off.
    step_weight: float = 0.3
    # Tool profiles (docs/ranking.md, Steps, "Tool profiles"): the share of the total a pattern
    # loses when the request's vector points away from the sum of its tools' profiles (the
    # mean request each tool was learned from); 0 turns it off.
    step_profile_weight: float = 0.8
    # Request parts' coverage (docs/ranking.md, Steps, "Request parts' coverage"): the share of
    # the total a pattern loses when its tools cover none of the request's parts (a request of
    # two parts or more, each part's vector pooled from the request's own model run); gated
    # like the step fit; 0 turns it off.
    step_coverage_weight: float = 0.6
    # Order of the steps (docs/ranking.md, Steps, "Order of the steps"): the share of the total
    # a pattern loses when it runs every pair of the steps the request names by their tools'
    # words in the other order than named; gated like the step fit; 0 turns it off.
    step_order_weight: float = 0.2
    # The step fit's gate (docs/ranking.md, Steps, "Gate"): 1 applies the fit only as far as the
    # request's nearest intents belong to multi-step patterns (its expected step count minus
    # one, clipped to [0, 1]), so a single-step request is ranked by its match; 0 applies the
    # fit to every request (the formula before the gate).
    step_gate: float = 1.0
    # Sessions (docs/ranking.md, Sessions): a capability that usually follows the agent's
    # previous step has its total multiplied by 1 + transition_weight * w, w in [0, 1) its
    # transitions' relative likelihood smoothed by transition_smoothing counts. 1 without a
    # context, so a request without one ranks exactly as before.
    transition_weight: float = 0.25
    transition_smoothing: float = 2.0
    # Follow-up requests (docs/ranking.md, Sessions, "Follow-up requests"): with a context
    # naming the previous step, a request whose first suggestion matches below
    # follow_up_below is read again with a place added to its vector at follow_up_weight:
    # that step's tools' profiles, or those of the steps that usually follow it, whichever
    # the request is nearer; that reading answers when its first suggestion matches by more than
    # follow_up_margin over the first of the request read alone. A follow_up_weight of 0 turns
    # it off.
    follow_up_weight: float = 1.0
    follow_up_below: float = 0.65
    follow_up_margin: float = 0.05
    # How many candidates the engine should retrieve per requested suggestion from each index
    # before grouping (several patterns share a capability); the largest k is a request limit
    # (`pml_server.domain.limits.LIMITS.suggestions`).
    overfetch: int = 8

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"RankingConfig.{f.name} must be finite, got {value!r}")
        unit = (
            "min_match",
            "min_success",
            "semantic_weight",
            "lexical_weight",
            "usage_weight",
            "recency_floor",
            "superseded_penalty",
            "step_weight",
            "step_profile_weight",
            "step_coverage_weight",
            "step_order_weight",
            "step_gate",
            "transition_weight",
            "follow_up_weight",
            "follow_up_below",
            "follow_up_margin",
        )
        for name in unit:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"RankingConfig.{name} must be in [0, 1], got {value!r}")
        if not 0.0 < self.expected_success_rate <= 1.0:
            raise ValueError(
                "RankingConfig.expected_success_rate must be in (0, 1], "
                f"got {self.expected_success_rate!r}"
            )
        positive = (
            "lexical_half_score",
            "recency_half_life_days",
            "reliability_prior_strength",
            "transition_smoothing",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"RankingConfig.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("prior_successes", "prior_failures", "recency_full_days"):
            if getattr(self, name) < 0:
                raise ValueError(f"RankingConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        if self.prior_successes + self.prior_failures <= 0:
            raise ValueError("RankingConfig.prior_successes + prior_failures must be > 0")
        for name, most in COUNT_BOUNDS.items():
            if not 1 <= getattr(self, name) <= most:
                raise ValueError(
                    f"RankingConfig.{name} must be 1..{most}, got {getattr(self, name)!r}"
                )

    def fetch_limit(self, k: int) -> int:
        """How many hits the engine should ask each index for to fill k suggestions."""
        return max(k, FETCH_MIN_SUGGESTIONS) * self.overfetch


# The fusion defaults of each embedder family, calibrated on the dev queries, never on the
# reported held-out ones (docs/ranking.md, `python -m benches.calibrate.ranking hashing`). The
# hashing embedder's cosine is an overlap of hashed words, a noisier relevance signal than the
# model's, so it weighs half as much; a match without shared words is then about half the
# cosine, so the match threshold is halved with it.
FAMILY_DEFAULTS: dict[str, RankingConfig] = {
    "minilm": RankingConfig(),
    # ... and its tool profiles, means of hashed words, cost single-tool queries more than they
    # gave multi-tool ones (docs/ranking.md, Steps, "Tool profiles"): off, and so is the
    # request parts' coverage, which reads them
    "hashing": RankingConfig(
        semantic_weight=0.5,
        min_match=0.15,
        step_profile_weight=0.0,
        step_coverage_weight=0.0,
        # ... and a request's vector of hashed words plus a tool profile of them reads words
        # the request never said: follow-up requests are read alone
        follow_up_weight=0.0,
    ),
}


def default_ranking(family: str) -> RankingConfig:
    """The calibrated ranking defaults of an embedder family (`RankingConfig()` if unknown)."""
    return FAMILY_DEFAULTS.get(family, RankingConfig())
