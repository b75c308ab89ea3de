//! The ranking formula (docs/ranking.md), one small function per factor, each the same IEEE
//! operations in the same order as `testing/ranking_oracle/signals.py` and `scoring.py` (the
//! Python reference the tests compare with bit for bit):
//!
//! ```text
//! total = match * reliability * usage * recency * superseded_penalty
//! ```
//!
//! The success estimate is reported and filtered on (`min_success`) but is not a factor:
//! reliability carries the counters' evidence into the score.
//!
//! Every parameter comes from the server's `RankingConfig` (`Params`), none is fixed here.

/// Milliseconds in a day (`pml_server.ranking.config.DAY_MS`).
pub const DAY_MS: f64 = 86_400_000.0;

/// The weights and thresholds of the formula, as in `RankingConfig`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    pub semantic_weight: f64,
    pub lexical_weight: f64,
    pub lexical_half_score: f64,
    pub prior_successes: f64,
    pub prior_failures: f64,
    pub expected_success_rate: f64,
    pub reliability_prior_strength: f64,
    pub usage_weight: f64,
    pub usage_saturation: f64,
    pub recency_full_days: f64,
    pub recency_half_life_days: f64,
    pub recency_floor: f64,
    pub superseded_penalty: f64,
    /// Share of the total the step fit can take away (docs/ranking.md, Steps); 0 turns it off.
    pub step_weight: f64,
    /// Share of the total the tool-profile fit can take away (docs/ranking.md, Steps, "Tool
    /// profiles"); 0 turns it off.
    pub step_profile_weight: f64,
    /// Share of the total the request parts' coverage can take away (docs/ranking.md, Steps,
    /// "Request parts' coverage"); 0 turns it off.
    pub step_coverage_weight: f64,
    /// Share of the total a pattern running the request's named steps in the other order can
    /// lose (docs/ranking.md, Steps, "Order of the steps"); 0 turns it off.
    pub step_order_weight: f64,
    /// How far the step fit is gated by the request's expected step count (docs/ranking.md,
    /// Steps, "Gate"): 1 applies the fit only as far as the request's nearest intents are
    /// multi-step, 0 always applies it in full.
    pub step_gate: f64,
}

impl Default for Params {
    /// `RankingConfig()`'s defaults (used by the unit tests).
    fn default() -> Self {
        Params {
            semantic_weight: 1.0,
            lexical_weight: 0.9,
            lexical_half_score: 10.0,
            prior_successes: 1.0,
            prior_failures: 1.0,
            expected_success_rate: 0.9,
            reliability_prior_strength: 2.0,
            usage_weight: 0.002,
            usage_saturation: 100.0,
            recency_full_days: 90.0,
            recency_half_life_days: 90.0,
            recency_floor: 0.2,
            superseded_penalty: 0.5,
            step_weight: 0.3,
            step_profile_weight: 0.8,
            step_coverage_weight: 0.6,
            step_order_weight: 0.2,
            step_gate: 1.0,
        }
    }
}

/// What the formula reads of a pattern besides its two relevance signals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub successes: i64,
    pub failures: i64,
    pub usage: i64,
    pub last_used_ms: i64,
    pub superseded: bool,
}

/// `pml_server.domain.model.ScoreParts`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScoreParts {
    pub matched: f64,
    pub semantic: f64,
    pub lexical: f64,
    pub success: f64,
    pub usage: f64,
    pub recency: f64,
    pub penalty: f64,
    pub total: f64,
    pub reliability: f64,
    /// The step fit factor (docs/ranking.md, Steps): 1.0 without step evidence.
    pub steps: f64,
    /// The session signal (docs/ranking.md, Sessions): 1 without a context.
    pub transition: f64,
}

