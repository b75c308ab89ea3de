//! Exact top-k document at a time over the sorted parts of the posting lists (MaxScore with
//! required terms).
//!
//! The term-at-a-time pruning (`prune.rs`) must read a common term's whole list before the
//! limit-th best partial score can rise, so a query whose rare words find only a document or
//! two reads every common list: at 1M documents of the service bench's corpus, 1.6M postings
//! and 6.3 to 6.6 ms (docs/ranking.md, Lexical index). Walking the lists together in document order, the limit-th
//! best exact score so far (`theta`) rises within the first few thousand documents, and then:
//!
//! - a term is *required* when all the other terms' bounds together stay below theta: no
//!   document without it can enter. The candidates are then the intersection of the required
//!   lists: a word of 64 documents at a time from their bits when every one has them
//!   (`LexicalIndex::dense`), else by skipping each list ahead to the largest document another
//!   one is at (`seek`), so runs of documents missing one of them are jumped over unread;
//! - with no required term, the terms whose bounds together stay below theta are
//!   *non-essential* (a document in none of the other lists cannot enter) and the candidates
//!   are the documents of the other (essential) lists;
//! - a candidate's remaining terms are looked up in their lists, the largest bound first, and
//!   the candidate is dropped as soon as its partial score plus the bounds left stays below
//!   theta.
//!
//! A candidate that survives is scored with its contributions summed in the caller's term
//! order (the exhaustive search's bits) and offered to the same selection with the same
//! tie-break. Comparisons with theta leave the same relative margin as `prune.rs`, and only
//! ever drop documents strictly below a lower bound of the final limit-th best: equal scores
//! are always scored, so ties at the limit keep the smallest ids.
//!
//! The lists' unsorted tails (documents that joined out of order, `Postings`) are not walked:
//! their documents are scored in full first, from their own terms, and marked so the walk
//! skips them.

use super::search::{contribution, Best, Norm, QueryTerm, Scratch};
use super::{seek, LexicalIndex};

/// Past the last document of a list.
const DONE: u64 = u64::MAX;

/// A position in the sorted part of one query term's list.
pub(super) struct Cursor<'a> {
    pub(super) docs: &'a [u32],
    pub(super) tfs: &'a [f64],
    pub(super) pos: usize,
    /// The term's place in the caller's order.
    pub(super) term: usize,
    pub(super) gain: f64,
    pub(super) bound: f64,
    /// The term's document bits, if it has them (`LexicalIndex::dense`).
    pub(super) bits: Option<&'a [u64]>,
}

impl Cursor<'_> {
    pub(super) fn doc(&self) -> u64 {
        self.docs.get(self.pos).map_or(DONE, |&d| u64::from(d))
    }

    /// Past tombstones (count 0): they are no longer in the list.
    fn skip_dead(&mut self) {
        while self.pos < self.docs.len() && self.tfs[self.pos] == 0.0 {
            self.pos += 1;
        }
    }

    /// To the first live document >= `target` (see `seek`).
    pub(super) fn advance(&mut self, target: u64) {
        self.pos = seek(self.docs, self.pos, target);
        self.skip_dead();
    }
}

