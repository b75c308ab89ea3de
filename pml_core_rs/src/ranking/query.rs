//! One Suggest query ranked in the core: retrieval (vector and lexical, over-fetched), the
//! best cosine of each retrieved pattern over all its intents, the formula, the filters,
//! grouping by capability and the top k, all from the ranking table, without the store.
//!
//! The answer is that of the tests' Python oracle, `testing.ranking_oracle.rank`, over the
//! candidates its `path.retrieve` builds: the same hits, the same float operations, the same
//! order (total, match, success descending, then capability id and pattern id), and with
//! `explain` the same filtered candidates with the same rules and details. The service ranks
//! here alone (docs/ranking.md, Pipeline).

use std::cmp::Ordering;
use std::collections::HashSet;

use rustc_hash::{FxHashMap, FxHashSet};

use super::formula::{pattern_semantic, score, score_next, with_transition, Params, ScoreParts};
use super::space::{profile_weight, Space};
use super::steps::{step_neighbours, ProfileFit, RequestWords, StepFit, TopFloor, STEP_NEIGHBOURS};
use super::table::{NameId, RankTable};
use crate::error::CoreResult;
use crate::index::{Hit, EXACT_SCAN_MIN};
use crate::lexical::LexicalIndex;

/// The request's filters, resolved against the server defaults (`ranking.FilterSettings`).
#[derive(Clone, Debug, Default)]
pub struct Filters {
    pub min_match: f64,
    pub min_success: f64,
    pub include_flagged: bool,
    /// None: no restriction; Some(empty): only tool-less patterns.
    pub available_tools: Option<Vec<String>>,
    /// All required.
    pub tags: Vec<String>,
    /// Not a filter: the session signal's factor of each capability that usually follows the
    /// agent's previous step (docs/ranking.md, Sessions); empty without a context.
    pub transitions: FxHashMap<String, f64>,
}

impl Filters {
    /// Every filter but `min_match`, no session factors: what comes next has no match to hold
    /// to it, and the context filters' allow-list is drawn before any match is known.
    pub fn without_match(
        min_success: f64,
        include_flagged: bool,
        available_tools: Option<Vec<String>>,
        tags: Vec<String>,
    ) -> Self {
        Filters {
            min_match: 0.0,
            min_success,
            include_flagged,
            available_tools,
            tags,
            transitions: FxHashMap::default(),
        }
    }
}

/// One suggestion: its pattern, capability and score parts (the view, with the intents it
/// shows, is read afterwards: docs/capture.md, The intents a view shows).
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    pub pattern_id: String,
    pub capability_id: String,
    pub parts: ScoreParts,
}

/// What retrieval found before the table is read.
pub struct Retrieved {
    pub semantic: Vec<Hit>,
    pub lexical: Vec<(String, f64)>,
    /// How many hits the unrestricted vector search behind `semantic` asked for (None: it
    /// searched among an allow-list), so the step fit can reuse its nearest hits
    /// (`steps::step_neighbours`).
    pub searched: Option<usize>,
}

/// Both index searches, each for `limit` hits (the oracle's `path.retrieve`).
pub fn retrieve(
    space: &Space<'_>,
    lexical: &LexicalIndex,
    terms: &[String],
    limit: usize,
) -> CoreResult<Retrieved> {
    Ok(Retrieved {
        semantic: space.nearest(limit)?,
        lexical: lexical_hits(lexical, terms, limit),
        searched: Some(limit),
    })
}

/// The `limit` best pattern documents for the query's distinct terms.
pub fn lexical_hits(lexical: &LexicalIndex, terms: &[String], limit: usize) -> Vec<(String, f64)> {
    if limit == 0 {
        return Vec::new();
    }
    lexical.search(terms, limit)
}

/// The request's filters as interned ids of `table`.
struct Resolved {
    available: Option<HashSet<NameId>>,
    /// A requested tag no row ever had: no pattern can pass.
    tags: Option<Vec<NameId>>,
}

fn resolve(table: &RankTable, filters: &Filters) -> Resolved {
    let available = filters
        .available_tools
        .as_ref()
        .map(|tools| table.tool_ids(tools).into_iter().collect());
    let tags = filters
        .tags
        .iter()
        .map(|t| table.name_id(t))
        .collect::<Option<Vec<NameId>>>();
    Resolved { available, tags }
}

/// The order of `rank._order`: total, match, success descending, then ids ascending.
fn best_first(a: &Candidate<'_>, b: &Candidate<'_>) -> Ordering {
    let desc = |x: f64, y: f64| y.partial_cmp(&x).unwrap_or(Ordering::Equal);
    desc(a.parts.total, b.parts.total)
        .then_with(|| desc(a.parts.matched, b.parts.matched))
        .then_with(|| desc(a.parts.success, b.parts.success))
        .then_with(|| a.capability.cmp(b.capability))
        .then_with(|| a.pattern_id.cmp(b.pattern_id))
}

