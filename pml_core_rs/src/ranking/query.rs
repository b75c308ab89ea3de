//! One Suggest query ranked in the core: retrieval (vector and lexical, over-fetched), the
//! best cosine of each retrieved pattern over all its intents, the formula, the filters,
//! grouping by capability and the top k, all from the ranking table, without the store.
//!
//! The answer is that of `pml_server.ranking.rank` over the candidates
//! `pml_server.service._suggest.retrieve` builds: the same hits, the same float operations,
//! the same order (total, match, success descending, then capability id and pattern id).

use std::cmp::Ordering;
use std::collections::HashSet;

use rustc_hash::{FxHashMap, FxHashSet};

use super::formula::{
    gated_step, pattern_semantic, score, step_gate, with_transition, Params, ScoreParts,
};
use super::steps::{step_evidence, step_neighbours, ProfileFit, TopFloor, STEP_NEIGHBOURS};
use super::table::{NameId, RankTable};
use crate::error::CoreResult;
use crate::index::{Hit, HnswIndex, EXACT_SCAN_MIN};
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

/// One suggestion: its pattern, capability, score parts and the intents the index holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    pub pattern_id: String,
    pub capability_id: String,
    pub parts: ScoreParts,
    pub intent_ids: Vec<u64>,
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

/// Both index searches, each for `limit` hits (`service._suggest.retrieve`).
pub fn retrieve(
    ann: &HnswIndex,
    lexical: &LexicalIndex,
    query: &[f32],
    terms: &[String],
    limit: usize,
) -> CoreResult<Retrieved> {
    Ok(Retrieved {
        semantic: semantic_hits(ann, query, limit)?,
        lexical: lexical_hits(lexical, terms, limit),
        searched: Some(limit),
    })
}

/// The `limit` nearest intents (fewer when the index holds fewer).
pub fn semantic_hits(ann: &HnswIndex, query: &[f32], limit: usize) -> CoreResult<Vec<Hit>> {
    let size = ann.len();
    if size == 0 || limit == 0 {
        return Ok(Vec::new());
    }
    ann.search(query, limit.min(size), None, None)
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
        .map(|tools| tools.iter().filter_map(|t| table.name_id(t)).collect());
    let tags = filters
        .tags
        .iter()
        .map(|t| table.name_id(t))
        .collect::<Option<Vec<NameId>>>();
    Resolved { available, tags }
}

/// The order of `rank._order`: total, match, success descending, then ids ascending.
fn best_first(a: &(ScoreParts, &str, &str), b: &(ScoreParts, &str, &str)) -> Ordering {
    let desc = |x: f64, y: f64| y.partial_cmp(&x).unwrap_or(Ordering::Equal);
    desc(a.0.total, b.0.total)
        .then_with(|| desc(a.0.matched, b.0.matched))
        .then_with(|| desc(a.0.success, b.0.success))
        .then_with(|| a.1.cmp(b.1))
        .then_with(|| a.2.cmp(b.2))
}