#[cfg(test)]
thread_local! {
    /// The most terms this thread's last walk required at once: lets the tests check that the
    /// intersection of required lists ran.
    pub(super) static WALK_REQUIRED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How the walk finds candidates for the current theta.
struct Plan {
    /// Cursors every candidate must be in (their intersection gives the candidates), or, when
    /// empty, none is required and the candidates are the union of `essential`.
    required: Vec<usize>,
    essential: Vec<usize>,
    /// The other cursors, largest bound first, and after[i]: the bounds of optional[i..].
    optional: Vec<usize>,
    after: Vec<f64>,
}

impl LexicalIndex {
    /// The top `limit` for `query` (distinct terms in the caller's order, with finite bounds),
    /// no document scoring below `floor` (a lower bound of the final limit-th best score, 0
    /// when none is known) being looked at. Leaves the scratch clean.
    pub(super) fn daat_top(
        &self,
        query: &[QueryTerm],
        norm: &Norm,
        limit: usize,
        floor: f64,
        scratch: &mut Scratch,
    ) -> Vec<(String, f64)> {
        #[cfg(test)]
        {
            super::prune::LAST_DAAT.set(true);
            WALK_REQUIRED.set(0);
        }
        let margin = 1e-9 + 4.0 * f64::EPSILON * query.len() as f64;
        let (up, down) = (1.0 + margin, 1.0 - margin);
        let mut best = Best::new(limit);
        // the tails' documents, scored in full and marked (a score slot of 1.0) for the walk
        for term in query {
            let (docs, _) = self.postings[term.number as usize].tail();
            for &doc in docs {
                let mark = &mut scratch.scores[doc as usize];
                if *mark == 0.0 {
                    *mark = 1.0;
                    scratch.touched.push(doc);
                    best.offer(self, doc, self.exact_score(doc, query, norm));
                }
            }
        }
        let marked = !scratch.touched.is_empty();

        let mut cursors: Vec<Cursor> = query
            .iter()
            .enumerate()
            .filter_map(|(i, term)| {
                let (docs, tfs) = self.postings[term.number as usize].sorted_part();
                let mut cursor = Cursor {
                    docs,
                    tfs,
                    pos: 0,
                    term: i,
                    gain: term.gain,
                    bound: term.bound,
                    bits: self.dense.get(&term.number).map(Vec::as_slice),
                };
                cursor.skip_dead();
                (cursor.doc() != DONE).then_some(cursor)
            })
            .collect();
        let mut contributions = vec![0.0; query.len()];
        let threshold = |best: &Best| best.worst_when_full().unwrap_or(0.0).max(floor);
        let mut theta = threshold(&best);
        let mut plan = make_plan(&cursors, theta, up, down);
        // every document below `next` has been looked at
        let mut next: u64 = 0;
        while let Some(doc) = candidate(&mut cursors, &plan, next) {
            next = doc + 1;
            if marked && scratch.scores[doc as usize] != 0.0 {
                continue; // a tail's document, scored in full already
            }
            let doc_norm = norm.of(self.lengths[doc as usize]);
            let mut partial = 0.0;
            for &c in plan.required.iter().chain(&plan.essential) {
                let cursor = &cursors[c];
                if cursor.doc() == doc {
                    let value = contribution(cursor.gain, cursor.tfs[cursor.pos], doc_norm);
                    contributions[cursor.term] = value;
                    partial += value;
                }
            }
            let mut reachable = true;
            for (i, &c) in plan.optional.iter().enumerate() {
                if (partial + plan.after[i]) * up < theta * down {
                    reachable = false;
                    break;
                }
                let cursor = &mut cursors[c];
                cursor.advance(doc);
                if cursor.doc() == doc {
                    let value = contribution(cursor.gain, cursor.tfs[cursor.pos], doc_norm);
                    contributions[cursor.term] = value;
                    partial += value;
                }
            }
            if reachable {
                // the caller's order, from zero (absent terms add +0.0, which changes no bits)
                let score = contributions.iter().fold(0.0, |sum, &value| sum + value);
                best.offer(self, doc as u32, score);
            }
            contributions.iter_mut().for_each(|value| *value = 0.0);
            let before = cursors.len();
            cursors.retain(|cursor| cursor.doc() != DONE);
            let raised = threshold(&best);
            if raised > theta || cursors.len() < before {
                theta = theta.max(raised);
                plan = make_plan(&cursors, theta, up, down);
            }
        }
        for &doc in &scratch.touched {
            scratch.scores[doc as usize] = 0.0;
        }
        scratch.touched.clear();
        best.into_hits()
    }
}

/// The plan for `theta`: required terms, else essential ones; the rest optional.
fn make_plan(cursors: &[Cursor], theta: f64, up: f64, down: f64) -> Plan {
    let total: f64 = cursors.iter().map(|c| c.bound).sum();
    let below = |bounds: f64| bounds * up < theta * down;
    let mut required: Vec<usize> = (0..cursors.len())
        .filter(|&c| below(total - cursors[c].bound))
        .collect();
    // the shortest list first: its next document is the likeliest to be far ahead
    required.sort_by_key(|&c| cursors[c].docs.len() - cursors[c].pos);
    let mut by_bound: Vec<usize> = (0..cursors.len()).collect();
    by_bound.sort_by(|&a, &b| cursors[a].bound.total_cmp(&cursors[b].bound));
    let (essential, mut optional) = if required.is_empty() {
        // the longest prefix of the smallest bounds that stays below theta together
        let mut sum = 0.0;
        let cut = by_bound
            .iter()
            .position(|&c| {
                sum += cursors[c].bound;
                !below(sum)
            })
            .unwrap_or(by_bound.len());
        (by_bound[cut..].to_vec(), by_bound[..cut].to_vec())
    } else {
        let optional = by_bound
            .iter()
            .copied()
            .filter(|c| !required.contains(c))
            .collect();
        (Vec::new(), optional)
    };
    #[cfg(test)]
    WALK_REQUIRED.set(WALK_REQUIRED.get().max(required.len()));
    optional.reverse(); // largest bound first
    let mut after = vec![0.0; optional.len() + 1];
    for i in (0..optional.len()).rev() {
        after[i] = after[i + 1] + cursors[optional[i]].bound;
    }
    Plan {
        required,
        essential,
        optional,
        after,
    }
}

/// The next candidate at or after `next`, the plan's cursors moved onto it (those at it), or
/// None when no candidate is left.
fn candidate(cursors: &mut [Cursor], plan: &Plan, next: u64) -> Option<u64> {
    if plan.required.is_empty() {
        let mut doc = DONE;
        for &c in &plan.essential {
            let cursor = &mut cursors[c];
            cursor.advance(next);
            doc = doc.min(cursor.doc());
        }
        return (doc != DONE).then_some(doc);
    }
    if let Some(doc) = intersect_bits(cursors, &plan.required, next) {
        return doc;
    }
    // leapfrog: every required cursor onto the largest document any of them is at
    let mut doc = next;
    'align: loop {
        for &c in &plan.required {
            let cursor = &mut cursors[c];
            cursor.advance(doc);
            let at = cursor.doc();
            if at == DONE {
                return None;
            }
            if at > doc {
                doc = at;
                continue 'align;
            }
        }
        return Some(doc);
    }
}

/// When every required term has bits: the first document at or after `next` whose bit is set
/// in all of them, a word of 64 documents at a time, the cursors moved onto it; Some(None)
/// when there is none. None when a required term has no bits.
///
/// The bits cover the lists' tails too: a document found there is not in that term's sorted
/// part, so its cursor passes it, but the walk skips it anyway (it was scored in full).
fn intersect_bits(cursors: &mut [Cursor], required: &[usize], next: u64) -> Option<Option<u64>> {
    let mut words: Vec<&[u64]> = Vec::with_capacity(required.len());
    for &c in required {
        words.push(cursors[c].bits?);
    }
    let end = words.iter().map(|w| w.len()).min().unwrap_or(0);
    let mut at = (next / 64) as usize;
    let mut mask = !0u64 << (next % 64);
    while at < end {
        let word = words.iter().fold(mask, |word, bits| word & bits[at]);
        if word != 0 {
            let doc = at as u64 * 64 + u64::from(word.trailing_zeros());
            for &c in required {
                cursors[c].advance(doc);
            }
            return Some(Some(doc));
        }
        at += 1;
        mask = !0;
    }
    Some(None)
}