/// The filter rules of `ranking_oracle.filters.RULES` (`pml_server.ranking.settings.RULES`), in their order (the first one failed names
/// why a candidate is left out), and the two reasons `explain` gives for a passing one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    FlaggedForRemoval,
    AvailableTools,
    Tags,
    MinMatch,
    MinSuccess,
    /// A better pattern represents its capability.
    SameCapability,
    /// It ranked after the k-th suggestion.
    BeyondK,
}

impl Rule {
    /// The rule's name in the API (`FilteredCandidate.rule`).
    pub fn name(self) -> &'static str {
        match self {
            Rule::FlaggedForRemoval => "flagged_for_removal",
            Rule::AvailableTools => "available_tools",
            Rule::Tags => "tags",
            Rule::MinMatch => "min_match",
            Rule::MinSuccess => "min_success",
            Rule::SameCapability => "same_capability",
            Rule::BeyondK => "beyond_k",
        }
    }
}

/// One scored candidate: its table row, score parts and the first filter it fails.
pub struct Candidate<'t> {
    pub slot: u32,
    pub pattern_id: &'t str,
    pub capability: &'t str,
    pub parts: ScoreParts,
    pub failed: Option<Rule>,
}

/// A candidate `explain` lists besides the suggestions, with its rule, a human-readable
/// detail (the words of `ranking_oracle.filters`) and its score parts.
#[derive(Clone, Debug, PartialEq)]
pub struct Filtered {
    pub pattern_id: String,
    pub capability_id: String,
    pub rule: Rule,
    pub detail: String,
    pub parts: ScoreParts,
}

/// The answer: the top k, and with `explain` every other candidate with its rule.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ranking {
    pub suggestions: Vec<Ranked>,
    pub filtered: Vec<Filtered>,
}

/// Every retrieved pattern that can be ranked, scored by the formula (the session signal
/// multiplied in), with the first filter it fails; with `top_k`, only those that can still be
/// among the top k capabilities (`steps::TopFloor`).
#[allow(clippy::too_many_arguments)]
pub fn score_retrieved<'t>(
    table: &'t RankTable,
    space: &Space<'_>,
    found: &Retrieved,
    filters: &Filters,
    params: &Params,
    now_ms: i64,
    words: &RequestWords,
    top_k: Option<usize>,
) -> CoreResult<Vec<Candidate<'t>>> {
    // The retrieved patterns, in first-seen order, and the cosines the ANN returned (the first
    // of an intent found twice: explain's two retrievals score it alike).
    let mut slots: Vec<u32> = Vec::new();
    // Keyed by table slots and engine-assigned intent ids: the fast Fx hash.
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut cosine: FxHashMap<u64, f32> =
        FxHashMap::with_capacity_and_hasher(found.semantic.len(), Default::default());
    for hit in &found.semantic {
        cosine.entry(hit.id).or_insert(hit.score);
        if let Some(slot) = table.row_of_intent(hit.id) {
            if seen.insert(slot) {
                slots.push(slot);
            }
        }
    }
    let mut bm25: FxHashMap<u32, f64> =
        FxHashMap::with_capacity_and_hasher(found.lexical.len(), Default::default());
    for (pattern_id, value) in &found.lexical {
        if let Some(slot) = table.row_of_pattern(pattern_id) {
            bm25.entry(slot).or_insert(*value);
            if seen.insert(slot) {
                slots.push(slot);
            }
        }
    }
    slots.retain(|&s| table.row(s).is_rankable());
    // Exact cosines of the retrieved patterns' other intents, as the oracle's Python path asks them.
    let unscored: Vec<u64> = slots
        .iter()
        .flat_map(|&s| table.row(s).intents.iter().copied())
        .filter(|i| !cosine.contains_key(i))
        .collect();
    for chunk in unscored.chunks(EXACT_SCAN_MIN) {
        for hit in space.among(chunk.len(), chunk)? {
            cosine.insert(hit.id, hit.score);
        }
    }
    let resolved = resolve(table, filters);
    let neighbours = if params.step_weight > 0.0 {
        match space.foreign {
            // the retrieval's own search may hold them (docs/ranking.md, Steps, "Cost")
            None => step_neighbours(space.ann, space.query, &found.semantic, found.searched)?,
            Some(_) => space.nearest(STEP_NEIGHBOURS)?,
        }
    } else {
        Vec::new()
    };
    // the step factor's three fits, each computed once for the request (docs/ranking.md,
    // Steps); the tool profiles of the query's space (docs/ranking.md, Other languages)
    let (set, toward) = space.profiles();
    let mut steps = StepFit::new(
        table,
        &neighbours,
        words,
        params,
        ProfileFit::in_space(toward, profile_weight(set, params.step_profile_weight), set),
        space.parts,
    );
    // Only the top k wanted (no explain, no session factor raising a total after the step
    // factor): a candidate that cannot enter it is left out before its step factors
    // (docs/ranking.md, Steps, "Cost").
    let mut floor = top_k
        .filter(|_| filters.transitions.is_empty())
        .map(TopFloor::new);
    let mut scored = Vec::with_capacity(slots.len());
    for &slot in &slots {
        let row = table.row(slot);
        let mut cosines: Vec<f64> = row
            .intents
            .iter()
            .filter_map(|i| cosine.get(i))
            .map(|&c| f64::from(c))
            .collect();
        let Some(semantic) = pattern_semantic(&mut cosines) else {
            continue; // no intent left in the vector index: deleted since it answered
        };
        let lexical = bm25.get(&slot).copied().unwrap_or(0.0);
        // total * steps is the bits `score` gives with the factor inside (its product runs
        // left to right, the factor last); both step factors, gated together
        // (docs/ranking.md, Steps, "Tool profiles"); a shut gate gives exactly 1 whatever the
        // factors, so they are not computed
        let mut parts = score(semantic, lexical, &row.counts, params, now_ms, 1.0);
        // the filters read neither the total nor the steps
        let failed = first_failed_rule(row, &parts, &resolved, filters);
        if let Some(floor) = &floor {
            if failed.is_some() || floor.excludes(parts.total) {
                continue;
            }
        }
        if steps.applies() {
            let factor = steps.factor(table, row);
            parts.total *= factor;
            parts.steps = factor;
        }
        let capability = row.capability.as_deref().unwrap_or_default();
        // no context (the usual request): not even a hash per candidate
        if !filters.transitions.is_empty() {
            if let Some(&factor) = filters.transitions.get(capability) {
                parts = with_transition(parts, factor);
            }
        }
        if let Some(floor) = &mut floor {
            floor.offer(capability, parts.total);
        }
        scored.push(Candidate {
            slot,
            pattern_id: &row.pattern_id,
            capability,
            parts,
            failed,
        });
    }
    Ok(scored)
}

