//! Exact top-k pruning for BM25 (MaxScore, term at a time).
//!
//! Each query term has a bound on what it can add to any document. Terms are scanned from the
//! largest bound down (rare terms first); once `limit` documents are scored and the limit-th
//! best partial score beats the sum of the bounds of the terms left, no document outside the
//! scanned postings can reach the top `limit`, and the common terms' long lists are skipped.
//! The scanned documents that could still make it are then rescored one at a time from their
//! own term counts, in the caller's term order, so every score has the bits of an exhaustive
//! search; the selection is the same heap with the same tie-break.
//!
//! Partial sums are taken in another order than the exact ones, so they may differ in the last
//! bits: every comparison leaves a relative margin far above that rounding, so pruning only
//! ever drops documents that are strictly below the limit-th best.

use super::search::{contribution, Best, Norm, QueryTerm, Scratch};
use super::LexicalIndex;

#[cfg(test)]
thread_local! {
    /// (terms scanned, distinct query terms) of this thread's last pruned search: lets the
    /// tests check that pruning happened, not only that results match.
    pub(super) static LAST_SCAN: std::cell::Cell<(usize, usize)> =
        const { std::cell::Cell::new((0, 0)) };
}

impl LexicalIndex {
    /// The top `limit` for `query` (distinct terms in the caller's order, with finite bounds).
    pub(super) fn pruned_top(
        &self,
        query: &[QueryTerm],
        norm: &Norm,
        limit: usize,
        scratch: &mut Scratch,
    ) -> Vec<(String, f64)> {
        // rounding of a sum of n terms stays below n * EPSILON relative
        let margin = 1e-9 + 4.0 * f64::EPSILON * query.len() as f64;
        let (up, down) = (1.0 + margin, 1.0 - margin);
        let mut order: Vec<usize> = (0..query.len()).collect();
        // stable: equal bounds keep the caller's order
        order.sort_by(|&a, &b| query[b].bound.total_cmp(&query[a].bound));
        // rest[i]: the most that terms order[i..] can add to one document together
        let mut rest = vec![0.0; order.len() + 1];
        for i in (0..order.len()).rev() {
            rest[i] = rest[i + 1] + query[order[i]].bound;
        }

        let mut scanned = order.len();
        let mut threshold = 0.0;
        // never below the limit-th best partial score: skips selections that cannot succeed
        let mut ceiling = f64::INFINITY;
        for (i, &term) in order.iter().enumerate() {
            if scratch.touched.len() >= limit && ceiling * down > rest[i] * up {
                threshold = limit_th_best(scratch, limit);
                if threshold * down > rest[i] * up {
                    scanned = i;
                    break;
                }
                ceiling = threshold;
            }
            self.scatter(&query[term], norm, scratch);
            ceiling += query[term].bound;
        }
        if scanned == order.len() {
            threshold = if scratch.touched.len() >= limit {
                limit_th_best(scratch, limit)
            } else {
                0.0 // fewer documents than wanted: all of them
            };
        }
        let rest = rest[scanned];
        // every term scanned in the caller's order: the partial scores are the exact ones
        let exact = scanned == order.len() && order.windows(2).all(|w| w[0] < w[1]);

        let mut best = Best::new(limit);
        for &doc in &scratch.touched {
            let partial = std::mem::take(&mut scratch.scores[doc as usize]);
            if (partial + rest) * up < threshold * down {
                continue; // strictly below `limit` documents whatever it holds
            }
            let score = if exact {
                partial
            } else {
                self.exact_score(doc, query, norm)
            };
            best.offer(self, doc, score);
        }
        scratch.touched.clear();
        #[cfg(test)]
        LAST_SCAN.set((scanned, order.len()));
        best.into_hits()
    }

    /// `doc`'s BM25 score for `query` as the exhaustive search sums it: term by term in the
    /// caller's order, starting from zero.
    fn exact_score(&self, doc: u32, query: &[QueryTerm], norm: &Norm) -> f64 {
        let terms = &self.docs[doc as usize].terms;
        let doc_norm = norm.of(self.lengths[doc as usize]);
        let mut score = 0.0;
        for term in query {
            if let Some(entry) = terms.get(&term.number) {
                score += contribution(term.gain, entry.tf as f64, doc_norm);
            }
        }
        score
    }
}

/// The limit-th best partial score of the touched documents (at least `limit` of them).
fn limit_th_best(scratch: &mut Scratch, limit: usize) -> f64 {
    let Scratch {
        scores,
        touched,
        partials,
        ..
    } = scratch;
    partials.clear();
    partials.extend(touched.iter().map(|&doc| scores[doc as usize]));
    let (_, nth, _) = partials.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a));
    *nth
}
