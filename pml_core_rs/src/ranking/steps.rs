//! Step-aware relevance (docs/ranking.md, Steps): how well a candidate's steps fit the tools
//! the request asks for, judged from what the memory has learned about each tool rather than
//! from the candidate's own intents alone.
//!
//! The request's evidence for a tool `t` is the larger of
//! - its **neighbour vote**: among the `STEP_NEIGHBOURS` intents nearest the request (the
//!   vector search's best hits), the cosine-weighted share whose pattern uses `t`; and
//! - its **name**: `STEP_NAME_WEIGHT` x the share of `t`'s name words the request names.
//!
//! A candidate with the distinct tools `T` fits by the Dice overlap of `T` with that soft set:
//! `fit = 2 * sum(v(t), t in T) / (|T| + mass)`, `mass` the evidence summed over every tool of
//! the retrieved candidates. A missing step lowers the sum, an extra one raises `|T|`, each in
//! proportion; the pattern with exactly the asked tools fits best. The factor in the total is
//! `1 - w + w * fit` (`Params::step_weight`); 1.0 for a pattern without tools or a request
//! without evidence. Pure: the words come analysed from Python
//! (`ranking.plans.text_words_in_order`).

use rustc_hash::FxHashMap;

use super::formula::{gated_step, step_gate, Params};
use super::table::{dot, NameId, ProfileSpace, RankTable, Row};
use crate::error::CoreResult;
use crate::index::{Hit, HnswIndex};

/// How many of the request's nearest intents vote for their patterns' tools.
pub const STEP_NEIGHBOURS: usize = 10;
/// The most request parts a query may carry (`ranking.plans.MAX_REQUEST_PARTS` and room).
pub const MAX_REQUEST_PARTS: usize = 16;
/// What a tool named in full by the request counts as evidence, at most.
pub const STEP_NAME_WEIGHT: f64 = 0.3;

/// The request's expected step count (docs/ranking.md, Steps, "Gate"): the cosine-weighted
/// mean number of distinct tools of the patterns of its `STEP_NEIGHBOURS` nearest intents
/// (best first, ties by id, as the step evidence reads them); None without a neighbour of
/// positive cosine.
pub fn expected_steps(table: &RankTable, neighbours: &[Hit]) -> Option<f64> {
    let mut nearest: Vec<&Hit> = neighbours.iter().collect();
    nearest.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    let (mut weighted, mut total) = (0.0, 0.0);
    for hit in nearest.into_iter().take(STEP_NEIGHBOURS) {
        let Some(slot) = table.row_of_intent(hit.id) else {
            continue;
        };
        let w = f64::from(hit.score).max(0.0);
        weighted += w * table.row(slot).tools.len() as f64;
        total += w;
    }
    (total > 0.0).then(|| weighted / total)
}

/// The request's analysed words (`ranking.plans.text_words_in_order`), each with the position
/// of its first use: the step evidence reads which tools they name, the order fit where (when
/// the request states an order at all: `ordered`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RequestWords {
    first: FxHashMap<String, usize>,
    ordered: bool,
}

impl RequestWords {
    /// `words` in the order the request first uses them (a word met again keeps its first
    /// position); `ordered`: the request states an order ("then", "after that", ...:
    /// `ranking.plans.states_order`).
    pub fn new(words: Vec<String>, ordered: bool) -> Self {
        let mut first = FxHashMap::default();
        for (n, word) in words.into_iter().enumerate() {
            first.entry(word).or_insert(n);
        }
        RequestWords { first, ordered }
    }

    /// Every word, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &String> {
        self.first.keys()
    }

    /// Where the request first uses `word`.
    pub fn position(&self, word: &str) -> Option<usize> {
        self.first.get(word).copied()
    }
}