/// The top `k` capabilities, each represented by its best passing pattern; with `explain`,
/// also every other candidate with its rule (every candidate scored: no top-k floor).
#[allow(clippy::too_many_arguments)]
pub fn rank_retrieved(
    table: &RankTable,
    space: &Space<'_>,
    found: &Retrieved,
    k: usize,
    filters: &Filters,
    params: &Params,
    now_ms: i64,
    words: &RequestWords,
    explain: bool,
) -> CoreResult<Ranking> {
    let top_k = (!explain).then_some(k);
    let scored = score_retrieved(table, space, found, filters, params, now_ms, words, top_k)?;
    Ok(order(table, scored, k, filters, explain))
}

/// What usually comes next (a request without an intent, docs/ranking.md, Sessions): the
/// rankable patterns among `pattern_ids` (each once), scored by `weight` (the transition's
/// relative likelihood of its capability, 0 for another) times the counters' factors, with
/// every filter but `min_match` (there is no match: it is 0). `ordering.rank_next`.
#[allow(clippy::too_many_arguments)]
pub fn rank_next(
    table: &RankTable,
    pattern_ids: &[String],
    weights: &FxHashMap<String, f64>,
    k: usize,
    filters: &Filters,
    params: &Params,
    now_ms: i64,
    explain: bool,
) -> Ranking {
    let filters = Filters {
        min_match: 0.0,
        transitions: FxHashMap::default(),
        ..filters.clone()
    };
    let resolved = resolve(table, &filters);
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut scored = Vec::new();
    for pattern_id in pattern_ids {
        let Some(slot) = table.row_of_pattern(pattern_id) else {
            continue; // deleted since
        };
        let row = table.row(slot);
        if !row.is_rankable() || !seen.insert(slot) {
            continue;
        }
        let capability = row.capability.as_deref().unwrap_or_default();
        let weight = weights.get(capability).copied().unwrap_or(0.0);
        let parts = score_next(&row.counts, params, now_ms, weight);
        let failed = first_failed_rule(row, &parts, &resolved, &filters);
        scored.push(Candidate {
            slot,
            pattern_id: &row.pattern_id,
            capability,
            parts,
            failed,
        });
    }
    order(table, scored, k, &filters, explain)
}