/// A signal clipped to [0, 1]; NaN and infinities mean no signal.
pub fn clamp_unit(value: f64) -> f64 {
    if value.is_finite() {
        value.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// Saturating map of a raw BM25 score to [0, 1): s / (s + half).
pub fn normalize_lexical(raw_bm25: f64, p: &Params) -> f64 {
    if raw_bm25 > 0.0 {
        raw_bm25 / (raw_bm25 + p.lexical_half_score)
    } else {
        0.0
    }
}

/// Weights of a pattern's best, second and third intent cosines (`signals.SEMANTIC_TOP_WEIGHTS`).
pub const SEMANTIC_TOP_WEIGHTS: [f64; 3] = [1.0, 0.25, 0.0625];

/// A pattern's semantic score from its intents' cosines (`signals.pattern_semantic`): the
/// weighted mean of the best three, at least 0; None without cosines. Same operations in the
/// same order as the Python, so the bits agree.
pub fn pattern_semantic(cosines: &mut [f64]) -> Option<f64> {
    if cosines.is_empty() {
        return None;
    }
    cosines.sort_by(|a, b| b.total_cmp(a));
    let mut weighted = 0.0;
    let mut weights = 0.0;
    for (weight, cosine) in SEMANTIC_TOP_WEIGHTS.iter().zip(cosines.iter()) {
        weighted += weight * cosine;
        weights += weight;
    }
    Some((weighted / weights).max(0.0))
}

/// Noisy-or of the weighted signals: 1 - (1 - ws*sem)(1 - wl*lex).
pub fn fuse_match(semantic: f64, lexical_norm: f64, p: &Params) -> f64 {
    let sem = clamp_unit(semantic);
    let lex = clamp_unit(lexical_norm);
    1.0 - (1.0 - p.semantic_weight * sem) * (1.0 - p.lexical_weight * lex)
}

/// (semantic, lexical, match) of the two retrieval signals (`scoring.relevance`).
pub fn relevance(cosine: f64, bm25: f64, p: &Params) -> (f64, f64, f64) {
    let semantic = clamp_unit(cosine);
    let lexical = normalize_lexical(bm25, p);
    (semantic, lexical, fuse_match(semantic, lexical, p))
}

/// Posterior mean of the success rate under a Beta(prior_successes, prior_failures) prior.
pub fn success_estimate(successes: i64, failures: i64, p: &Params) -> f64 {
    beta_mean(successes, failures, p.prior_successes, p.prior_failures)
}

/// Failures' evidence against a pattern, in (0, 1]: min(1, posterior mean / rate) where
/// rate = expected_success_rate and the prior is Beta(rate * strength, (1 - rate) * strength);
/// exactly 1 without failures.
pub fn reliability_factor(successes: i64, failures: i64, p: &Params) -> f64 {
    let rate = p.expected_success_rate;
    let strength = p.reliability_prior_strength;
    let mean = beta_mean(
        successes,
        failures,
        rate * strength,
        (1.0 - rate) * strength,
    );
    // Python's min(1.0, x) keeps 1.0 unless x < 1.0 (also for NaN), as f64::min does
    (mean / rate).min(1.0)
}

/// (s + a) / (s + f + a + b): the posterior mean of a Beta(a, b) prior after s and f.
pub fn beta_mean(successes: i64, failures: i64, prior_successes: f64, prior_failures: f64) -> f64 {
    let (s, f) = (successes.max(0), failures.max(0));
    // (s + f) is an exact integer sum in Python before the float priors are added
    (s as f64 + prior_successes) / ((s + f) as f64 + prior_successes + prior_failures)
}

/// A bounded tie-break for use: 1 - w + w * min(1, ln(1+n) / ln(1+saturation)).
pub fn usage_factor(usage: i64, p: &Params) -> f64 {
    let saturation = (usage.max(0) as f64).ln_1p() / p.usage_saturation.ln_1p();
    1.0 - p.usage_weight + p.usage_weight * saturation.min(1.0)
}

/// 1.0 while unused for at most recency_full_days, then halving every half-life, floored.
pub fn recency_factor(last_used_ms: i64, now_ms: i64, p: &Params) -> f64 {
    let age_days = now_ms.saturating_sub(last_used_ms).max(0) as f64 / DAY_MS;
    let overdue = age_days - p.recency_full_days;
    if overdue <= 0.0 {
        return 1.0;
    }
    // 0.5^x written as 2^-x: the compiler turns `0.5.powf(x)` into libm's exp2(-x), which can
    // differ from pow(0.5, x) in the last bit; spelled out, the oracle's `math.exp2` agrees.
    (-(overdue / p.recency_half_life_days))
        .exp2()
        .max(p.recency_floor)
}

/// The step fit's gate (docs/ranking.md, Steps, "Gate"), in [1 - step_gate, 1]: how far the
/// request asks for several steps. `expected_steps` is the cosine-weighted mean step count of
/// the patterns of its nearest intents (None: no neighbour to judge by, the gate stays open);
/// a request whose neighbours are all single-step patterns gets `1 - step_gate`, one whose
/// neighbours average two steps or more gets 1.
pub fn step_gate(expected_steps: Option<f64>, p: &Params) -> f64 {
    match expected_steps {
        None => 1.0,
        Some(k) => 1.0 - p.step_gate * (1.0 - clamp_unit(k - 1.0)),
    }
}

/// A step factor in [f, 1] gated: `1 - gate * (1 - factor)`, so it stays in [f, 1],
/// is exactly 1 at gate 0 and exactly `factor` at gate 1.
pub fn gated_step(factor: f64, gate: f64) -> f64 {
    if gate >= 1.0 {
        factor
    } else {
        1.0 - gate * (1.0 - factor)
    }
}

/// Every part of one candidate's score (`scoring.score`).
pub fn score(
    cosine: f64,
    bm25: f64,
    counts: &Counts,
    p: &Params,
    now_ms: i64,
    steps: f64,
) -> ScoreParts {
    let (semantic, lexical, matched) = relevance(cosine, bm25, p);
    let success = success_estimate(counts.successes, counts.failures, p);
    let reliability = reliability_factor(counts.successes, counts.failures, p);
    let usage = usage_factor(counts.usage, p);
    let recency = recency_factor(counts.last_used_ms, now_ms, p);
    let penalty = if counts.superseded {
        p.superseded_penalty
    } else {
        1.0
    };
    ScoreParts {
        matched,
        semantic,
        lexical,
        success,
        usage,
        recency,
        penalty,
        total: matched * reliability * usage * recency * penalty * steps,
        reliability,
        steps,
        transition: 1.0,
    }
}

/// `parts` with the session signal's factor (docs/ranking.md, Sessions) multiplied in last,
/// as `scoring.score` does: a factor of exactly 1 leaves every bit of the total as it was.
pub fn with_transition(mut parts: ScoreParts, factor: f64) -> ScoreParts {
    parts.transition = factor;
    parts.total *= factor;
    parts
}

/// A candidate's score when the request has no intent, only a previous step (docs/ranking.md,
/// Sessions; `scoring.score_next`): the transition's relative likelihood `weight` stands where
/// the match would, times the counters' factors; `transition` reports it, `matched` is 0.
pub fn score_next(counts: &Counts, p: &Params, now_ms: i64, weight: f64) -> ScoreParts {
    let mut parts = score(0.0, 0.0, counts, p, now_ms, 1.0);
    let rest = parts.reliability * parts.usage * parts.recency * parts.penalty;
    parts.total = weight * rest;
    parts.transition = weight;
    parts
}

#[cfg(test)]
mod semantic_tests {
    use super::pattern_semantic;

    #[test]
    fn weighs_the_best_three_cosines_at_most_the_best() {
        assert_eq!(pattern_semantic(&mut []), None);
        assert_eq!(pattern_semantic(&mut [0.8]), Some(0.8));
        let four = pattern_semantic(&mut [0.1, 0.9, 0.5, 0.7]).unwrap();
        assert!((four - (0.9 + 0.25 * 0.7 + 0.0625 * 0.5) / 1.3125).abs() < 1e-15);
        assert!(four <= 0.9);
        assert_eq!(pattern_semantic(&mut [-0.3, -0.1]), Some(0.0));
    }
}

#[cfg(test)]
mod gate_tests {
    use super::{gated_step, step_gate, Params};

    #[test]
    fn the_gate_opens_with_the_expected_step_count() {
        let p = Params::default();
        assert_eq!(step_gate(None, &p), 1.0);
        assert_eq!(step_gate(Some(1.0), &p), 0.0);
        assert_eq!(step_gate(Some(0.0), &p), 0.0);
        assert!((step_gate(Some(1.25), &p) - 0.25).abs() < 1e-15);
        assert_eq!(step_gate(Some(3.0), &p), 1.0);
        let off = Params {
            step_gate: 0.0,
            ..Params::default()
        };
        assert_eq!(step_gate(Some(1.0), &off), 1.0);
    }

    #[test]
    fn a_gated_factor_lies_between_the_factor_and_one() {
        for &f in &[0.7, 0.85, 1.0] {
            assert_eq!(gated_step(f, 1.0), f);
            assert_eq!(gated_step(f, 0.0), 1.0);
            let half = gated_step(f, 0.5);
            assert!(f <= half && half <= 1.0);
        }
    }
}