/// Whether a candidate runs the steps the request names in the order it names them
/// (docs/ranking.md, Steps, "Order of the steps"), for a request that states an order. One of
/// the candidate's tools is *named at* the first position of its most specific distinctive
/// name word the request uses: a word of its name no other tool of the candidate has ("offers"
/// of `product_offers` beside `product_reviews`), the one fewest tools of the memory share
/// ("profit" rather than "calculate"). Over the pairs of its tools named at two different
/// positions, a pair the candidate runs in the other order than the request names it is
/// discordant; the factor is `1 - w * discordant / pairs` (`Params::step_order_weight`), 1.0
/// with no such pair or when the request states no order.
pub fn order_factor(table: &RankTable, row: &Row, words: &RequestWords, weight: f64) -> f64 {
    if weight <= 0.0 || row.sequence.len() < 2 || !words.ordered {
        return 1.0;
    }
    // the named tools' positions, in the order the candidate runs them
    let named: Vec<usize> = row
        .sequence
        .iter()
        .filter_map(|&t| {
            table
                .tool_words(t)
                .iter()
                .filter(|w| {
                    !row.sequence
                        .iter()
                        .any(|&o| o != t && table.tool_words(o).contains(w))
                })
                .filter_map(|w| {
                    words
                        .position(w)
                        .map(|at| (table.tools_named_by(w).len(), at))
                })
                .min()
                .map(|(_, at)| at)
        })
        .collect();
    let (mut pairs, mut discordant) = (0usize, 0usize);
    for (i, &a) in named.iter().enumerate() {
        for &b in &named[i + 1..] {
            if a != b {
                pairs += 1;
                discordant += usize::from(a > b);
            }
        }
    }
    if pairs == 0 {
        return 1.0;
    }
    1.0 - weight * (discordant as f64 / pairs as f64)
}

/// The request's evidence for each tool of the retrieved candidates.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StepEvidence {
    weight: f64,
    evidence: FxHashMap<NameId, f64>,
    mass: f64,
}

impl StepEvidence {
    /// The step factor of a pattern with these (sorted, distinct) tools, in [1 - w, 1].
    pub fn factor(&self, tools: &[NameId]) -> f64 {
        if self.weight <= 0.0 || tools.is_empty() || self.mass <= 0.0 {
            return 1.0;
        }
        let mut inter = 0.0;
        for t in tools {
            inter += self.evidence.get(t).copied().unwrap_or(0.0);
        }
        let fit = (2.0 * inter / (tools.len() as f64 + self.mass)).min(1.0);
        1.0 - self.weight + self.weight * fit
    }
}

/// The request's `STEP_NEIGHBOURS` nearest intents in the whole memory, as
/// `query::semantic_hits` finds them. `found` came from an unrestricted search for `searched`
/// hits (None: among an allow-list). The graph walk keeps the best `max(ef_search, k)` nodes
/// and returns the first `k` of them, best first; while neither search asks for more than
/// `ef_search`, both walk the same beam, so the first hits of the retrieval's search are this
/// search's answer bit for bit, and it is not run twice (docs/ranking.md, Steps, "Cost").
pub fn step_neighbours(
    ann: &HnswIndex,
    query: &[f32],
    found: &[Hit],
    searched: Option<usize>,
) -> CoreResult<Vec<Hit>> {
    let size = ann.len();
    let want = STEP_NEIGHBOURS.min(size);
    if let Some(k) = searched.map(|k| k.min(size)) {
        let ef = ann.ef_search();
        if k >= want && k.max(ef) == want.max(ef) {
            return Ok(found[..want.min(found.len())].to_vec());
        }
    }
    if want == 0 {
        return Ok(Vec::new());
    }
    ann.search(query, want, None, None)
}

/// The evidence of a request: `neighbours` its `STEP_NEIGHBOURS` nearest intents in the whole
/// memory (any order; the context filters do not restrict them, so the evidence does not depend
/// on what retrieval kept), `words` its analysed words.
pub fn step_evidence(
    table: &RankTable,
    neighbours: &[Hit],
    words: &RequestWords,
    p: &Params,
) -> StepEvidence {
    let mut out = StepEvidence {
        weight: p.step_weight,
        ..StepEvidence::default()
    };
    if p.step_weight <= 0.0 {
        return out;
    }
    // The nearest intents, best first (ties by id, so both ranking paths agree).
    let mut nearest: Vec<&Hit> = neighbours.iter().collect();
    nearest.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    let mut votes: FxHashMap<NameId, f64> = FxHashMap::default();
    let mut total = 0.0;
    for hit in nearest.into_iter().take(STEP_NEIGHBOURS) {
        let Some(slot) = table.row_of_intent(hit.id) else {
            continue;
        };
        let w = f64::from(hit.score).max(0.0);
        total += w;
        for &t in table.row(slot).tools.iter() {
            *votes.entry(t).or_insert(0.0) += w;
        }
    }
    // How many of each tool's name words the request names.
    let mut named: FxHashMap<NameId, usize> = FxHashMap::default();
    for word in words.iter() {
        for &t in table.tools_named_by(word) {
            *named.entry(t).or_insert(0) += 1;
        }
    }
    let mut tools: Vec<NameId> = votes.keys().chain(named.keys()).copied().collect();
    tools.sort_unstable();
    tools.dedup();
    for t in tools {
        let vote = if total > 0.0 {
            votes.get(&t).copied().unwrap_or(0.0) / total
        } else {
            0.0
        };
        let own = table.tool_words(t).len();
        let share = match named.get(&t) {
            Some(&n) if own > 0 => n as f64 / own as f64,
            _ => 0.0,
        };
        let v = vote.max(STEP_NAME_WEIGHT * share);
        if v > 0.0 {
            out.mass += v;
            out.evidence.insert(t, v);
        }
    }
    out
}