/// Filter, group by capability, keep the top `k` (`ordering.rank_scored`); with `explain`,
/// every other candidate in `filtered`: those failing a filter and those whose capability a
/// better pattern represents, in score order, then the capabilities beyond the k-th.
fn order(
    table: &RankTable,
    mut scored: Vec<Candidate<'_>>,
    k: usize,
    filters: &Filters,
    explain: bool,
) -> Ranking {
    if !explain {
        scored.retain(|c| c.failed.is_none());
    }
    scored.sort_by(best_first);
    // Bounded by the retrieved candidates (two fetch limits), so Fx's weak mixing costs nothing.
    let mut chosen: FxHashMap<&str, &str> = FxHashMap::default();
    let mut out = Ranking::default();
    let mut beyond = Vec::new();
    for candidate in &scored {
        let rule = match candidate.failed {
            Some(rule) => Some(rule),
            None if chosen.contains_key(candidate.capability) => Some(Rule::SameCapability),
            None => None,
        };
        match rule {
            None => {
                chosen.insert(candidate.capability, candidate.pattern_id);
                if out.suggestions.len() < k {
                    out.suggestions.push(Ranked {
                        pattern_id: candidate.pattern_id.to_owned(),
                        capability_id: candidate.capability.to_owned(),
                        parts: candidate.parts,
                    });
                } else if explain {
                    beyond.push(candidate);
                } else {
                    break;
                }
            }
            Some(rule) if explain => {
                let detail = match rule {
                    Rule::SameCapability => format!(
                        "capability represented by pattern {}",
                        chosen[candidate.capability]
                    ),
                    _ => detail(
                        table.row(candidate.slot),
                        table,
                        &candidate.parts,
                        rule,
                        filters,
                    ),
                };
                out.filtered.push(filtered(candidate, rule, detail));
            }
            Some(_) => {}
        }
    }
    for (n, candidate) in beyond.into_iter().enumerate() {
        let detail = format!("ranked {}, after the k={k} suggestions", k + n + 1);
        out.filtered
            .push(filtered(candidate, Rule::BeyondK, detail));
    }
    out
}

fn filtered(candidate: &Candidate<'_>, rule: Rule, detail: String) -> Filtered {
    Filtered {
        pattern_id: candidate.pattern_id.to_owned(),
        capability_id: candidate.capability.to_owned(),
        rule,
        detail,
        parts: candidate.parts,
    }
}

/// The first rule of `ranking_oracle.filters.RULES` (`pml_server.ranking.settings.RULES`) a candidate fails: flagged, available tools,
/// tags, match, success.
fn first_failed_rule(
    row: &super::table::Row,
    parts: &ScoreParts,
    resolved: &Resolved,
    filters: &Filters,
) -> Option<Rule> {
    if row.flagged && !filters.include_flagged {
        return Some(Rule::FlaggedForRemoval);
    }
    if let Some(available) = &resolved.available {
        if row.tools.iter().any(|t| !available.contains(t)) {
            return Some(Rule::AvailableTools);
        }
    }
    match &resolved.tags {
        None => return Some(Rule::Tags),
        Some(tags) => {
            if tags.iter().any(|t| row.tags.binary_search(t).is_err()) {
                return Some(Rule::Tags);
            }
        }
    }
    if parts.matched < filters.min_match {
        return Some(Rule::MinMatch);
    }
    if parts.success < filters.min_success {
        return Some(Rule::MinSuccess);
    }
    None
}

/// Why a candidate failed a filter, in the words of `ranking_oracle.filters` (`explain`).
fn detail(
    row: &super::table::Row,
    table: &RankTable,
    parts: &ScoreParts,
    rule: Rule,
    filters: &Filters,
) -> String {
    match rule {
        Rule::FlaggedForRemoval => {
            "pattern is flagged for removal (include_flagged is off)".to_owned()
        }
        Rule::AvailableTools => {
            let available: HashSet<&str> = filters
                .available_tools
                .iter()
                .flatten()
                .map(String::as_str)
                .collect();
            let mut missing: Vec<&str> = row
                .tools
                .iter()
                .map(|&t| table.name(t))
                .filter(|t| !available.contains(t))
                .collect();
            missing.sort_unstable();
            missing.dedup();
            format!(
                "needs tools the caller cannot reach: {}",
                missing.join(", ")
            )
        }
        Rule::Tags => {
            let mut missing: Vec<&str> = filters
                .tags
                .iter()
                .filter(|t| {
                    table
                        .name_id(t)
                        .map_or(true, |id| row.tags.binary_search(&id).is_err())
                })
                .map(String::as_str)
                .collect();
            missing.sort_unstable();
            missing.dedup();
            format!("lacks requested tags: {}", missing.join(", "))
        }
        Rule::MinMatch => format!(
            "match {:.3} < min_match {:.3}",
            parts.matched, filters.min_match
        ),
        Rule::MinSuccess => {
            let (s, f) = (row.counts.successes, row.counts.failures);
            format!(
                "success estimate {:.3} ({s} of {} tries) < min_success {:.3}",
                parts.success,
                s + f,
                filters.min_success
            )
        }
        Rule::SameCapability | Rule::BeyondK => String::new(),
    }
}
