//! The vectors one query is scored against (docs/ranking.md, Other languages): one index and
//! the request's vector in its space, or, for an English request over a memory holding intents
//! recorded in another language, each intent in the space of the model that reads it: the
//! English ones by the primary index and the request's primary vector, the others by the
//! companion index and the request embedded by the companion model.

use rustc_hash::FxHashSet;

use super::steps::RequestParts;
use super::table::ProfileSpace;
use crate::error::CoreResult;
use crate::index::{Hit, HnswIndex};

/// The tool profiles' weight in the companion's space is `step_profile_weight` times this, at
/// most 1 (1 at the default 0.8): a request's cosines with the companion's profiles spread
/// less than with the primary's, so the same weight separates tools less (docs/ranking.md,
/// Other languages, "Tool profiles in the companion's space"; chosen on the probe's tune part
/// among 0, 0.5, 0.8 and 1).
pub const COMPANION_PROFILE_BOOST: f64 = 1.25;

/// The weight of the tool-profile factor (`steps::ProfileFit`) for a query in `space`.
pub fn profile_weight(space: ProfileSpace, step_profile_weight: f64) -> f64 {
    match space {
        ProfileSpace::Primary => step_profile_weight,
        ProfileSpace::Companion => (step_profile_weight * COMPANION_PROFILE_BOOST).min(1.0),
    }
}

/// The intents recorded in another language and where they are read.
pub struct Foreign<'a> {
    pub ann: &'a HnswIndex,
    pub query: &'a [f32],
    /// Sorted ascending, each once.
    pub ids: &'a [u64],
    set: FxHashSet<u64>,
}

impl<'a> Foreign<'a> {
    pub fn new(ann: &'a HnswIndex, query: &'a [f32], ids: &'a [u64]) -> Self {
        Foreign {
            ann,
            query,
            ids,
            set: ids.iter().copied().collect(),
        }
    }
}

/// The query's index or indexes.
pub struct Space<'a> {
    pub ann: &'a HnswIndex,
    pub query: &'a [f32],
    pub foreign: Option<Foreign<'a>>,
    /// The request's parts in the primary space (docs/ranking.md, Steps, "Request parts'
    /// coverage"); None for a request of one part or ranked in the companion's space.
    pub parts: Option<RequestParts<'a>>,
    /// `ann` is the primary index, whose vectors the table's tool profiles are means of.
    primary: bool,
}

impl<'a> Space<'a> {
    /// The primary index and the request's vector in its space.
    pub fn one(ann: &'a HnswIndex, query: &'a [f32]) -> Self {
        Space {
            ann,
            query,
            foreign: None,
            parts: None,
            primary: true,
        }
    }

    /// The same space with the request's parts, in the space its tool profiles are read in
    /// (`profiles`: the primary's, or the companion's for a request in another language or
    /// over intents in another; docs/ranking.md, Steps, "Request parts' coverage").
    pub fn with_parts(self, parts: Option<RequestParts<'a>>) -> Self {
        Space { parts, ..self }
    }

    /// The companion index alone and the request's vector in its space (a request in another
    /// language).
    pub fn companion(ann: &'a HnswIndex, query: &'a [f32]) -> Self {
        Space {
            primary: false,
            ..Space::one(ann, query)
        }
    }

    /// The primary index for the English intents, `foreign`'s for the others.
    pub fn mixed(ann: &'a HnswIndex, query: &'a [f32], foreign: Foreign<'a>) -> Self {
        Space {
            ann,
            query,
            foreign: Some(foreign),
            parts: None,
            primary: true,
        }
    }

    /// The table's tool profiles a candidate's tools are judged by, and the request's vector
    /// in their space: the primary index's with `query`, or the companion's for a query in its
    /// space; when the scoring mixes both, the companion's with the request's companion vector
    /// (it reads every intent, English or not, in one space: docs/ranking.md, Other
    /// languages, "Tool profiles in the companion's space").
    pub fn profiles(&self) -> (ProfileSpace, &'a [f32]) {
        match (self.primary, &self.foreign) {
            (_, Some(foreign)) => (ProfileSpace::Companion, foreign.query),
            (true, None) => (ProfileSpace::Primary, self.query),
            (false, None) => (ProfileSpace::Companion, self.query),
        }
    }

    /// The `limit` nearest intents (fewer when the indexes hold fewer), best first.
    pub fn nearest(&self, limit: usize) -> CoreResult<Vec<Hit>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let Some(foreign) = &self.foreign else {
            return one_nearest(self.ann, self.query, limit);
        };
        if foreign.ids.len() >= self.ann.len() {
            // every intent in another language: the companion alone
            return one_nearest(foreign.ann, foreign.query, limit);
        }
        // the primary space's hits on foreign intents are dropped: over-fetch by their number
        let primary = one_nearest(self.ann, self.query, limit + foreign.ids.len().min(limit))?;
        let other = among(foreign.ann, foreign.query, limit, foreign.ids)?;
        Ok(merged(primary, other, &foreign.set, limit))
    }

    /// The `limit` nearest among `ids`, best first (exact when `ids` are at most
    /// `EXACT_SCAN_MIN`).
    pub fn among(&self, limit: usize, ids: &[u64]) -> CoreResult<Vec<Hit>> {
        let Some(foreign) = &self.foreign else {
            return among(self.ann, self.query, limit, ids);
        };
        let (other_ids, english): (Vec<u64>, Vec<u64>) =
            ids.iter().partition(|i| foreign.set.contains(i));
        let primary = among(self.ann, self.query, limit, &english)?;
        let other = among(foreign.ann, foreign.query, limit, &other_ids)?;
        Ok(merged(primary, other, &foreign.set, limit))
    }
}

fn one_nearest(ann: &HnswIndex, query: &[f32], limit: usize) -> CoreResult<Vec<Hit>> {
    let size = ann.len();
    if size == 0 || limit == 0 {
        return Ok(Vec::new());
    }
    ann.search(query, limit.min(size), None, None)
}

fn among(ann: &HnswIndex, query: &[f32], limit: usize, ids: &[u64]) -> CoreResult<Vec<Hit>> {
    if ids.is_empty() || limit == 0 || ann.is_empty() {
        return Ok(Vec::new());
    }
    ann.search(query, limit.min(ids.len()), None, Some(ids))
}

/// The primary hits on English intents and the companion's, best first (stable: the primary's
/// first on equal cosines), the first `limit`.
fn merged(primary: Vec<Hit>, other: Vec<Hit>, foreign: &FxHashSet<u64>, limit: usize) -> Vec<Hit> {
    let mut hits: Vec<Hit> = primary
        .into_iter()
        .filter(|h| !foreign.contains(&h.id))
        .chain(other)
        .collect();
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    hits.truncate(limit);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_keeps_each_intent_from_the_space_that_reads_it_best_first() {
        let foreign: FxHashSet<u64> = [2, 3].into_iter().collect();
        // the primary index's hit on foreign intent 2 is dropped: the companion reads it
        let primary = vec![Hit { id: 2, score: 0.9 }, Hit { id: 1, score: 0.5 }];
        let other = vec![Hit { id: 3, score: 0.7 }, Hit { id: 2, score: 0.3 }];
        let out = merged(primary, other, &foreign, 2);
        let ids: Vec<u64> = out.iter().map(|h| h.id).collect();
        assert_eq!(ids, vec![3, 1]);
        assert!((out[0].score - 0.7).abs() < 1e-6);
    }
}