/// The top `k` capabilities, each represented by its best passing pattern.
#[allow(clippy::too_many_arguments)]
pub fn rank_retrieved(
    table: &RankTable,
    ann: &HnswIndex,
    query: &[f32],
    found: &Retrieved,
    k: usize,
    filters: &Filters,
    params: &Params,
    now_ms: i64,
    words: &FxHashSet<String>,
) -> CoreResult<Vec<Ranked>> {
    // The retrieved patterns, in first-seen order, and the cosines the ANN returned.
    let mut slots: Vec<u32> = Vec::new();
    // Keyed by table slots and engine-assigned intent ids: the fast Fx hash.
    let mut seen: FxHashSet<u32> = FxHashSet::default();
    let mut cosine: FxHashMap<u64, f32> =
        FxHashMap::with_capacity_and_hasher(found.semantic.len(), Default::default());
    for hit in &found.semantic {
        cosine.insert(hit.id, hit.score);
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
            bm25.insert(slot, *value);
            if seen.insert(slot) {
                slots.push(slot);
            }
        }
    }
    slots.retain(|&s| table.row(s).is_rankable());
    // Exact cosines of the retrieved patterns' other intents, as the Python path asks them.
    let unscored: Vec<u64> = slots
        .iter()
        .flat_map(|&s| table.row(s).intents.iter().copied())
        .filter(|i| !cosine.contains_key(i))
        .collect();
    for chunk in unscored.chunks(EXACT_SCAN_MIN) {
        for hit in ann.search(query, chunk.len(), None, Some(chunk))? {
            cosine.insert(hit.id, hit.score);
        }
    }
    let resolved = resolve(table, filters);
    let neighbours = if params.step_weight > 0.0 {
        step_neighbours(ann, query, &found.semantic, found.searched)?
    } else {
        Vec::new()
    };
    let evidence = step_evidence(table, &neighbours, words, params);
    let gate = step_gate(expected_steps(table, &neighbours), params);
    let mut profiles = ProfileFit::new(query, params);
    let mut floor = TopFloor::new(k);
    let mut passing: Vec<(ScoreParts, &str, &str)> = Vec::new();
    // Bounded by the retrieved candidates (two fetch limits), so Fx's weak mixing costs nothing.
    let mut slot_of: FxHashMap<&str, u32> = FxHashMap::default();
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
        // The filters read neither the total nor the steps: a candidate they remove costs no
        // step factor. total * steps is the bits `score` gives with the factor inside (its
        // product runs left to right, the factor last).
        let mut parts = score(semantic, lexical, &row.counts, params, now_ms, 1.0);
        if !passes(row, &parts, &resolved, filters) {
            continue;
        }
        // a candidate that cannot enter the top k is not suggested: its step factors are
        // skipped (docs/ranking.md, Steps, "Cost")
        if filters.transitions.is_empty() && floor.excludes(parts.total) {
            continue;
        }
        // both step factors, gated together (docs/ranking.md, Steps, "Tool profiles"); a shut
        // gate gives exactly 1 whatever the factors, so they are not computed
        if gate > 0.0 {
            let steps = gated_step(
                evidence.factor(&row.tools) * profiles.factor(table, row),
                gate,
            );
            parts.total *= steps;
            parts.steps = steps;
        }
        let capability = row.capability.as_deref().unwrap_or_default();
        // no context (the usual request): not even a hash per candidate
        if !filters.transitions.is_empty() {
            if let Some(&factor) = filters.transitions.get(capability) {
                parts = with_transition(parts, factor);
            }
        }
        floor.offer(capability, parts.total);
        passing.push((parts, capability, &row.pattern_id));
        slot_of.insert(&row.pattern_id, slot);
    }
    passing.sort_by(best_first);
    let mut chosen: FxHashSet<&str> = FxHashSet::default();
    let mut out = Vec::with_capacity(k);
    for (parts, capability, pattern_id) in passing {
        if out.len() == k {
            break;
        }
        if chosen.insert(capability) {
            let row = table.row(slot_of[pattern_id]);
            out.push(Ranked {
                pattern_id: pattern_id.to_owned(),
                capability_id: capability.to_owned(),
                parts,
                intent_ids: row.intents.clone(),
            });
        }
    }
    Ok(out)
}

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

/// The filters of `ranking.filters.RULES`: flagged, available tools, tags, match, success.
fn passes(
    row: &super::table::Row,
    parts: &ScoreParts,
    resolved: &Resolved,
    filters: &Filters,
) -> bool {
    if row.flagged && !filters.include_flagged {
        return false;
    }
    if let Some(available) = &resolved.available {
        if row.tools.iter().any(|t| !available.contains(t)) {
            return false;
        }
    }
    match &resolved.tags {
        None => return false,
        Some(tags) => {
            if tags.iter().any(|t| row.tags.binary_search(t).is_err()) {
                return false;
            }
        }
    }
    parts.matched >= filters.min_match && parts.success >= filters.min_success
}