/// The floor a candidate's total must reach to still enter the top `k` capabilities
/// (docs/ranking.md, Steps, "Cost"): the `k`-th best among the best totals of the capabilities
/// ranked so far. A step factor is at most 1, so a candidate whose total before it is below the
/// floor ends below `k` capabilities that each have a better pattern: it cannot be suggested,
/// and its step factors are not computed. The floor only rises; valid only while nothing raises
/// a total after the step factor (no session transitions).
#[derive(Debug)]
pub struct TopFloor<'a> {
    k: usize,
    best: FxHashMap<&'a str, f64>,
    floor: f64,
}

impl<'a> TopFloor<'a> {
    pub fn new(k: usize) -> Self {
        TopFloor {
            k,
            best: FxHashMap::default(),
            floor: f64::NEG_INFINITY,
        }
    }

    /// A total below the floor: that candidate cannot be among the top `k`.
    pub fn excludes(&self, total: f64) -> bool {
        total < self.floor
    }

    /// A ranked candidate's final total.
    pub fn offer(&mut self, capability: &'a str, total: f64) {
        if self.k == 0 || total.is_nan() {
            return;
        }
        let best = self.best.entry(capability).or_insert(f64::NEG_INFINITY);
        if total <= *best {
            return;
        }
        *best = total;
        if self.best.len() >= self.k && total > self.floor {
            let mut totals: Vec<f64> = self.best.values().copied().collect();
            let (_, kth, _) = totals.select_nth_unstable_by(self.k - 1, |a, b| b.total_cmp(a));
            self.floor = *kth;
        }
    }
}

/// How well a candidate's tools, as the memory knows them, fit the request (docs/ranking.md,
/// Steps, "Tool profiles"): `cos(T) = sum(q . u_t, t in T) / norm(T)`, `q` the unit request
/// vector, `u_t` the tool's profile and `norm(T) = sqrt(|T| + 2 * sum over pairs of max(0,
/// u_a . u_b))`, the length the profiles add up to with their negative overlaps left out (so
/// it never shrinks when a tool is added); the factor is `1 - w + w * clamp(cos(T), 0, 1)`
/// (`Params::step_profile_weight`). A request made of the parts of k tools points to the sum of
/// their profiles: the candidate with exactly those tools fits best, one missing a tool loses
/// that tool's share, and one adding a tool the request does not point to gains nothing while
/// its norm grows. Each tool's `q . u_t` and each pair's `u_a . u_b` is computed once per
/// request.
#[derive(Debug, Clone)]
pub struct ProfileFit<'q> {
    weight: f64,
    /// The profiles read: those in `query`'s space.
    space: ProfileSpace,
    query: &'q [f32],
    length: f64,
    toward: FxHashMap<NameId, f64>,
    overlap: FxHashMap<(NameId, NameId), f64>,
}

impl<'q> ProfileFit<'q> {
    /// `weight`: `Params::step_profile_weight`, or 0 when the table's profiles are not in
    /// `query`'s space (every factor is then 1).
    pub fn new(query: &'q [f32], weight: f64) -> Self {
        Self::in_space(query, weight, ProfileSpace::Primary)
    }

    /// `new` for a `query` in `space` (the companion's: a request in another language,
    /// docs/ranking.md, Other languages).
    pub fn in_space(query: &'q [f32], weight: f64, space: ProfileSpace) -> Self {
        ProfileFit {
            weight,
            space,
            query,
            length: dot(query, query).sqrt(),
            toward: FxHashMap::default(),
            overlap: FxHashMap::default(),
        }
    }

