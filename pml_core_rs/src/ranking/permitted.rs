//! Context filters inside retrieval (docs/ranking.md, Context filters): when a request names
//! `available_tools`, `tags` or its own `min_success`, the patterns those filters permit are
//! found first in the table, and both index searches run among them alone (an allow-list per
//! query), so the answer is the best-ranked permitted capabilities of the whole memory rather
//! than the permitted few of an unrestricted shortlist. A permitted set of at most
//! `EXACT_SCAN_MIN` intents is scored whole (every intent's exact cosine, every document's
//! BM25): the answer is then exactly the full ranking of every stored pattern, filtered.

use rustc_hash::FxHashSet;

use super::formula::{success_estimate, Params};
use super::query::{retrieve, Filters, Retrieved};
use super::space::Space;
use super::table::{NameId, RankTable, Row};
use crate::error::CoreResult;
use crate::index::EXACT_SCAN_MIN;
use crate::lexical::LexicalIndex;

/// The patterns a request's context filters permit: their table slots and their intents.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Permitted {
    pub slots: Vec<u32>,
    pub intents: Vec<u64>,
}

impl Permitted {
    /// The permitted patterns' ids, in table order.
    pub fn pattern_ids<'t>(&self, table: &'t RankTable) -> Vec<&'t str> {
        self.slots
            .iter()
            .map(|&s| &*table.row(s).pattern_id)
            .collect()
    }
}

/// Whether the request's filters restrict retrieval: `available_tools` or `tags` given, or
/// a `min_success` of the request's own (the server default stays a filter of the answer).
pub fn restricts(filters: &Filters, own_min_success: bool) -> bool {
    filters.available_tools.is_some() || !filters.tags.is_empty() || own_min_success
}

/// The rankable patterns that pass every filter not depending on the query (flagged,
/// available tools, tags, min_success), with their intents; None when that is all of them
/// (no allow-list needed). One pass over the table's rows (integer compares, no allocation
/// but the slots and intents kept).
pub fn permitted(table: &RankTable, filters: &Filters, params: &Params) -> Option<Permitted> {
    let available: Option<FxHashSet<NameId>> = filters
        .available_tools
        .as_ref()
        .map(|tools| table.tool_ids(tools).into_iter().collect());
    let tags: Option<Vec<NameId>> = filters.tags.iter().map(|t| table.name_id(t)).collect();
    let mut slots = Vec::new();
    let mut rankable = 0usize;
    for (slot, row) in table.rows().enumerate() {
        if !row.is_rankable() || row.intents.is_empty() {
            continue;
        }
        rankable += 1;
        if permits(row, filters, available.as_ref(), tags.as_deref(), params) {
            slots.push(slot as u32);
        }
    }
    if slots.len() == rankable {
        return None;
    }
    let intents = slots
        .iter()
        .flat_map(|&s| table.row(s).intents.iter().copied())
        .collect();
    Some(Permitted { slots, intents })
}

fn permits(
    row: &Row,
    filters: &Filters,
    available: Option<&FxHashSet<NameId>>,
    tags: Option<&[NameId]>,
    params: &Params,
) -> bool {
    if row.flagged && !filters.include_flagged {
        return false;
    }
    if let Some(available) = available {
        if row.tools.iter().any(|t| !available.contains(t)) {
            return false;
        }
    }
    let Some(tags) = tags else {
        return false; // a requested tag no row ever had
    };
    if tags.iter().any(|t| row.tags.binary_search(t).is_err()) {
        return false;
    }
    success_estimate(row.counts.successes, row.counts.failures, params) >= filters.min_success
}

/// Both index searches among the permitted patterns alone. `limit` hits each, except that a
/// permitted set of at most `EXACT_SCAN_MIN` intents is retrieved whole (scored exactly).
pub fn retrieve_permitted(
    table: &RankTable,
    space: &Space<'_>,
    lexical: &LexicalIndex,
    terms: &[String],
    limit: usize,
    permitted: &Permitted,
) -> CoreResult<Retrieved> {
    let mut found = Retrieved {
        semantic: Vec::new(),
        lexical: Vec::new(),
        searched: None,
    };
    if permitted.intents.is_empty() {
        return Ok(found);
    }
    let whole = permitted.intents.len() <= EXACT_SCAN_MIN;
    let (semantic_limit, lexical_limit) = if whole {
        (permitted.intents.len(), permitted.slots.len())
    } else {
        (limit, limit)
    };
    found.semantic = space.among(semantic_limit, &permitted.intents)?;
    if !terms.is_empty() {
        let allowed: FxHashSet<&str> = permitted.pattern_ids(table).into_iter().collect();
        found.lexical = lexical.search_among(terms, lexical_limit, |doc| allowed.contains(doc));
    }
    Ok(found)
}

/// Unrestricted retrieval (`query::retrieve`), or among the permitted patterns when there is
/// an allow-list.
pub fn retrieve_for(
    table: &RankTable,
    space: &Space<'_>,
    lexical: &LexicalIndex,
    terms: &[String],
    limit: usize,
    permitted: Option<&Permitted>,
) -> CoreResult<Retrieved> {
    match permitted {
        Some(p) => retrieve_permitted(table, space, lexical, terms, limit, p),
        None => retrieve(space, lexical, terms, limit),
    }
}

/// `retrieve_for` for a request with `explain`: with an allow-list, its hits first, then the
/// unrestricted shortlist's, so the answer lists what the filters removed from the shortlist
/// too, each with its rule (they fail those filters: the suggestions are the allow-list's).
pub fn retrieve_explained(
    table: &RankTable,
    space: &Space<'_>,
    lexical: &LexicalIndex,
    terms: &[String],
    limit: usize,
    permitted: Option<&Permitted>,
) -> CoreResult<Retrieved> {
    let mut found = retrieve_for(table, space, lexical, terms, limit, permitted)?;
    if permitted.is_some() {
        let shortlist = retrieve_for(table, space, lexical, terms, limit, None)?;
        found.semantic.extend(shortlist.semantic);
        found.lexical.extend(shortlist.lexical);
    }
    Ok(found)
}
