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

/// Added to the companion's cosine of an intent recorded in another language when an English
/// request reads it beside English intents scored by the primary index (a pair in two
/// languages scores lower than the same pair in one): docs/ranking.md, Other languages,
/// "Calibration of the reverse". Exported to Python as `_core.MIXED_FOREIGN_SHIFT` (the
/// oracle's `MixedView` reads it).
pub const MIXED_FOREIGN_SHIFT: f32 = 0.1;

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
            return Ok(shifted(one_nearest(foreign.ann, foreign.query, limit)?));
        }
        // the primary space's hits on foreign intents are dropped: over-fetch by their number
        let primary = one_nearest(self.ann, self.query, limit + foreign.ids.len().min(limit))?;
        let other = shifted(among(foreign.ann, foreign.query, limit, foreign.ids)?);
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
        let other = shifted(among(foreign.ann, foreign.query, limit, &other_ids)?);
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

/// The companion's hits on foreign intents on the primary's scale (`MIXED_FOREIGN_SHIFT`), at
/// most 1; the order is unchanged.
fn shifted(mut hits: Vec<Hit>) -> Vec<Hit> {
    for hit in &mut hits {
        hit.score = (hit.score + MIXED_FOREIGN_SHIFT).min(1.0);
    }
    hits
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
    fn foreign_hits_are_shifted_and_capped_in_order() {
        let hits = vec![Hit { id: 1, score: 0.95 }, Hit { id: 2, score: 0.4 }];
        let out = shifted(hits);
        assert_eq!(out[0].id, 1);
        assert!((out[0].score - 1.0).abs() < 1e-6);
        assert!((out[1].score - (0.4 + MIXED_FOREIGN_SHIFT)).abs() < 1e-6);
    }
}