    /// `cos(T)` of a row (None: no tools, or no profile among them).
    pub fn cosine(&mut self, table: &RankTable, row: &Row) -> Option<f64> {
        if row.tools.is_empty() || !self.length.is_normal() {
            return None;
        }
        let mut sum = 0.0;
        let mut squared = row.tools.len() as f64;
        let mut known = false;
        for (n, &a) in row.tools.iter().enumerate() {
            let Some(pa) = table.profile_in(self.space, a) else {
                continue;
            };
            known = true;
            let (query, length) = (self.query, self.length);
            sum += *self
                .toward
                .entry(a)
                .or_insert_with(|| dot(query, pa) / length);
            for &b in &row.tools[n + 1..] {
                let Some(pb) = table.profile_in(self.space, b) else {
                    continue;
                };
                squared += 2.0
                    * *self
                        .overlap
                        .entry((a, b))
                        .or_insert_with(|| dot(pa, pb).max(0.0));
            }
        }
        let cosine = sum / squared.sqrt();
        (known && cosine.is_finite()).then_some(cosine)
    }

    /// The profile factor of a row, in [1 - w, 1]: 1.0 without a cosine.
    pub fn factor(&mut self, table: &RankTable, row: &Row) -> f64 {
        if self.weight <= 0.0 {
            return 1.0;
        }
        match self.cosine(table, row) {
            Some(c) => 1.0 - self.weight + self.weight * c.clamp(0.0, 1.0),
            None => 1.0,
        }
    }
}

/// The request's parts (docs/ranking.md, Steps, "Request parts' coverage"): each part's
/// vector (pooled from the request's own model run, or embedded by the companion) and its
/// weight in the coverage, in the space the tool profiles are read in.
#[derive(Clone, Copy, Debug)]
pub struct RequestParts<'q> {
    /// `weights.len()` vectors of the query's dimension, one after the other.
    pub vectors: &'q [f32],
    pub weights: &'q [f64],
}

/// How well a candidate's tools cover each part of the request (docs/ranking.md, Steps,
/// "Request parts' coverage"): for a part `p` (a unit vector) and a tool `t` with profile
/// `u_t`, `c(p, t) = clamp(p . u_t, 0, 1)`; the part's best is `b(p) = max c(p, t)` over every
/// profiled tool of the memory, so the coverage does not depend on what retrieval kept;
/// `cover(T) = sum(w_p * max(c(p, t), t in T) / b(p)) / sum(w_p)` over the parts with
/// `b(p) > 0`, and the factor is `1 - w + w * cover(T)` (`Params::step_coverage_weight`). A
/// candidate missing a part's tool loses that part's share; adding a tool never lowers it.
/// 1.0 for a request of fewer than two parts, a pattern without profiled tools, or `w` = 0.
#[derive(Debug, Clone)]
pub struct PartCoverage {
    weight: f64,
    /// Per part (those with a direction and a weight above 0): its weight and its best cosine
    /// over every tool, `b(p)`.
    parts: Vec<(f64, f64)>,
    /// `c(p, t)` per tool, for every part, computed once per request.
    toward: FxHashMap<NameId, Vec<f64>>,
}

impl PartCoverage {
    /// The coverage of a request's `parts` (None or fewer than two: every factor is 1) over
    /// `table`'s profiles in `space`.
    pub fn new(
        table: &RankTable,
        space: ProfileSpace,
        parts: Option<RequestParts<'_>>,
        dim: usize,
        weight: f64,
    ) -> Self {
        let mut out = PartCoverage {
            weight,
            parts: Vec::new(),
            toward: FxHashMap::default(),
        };
        let Some(parts) = parts.filter(|p| p.weights.len() >= 2 && dim > 0) else {
            return out;
        };
        if weight <= 0.0 {
            return out;
        }
        let mut kept: Vec<(Vec<f32>, f64)> = Vec::with_capacity(parts.weights.len());
        for (vector, &w) in parts.vectors.chunks_exact(dim).zip(parts.weights) {
            let length = dot(vector, vector).sqrt();
            if length.is_normal() && w > 0.0 {
                kept.push((
                    vector
                        .iter()
                        .map(|&x| (f64::from(x) / length) as f32)
                        .collect(),
                    w,
                ));
            }
        }
        if kept.len() < 2 {
            return out;
        }
        let mut best = vec![0.0f64; kept.len()];
        for (tool, profile) in table.profiles_of(space) {
            let toward: Vec<f64> = kept
                .iter()
                .map(|(v, _)| dot(v, profile).clamp(0.0, 1.0))
                .collect();
            for (b, &c) in best.iter_mut().zip(&toward) {
                *b = b.max(c);
            }
            out.toward.insert(tool, toward);
        }
        out.parts = kept.into_iter().map(|(_, w)| w).zip(best).collect();
        out
    }

    /// `cover(T)` of a row (None: no parts, or none of its tools has a profile).
    pub fn cover(&self, row: &Row) -> Option<f64> {
        if self.parts.is_empty() {
            return None;
        }
        let known: Vec<&Vec<f64>> = row
            .tools
            .iter()
            .filter_map(|t| self.toward.get(t))
            .collect();
        if known.is_empty() {
            return None;
        }
        let (mut sum, mut total) = (0.0, 0.0);
        for (n, &(w, best)) in self.parts.iter().enumerate() {
            if best <= 0.0 {
                continue; // no tool of the memory points to this part
            }
            let got = known.iter().map(|c| c[n]).fold(0.0, f64::max);
            sum += w * (got / best);
            total += w;
        }
        (total > 0.0).then(|| (sum / total).min(1.0))
    }

    /// The coverage factor of a row, in [1 - w, 1].
    pub fn factor(&self, row: &Row) -> f64 {
        if self.weight <= 0.0 {
            return 1.0;
        }
        match self.cover(row) {
            Some(c) => 1.0 - self.weight + self.weight * c,
            None => 1.0,
        }
    }
}

/// The step factor of one request, each part computed once (docs/ranking.md, Steps): the
/// neighbour vote's Dice fit times the tool profiles' fit, gated by the request's expected
/// step count, times the request parts' coverage and the order fit, each gated alike. A shut
/// gate gives exactly 1.
pub struct StepFit<'q, 'w> {
    pub evidence: StepEvidence,
    pub profiles: ProfileFit<'q>,
    pub coverage: PartCoverage,
    pub gate: f64,
    words: &'w RequestWords,
    order_weight: f64,
}

impl<'q, 'w> StepFit<'q, 'w> {
    /// The fits of a request whose `STEP_NEIGHBOURS` nearest intents are `neighbours`, whose
    /// analysed words are `words`, whose tools' profiles are read by `profiles` and whose parts
    /// (in the same space) are `parts`; the gate from the neighbours' expected step count.
    pub fn new(
        table: &RankTable,
        neighbours: &[Hit],
        words: &'w RequestWords,
        params: &Params,
        profiles: ProfileFit<'q>,
        parts: Option<RequestParts<'_>>,
    ) -> Self {
        let gate = step_gate(expected_steps(table, neighbours), params);
        // a shut gate gives every factor 1: the parts are not read
        let coverage_weight = if gate > 0.0 {
            params.step_coverage_weight
        } else {
            0.0
        };
        StepFit {
            evidence: step_evidence(table, neighbours, words, params),
            coverage: PartCoverage::new(
                table,
                profiles.space,
                parts,
                profiles.query.len(),
                coverage_weight,
            ),
            profiles,
            gate,
            words,
            order_weight: params.step_order_weight,
        }
    }

    /// Any factor below 1 at all (a shut gate: none).
    pub fn applies(&self) -> bool {
        self.gate > 0.0
    }

    /// The factor of a row (`ScoreParts::steps`).
    pub fn factor(&mut self, table: &RankTable, row: &Row) -> f64 {
        if !self.applies() {
            return 1.0;
        }
        let fit = self.evidence.factor(&row.tools) * self.profiles.factor(table, row);
        let mut steps = gated_step(fit, self.gate);
        if self.coverage.weight > 0.0 {
            steps *= gated_step(self.coverage.factor(row), self.gate);
        }
        if self.order_weight > 0.0 {
            steps *= gated_step(
                order_factor(table, row, self.words, self.order_weight),
                self.gate,
            );
        }
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Params as IndexParams;

    /// A few thousand pseudo-random vectors, some removed (tombstones the walk skips).
    fn index(n: u64, dim: usize) -> HnswIndex {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut unit = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let data: Vec<f32> = (0..n as usize * dim).map(|_| unit()).collect();
        let ids: Vec<u64> = (0..n).collect();
        let mut ann = HnswIndex::new(dim, IndexParams::default()).unwrap();
        ann.add(&ids, &data).unwrap();
        let gone: Vec<u64> = (0..n).step_by(7).collect();
        ann.remove(&gone);
        ann
    }

    /// Reusing the retrieval's hits gives exactly the neighbours a search of their own finds,
    /// whatever the retrieval asked for (within the beam it reuses, beyond it it searches).
    #[test]
    fn step_neighbours_are_a_search_of_their_own() {
        let dim = 16;
        let ann = index(2000, dim);
        for q in 0..40u32 {
            let query: Vec<f32> = (0..dim)
                .map(|d| ((q as usize * 31 + d * 17) % 23) as f32 - 11.0)
                .collect();
            let own = ann.search(&query, STEP_NEIGHBOURS, None, None).unwrap();
            assert_eq!(own.len(), STEP_NEIGHBOURS);
            for searched in [1, 5, 10, 11, 40, 64, 65, 200] {
                let found = ann.search(&query, searched, None, None).unwrap();
                let got = step_neighbours(&ann, &query, &found, Some(searched)).unwrap();
                assert_eq!(got, own, "searched {searched}");
            }
            // among an allow-list: the retrieval's hits are not the whole memory's
            let allowed: Vec<u64> = (0..2000).step_by(3).collect();
            let found = ann.search(&query, 40, None, Some(&allowed)).unwrap();
            let got = step_neighbours(&ann, &query, &found, None).unwrap();
            assert_eq!(got, own);
        }
    }

    #[test]
    fn the_floor_is_the_kth_best_capability() {
        let mut floor = TopFloor::new(2);
        floor.offer("a", 0.9);
        floor.offer("a", 0.95);
        assert!(!floor.excludes(0.0), "one capability: no floor yet");
        floor.offer("b", 0.5);
        assert!(floor.excludes(0.49) && !floor.excludes(0.5));
        floor.offer("b", 0.4); // not its best
        floor.offer("c", 0.7);
        assert!(floor.excludes(0.69) && !floor.excludes(0.7));
        let mut none = TopFloor::new(0);
        none.offer("a", 1.0);
        assert!(!none.excludes(-1.0));
    }

    /// A memory of many patterns over a few tools, capabilities of one to three patterns, the
    /// profiles summed; `(table, ann, lexical)`.
    fn memory() -> (RankTable, HnswIndex, crate::lexical::LexicalIndex) {
        let dim = 16;
        let ann = index(600, dim);
        let mut lexical = crate::lexical::LexicalIndex::new(1.2, 0.75).unwrap();
        let mut table = RankTable::new();
        for id in (0..600u64).filter(|i| i % 7 != 0) {
            let n = id / 3; // three intents a pattern
            let pattern = format!("p{n}");
            table.link_intent(id, &pattern);
            let tools: Vec<String> = (0..1 + n % 3)
                .map(|s| format!("tool_{}", (n * 5 + s * 11) % 13))
                .collect();
            let words: Vec<Vec<String>> = tools.iter().map(|t| vec![t.clone()]).collect();
            table.set_pattern(
                &pattern,
                &format!("c{}", n / 2),
                &tools,
                &words,
                false,
                false,
            );
            table.set_counters(&pattern, (n % 5) as i64, (n % 3) as i64, 4, 0, &[]);
            lexical.add_terms(&pattern, &tools).unwrap();
        }
        table.refresh_profiles(&ann);
        (table, ann, lexical)
    }

    /// The top k are the first k of the whole ranking: the candidates left out below the floor
    /// would not have been suggested (docs/ranking.md, Steps, "Cost").
    #[test]
    fn the_floor_never_changes_the_top_k() {
        use super::super::query::{rank_retrieved, retrieve, Filters};
        use super::super::space::Space;
        let (table, ann, lexical) = memory();
        let words = RequestWords::new(vec!["tool_3".to_string()], false);
        let terms = vec!["tool_3".to_string(), "tool_7".to_string()];
        // the default weights (factors far below 1), and tiny ones (factors near 1, so many
        // candidates end near the floor)
        for weight in [None, Some(0.01)] {
            let params = Params {
                step_gate: 0.0,
                step_weight: weight.unwrap_or(Params::default().step_weight),
                step_profile_weight: weight.unwrap_or(Params::default().step_profile_weight),
                ..Params::default()
            };
            for q in 0..30u32 {
                let query: Vec<f32> = (0..16)
                    .map(|d| ((q as usize * 13 + d * 7) % 19) as f32 - 9.0)
                    .collect();
                let space = Space::one(&ann, &query);
                let found = retrieve(&space, &lexical, &terms, 80).unwrap();
                let rank = |k, explain| {
                    rank_retrieved(
                        &table,
                        &space,
                        &found,
                        k,
                        &Filters::default(),
                        &params,
                        0,
                        &words,
                        explain,
                    )
                    .unwrap()
                    .suggestions
                };
                let all = rank(10_000, false);
                assert!(all.len() > 8, "{}", all.len());
                assert!(all.iter().any(|r| r.parts.steps < 1.0));
                for k in [1, 2, 3, 5, 8] {
                    assert_eq!(rank(k, false), all[..k], "k {k}");
                    // explain scores every candidate (no floor): the same suggestions
                    assert_eq!(rank(k, true), all[..k], "explain, k {k}");
                }
            }
        }
    }

    #[test]
    fn step_neighbours_of_a_small_memory_are_all_of_it() {
        let ann = index(6, 4);
        let query = [1.0, 0.5, 0.0, -0.5];
        let found = ann.search(&query, 40, None, None).unwrap();
        let got = step_neighbours(&ann, &query, &found, Some(40)).unwrap();
        assert_eq!(got.len(), ann.len());
        assert_eq!(
            got,
            ann.search(&query, STEP_NEIGHBOURS, None, None).unwrap()
        );
        let empty = HnswIndex::new(4, IndexParams::default()).unwrap();
        assert!(step_neighbours(&empty, &query, &[], Some(40))
            .unwrap()
            .is_empty());
    }
}

#[cfg(test)]
mod order_tests {
    use super::*;

    fn words(text: &str) -> RequestWords {
        RequestWords::new(text.split_whitespace().map(str::to_string).collect(), true)
    }

    /// A table of one pattern `p` running `tools` (each tool's name words: its `_` pieces).
    fn pattern(tools: &[&str]) -> RankTable {
        let mut table = RankTable::new();
        let names: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
        let tool_words: Vec<Vec<String>> = names
            .iter()
            .map(|t| t.split('_').map(str::to_string).collect())
            .collect();
        table.set_pattern("p", "c", &names, &tool_words, false, false);
        table
    }

    fn factor(tools: &[&str], text: &str) -> f64 {
        let table = pattern(tools);
        let slot = table.row_of_pattern("p").unwrap();
        order_factor(&table, table.row(slot), &words(text), 0.2)
    }

    /// docs/ranking.md, Steps, "Order of the steps"
    #[test]
    fn the_steps_run_in_the_order_the_request_names_them_cost_nothing() {
        let asked = "find best offer and review for headphones";
        assert_eq!(
            factor(
                &["product_search", "product_offer", "product_review"],
                asked
            ),
            1.0
        );
        assert!(
            (factor(
                &["product_search", "product_review", "product_offer"],
                asked
            ) - 0.8)
                .abs()
                < 1e-12
        );
        // a word every tool shares ("product") places none of them
        assert_eq!(
            factor(&["product_offer", "product_review"], "product only"),
            1.0
        );
        // one named tool, or none: no pair to judge
        assert_eq!(factor(&["product_offer", "product_review"], "offer"), 1.0);
        assert_eq!(factor(&["flight", "hotel"], "nothing named"), 1.0);
        // a tool run twice counts at its first run
        assert_eq!(
            factor(
                &["airport", "airport", "flight", "hotel"],
                "flight then hotel"
            ),
            1.0
        );
        // half the pairs in the other order: half the weight
        let half = factor(&["a_x", "b_y", "c_z"], "y x z");
        assert!((half - (1.0 - 0.2 / 3.0)).abs() < 1e-12, "{half}");
    }

    #[test]
    fn the_order_factor_stays_in_its_bounds_and_is_off_at_weight_0() {
        let tools = ["a_one", "b_two", "c_three", "d_four"];
        let table = pattern(&tools);
        let row = table.row(table.row_of_pattern("p").unwrap());
        for text in [
            "four three two one",
            "one two three four",
            "two one four three",
        ] {
            let f = order_factor(&table, row, &words(text), 0.2);
            assert!((0.8..=1.0).contains(&f), "{text}: {f}");
            assert_eq!(order_factor(&table, row, &words(text), 0.0), 1.0);
        }
        assert!((order_factor(&table, row, &words("four three two one"), 0.2) - 0.8).abs() < 1e-12);
    }
}
