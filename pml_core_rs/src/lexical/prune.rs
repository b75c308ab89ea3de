//! Exact top-k pruning for BM25 (MaxScore, term at a time).
//!
//! Each query term has a bound on what it can add to any document. Terms are scanned from the
//! largest bound down (rare terms first). Once `limit` documents are scored and the limit-th
//! best partial score beats the sum of the bounds of the terms left, no other document can
//! reach the top `limit`: the terms left (the common ones, with the long lists) only complete
//! the scores of the documents already seen, dropping each one that can no longer make it,
//! by a lookup in the document or a walk of the term's list, whichever is cheaper.
//! The few documents left are rescored from their own term counts in the caller's term
//! order, so every score has the bits of the exhaustive search, then go through the same
//! selection with the same tie-break.
//!
//! Before each list, when the documents seen are few next to that list's length, they are
//! scored in full instead (`score_seen_in_full`): if the limit-th best of those exact scores
//! already beats the bounds of the terms left, no unseen document can enter and the search
//! ends there, the lists of the common terms never read. At 1M documents of the service
//! bench's corpus a query's rare words (its batch number, a tool number) find a few thousand
//! documents, whose full scores settle the top 40 (docs/ranking.md, Lexical index). Otherwise the limit-th best
//! exact score still serves as the threshold: it bounds the final one from below, as the
//! limit-th best partial score does.
//!
//! When the next list to scan is long (`DAAT_LIST`) and neither shortcut has ended the search,
//! it starts over document at a time (`daat.rs`): a query whose rare words find a document or
//! two would otherwise read every common list in full.
//!
//! Partial sums are taken in another order than the exact ones, so they may differ in the last
//! bits: every comparison leaves a relative margin far above that rounding, so pruning only
//! ever drops documents strictly below the limit-th best.

use super::search::{contribution, Best, Norm, QueryTerm, Scratch};
use super::LexicalIndex;

/// Rough cost of one lookup in a document's term map, in postings walked: the lookup misses
/// the cache two or three times (document, map, entry) and binary-searches the entries, while
/// a walk streams the list. At 8 (85 to 150 ns a lookup against 10 to 20 a posting, measured
/// alone) the service bench's queries at 100k intents spent 60% of their BM25 time in those
/// binary searches (perf), and a search took 1.28 to 1.35 ms; at 32, 0.51 to 0.62 ms, at 16
/// 0.65 to 0.83, at 64 0.79 to 1.13, the same answers (docs/ranking.md, Lexical index; 10k: no change in the noise).
const LOOKUP_COST: usize = 32;

#[cfg(test)]
thread_local! {
    /// (terms scanned in full, distinct query terms, fell back to the exhaustive search) of
    /// this thread's last pruned search: lets the tests check that pruning happened.
    pub(super) static LAST_SCAN: std::cell::Cell<(usize, usize, bool)> =
        const { std::cell::Cell::new((0, 0, false)) };
    /// Replaces LOOKUP_COST, and turns the fallback off, so the tests drive every path.
    pub(super) static TEST_COSTS: std::cell::Cell<Option<usize>> =
        const { std::cell::Cell::new(None) };
}

fn lookup_cost() -> usize {
    #[cfg(test)]
    if let Some(cost) = TEST_COSTS.get() {
        return cost;
    }
    LOOKUP_COST
}

/// Whether the tests turned the cost model off (every search prunes, whatever it costs).
fn forced() -> bool {
    #[cfg(test)]
    return TEST_COSTS.get().is_some();
    #[cfg(not(test))]
    false
}

/// Rescoring `docs` documents by lookups, in postings walked.
fn rescoring_cost(docs: usize, terms: usize) -> usize {
    docs.saturating_mul(terms).saturating_mul(LOOKUP_COST)
}

/// Rough cost of scoring one document in full from its own terms (`exact_score`), in postings
/// walked: its term entries are read once, then every query term is a binary search over
/// entries in cache. Measured at 1M documents of the service bench's corpus: about 60 ns a
/// document for 8 query terms, where a list scan runs at 10 to 20 ns a posting (docs/ranking.md, Lexical index).
const FORWARD_COST: usize = 8;

/// Before scanning a list at least this long (when neither the seen documents scored in full
/// nor the threshold could stop the search first), the search starts over document at a time
/// (`daat.rs`), the best exact scores seen as its floor. At 1M documents of the service
/// bench's corpus the queries whose rare words find one document each then took 1.2 to 1.5 ms
/// instead of 5 to 6.6 (the scan of 1.6M postings); those whose rare words find 2,000 documents
/// stop on their full scores before any long list and never get here. Below the length, the
/// scan is cheap: at 100k documents (lists of 8k to 25k) both kinds stop before it, and
/// walking from the first list instead measured 0.30 ms against 0.13 for the first kind.
const DAAT_LIST: usize = 20_000;

#[cfg(test)]
thread_local! {
    /// Some(n): switch to the document-at-a-time walk before the n-th list (0: before any),
    /// if the search gets there; Some(usize::MAX): never; None: as the cost model says.
    pub(super) static TEST_DAAT: std::cell::Cell<Option<usize>> =
        const { std::cell::Cell::new(None) };
    /// Whether this thread's last search went document at a time.
    pub(super) static LAST_DAAT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether to leave the term-at-a-time scan for the document-at-a-time walk before the
/// `i`-th list, of `next_list` postings.
fn daat_pays(i: usize, next_list: usize) -> bool {
    #[cfg(test)]
    if let Some(at) = TEST_DAAT.get() {
        return i >= at;
    }
    let _ = i;
    next_list >= DAAT_LIST
}

#[cfg(test)]
thread_local! {
    /// Some(true): score the seen documents in full before every list once `limit` are seen;
    /// Some(false): never; None: when the cost model says so.
    pub(super) static TEST_FORWARD: std::cell::Cell<Option<bool>> =
        const { std::cell::Cell::new(None) };
}

/// Whether scoring the `seen` documents in full, to stop before a list of `next_list`
/// postings, costs less than scanning that list.
fn forward_pays(seen: usize, next_list: usize) -> bool {
    #[cfg(test)]
    if let Some(always) = TEST_FORWARD.get() {
        return always;
    }
    seen.saturating_mul(FORWARD_COST) <= next_list
}

impl LexicalIndex {
    /// The top `limit` for `query` (distinct terms in the caller's order, with finite bounds),
    /// or None, with the scratch clean, when the exhaustive search is the cheaper way to it.
    pub(super) fn pruned_top(
        &self,
        query: &[QueryTerm],
        norm: &Norm,
        limit: usize,
        scratch: &mut Scratch,
    ) -> Option<Vec<(String, f64)>> {
        let postings: usize = query
            .iter()
            .map(|t| self.postings[t.number as usize].docs.len())
            .sum();
        // rescoring the top `limit` alone costs that many postings: on lists not much longer,
        // pruning cannot save what it spends
        if !forced() && rescoring_cost(limit, query.len()).saturating_mul(2) > postings {
            return None;
        }
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

        // scan whole lists until the documents seen hold the top `limit`
        let mut scanned = order.len();
        let mut threshold = 0.0;
        // never below the limit-th best partial score (no partial exceeds the bounds scanned):
        // skips the selections that cannot succeed
        let mut ceiling: f64 = 0.0;
        // the limit-th best exact score of documents scored in full so far: a lower bound of
        // the final limit-th best, as the partial scores are
        let mut known: f64 = 0.0;
        #[cfg(test)]
        LAST_DAAT.set(false);
        for (i, &term) in order.iter().enumerate() {
            let next_list = self.postings[query[term].number as usize].docs.len();
            if scratch.touched.len() >= limit && forward_pays(scratch.touched.len(), next_list) {
                match self.score_seen_in_full(query, norm, limit, rest[i], up, down, scratch) {
                    Ok(hits) => {
                        #[cfg(test)]
                        LAST_SCAN.set((i, order.len(), false));
                        return Some(hits);
                    }
                    Err(worst) => known = known.max(worst),
                }
            }
            if scratch.touched.len() >= limit && ceiling.max(known) * down > rest[i] * up {
                threshold = limit_th_best(scratch, limit).max(known);
                if threshold * down > rest[i] * up {
                    scanned = i;
                    break;
                }
                ceiling = threshold;
            }
            if daat_pays(i, next_list) {
                // start over document at a time; the best exact scores seen bound it below
                for &doc in &scratch.touched {
                    scratch.scores[doc as usize] = 0.0;
                }
                scratch.touched.clear();
                #[cfg(test)]
                LAST_SCAN.set((i, order.len(), false));
                return Some(self.daat_top(query, norm, limit, known, scratch));
            }
            self.scatter(&query[term], norm, scratch);
            ceiling += query[term].bound;
        }
        threshold = threshold.max(known);
        #[cfg(test)]
        LAST_SCAN.set((scanned, order.len(), false));

        // complete the scores of the documents seen, dropping those that fall out of reach
        for (i, &term) in order.iter().enumerate().skip(scanned) {
            self.keep_within_reach(scratch, rest[i], threshold, up, down);
            threshold = threshold.max(limit_th_best(scratch, limit));
            self.complete(&query[term], norm, scratch);
        }
        threshold = threshold.max(limit_th_best(scratch, limit));
        // terms added in the caller's order, or two terms at most (a + b == b + a): the
        // partial scores are the exact ones
        let exact = order.len() <= 2 || order.windows(2).all(|w| w[0] < w[1]);
        if !exact {
            // thousands of exact ties at the limit (every term in almost every document) cost
            // more to rescore one by one than a scan of every list
            let within = |&doc: &u32| scratch.scores[doc as usize] * up >= threshold * down;
            let rescored = scratch.touched.iter().filter(|doc| within(doc)).count();
            if !forced() && rescoring_cost(rescored, query.len()) > postings {
                #[cfg(test)]
                LAST_SCAN.set((scanned, order.len(), true));
                for &doc in &scratch.touched {
                    scratch.scores[doc as usize] = 0.0;
                }
                scratch.touched.clear();
                return None;
            }
        }

        let mut best = Best::new(limit);
        for &doc in &scratch.touched {
            let partial = std::mem::take(&mut scratch.scores[doc as usize]);
            if partial * up < threshold * down {
                continue; // strictly below `limit` documents
            }
            let score = if exact {
                partial
            } else {
                self.exact_score(doc, query, norm)
            };
            best.offer(self, doc, score);
        }
        scratch.touched.clear();
        Some(best.into_hits())
    }

    /// Score every touched document in full (the exhaustive search's bits) and keep the best
    /// `limit`. When the limit-th best is above `rest`, the most the terms not scanned yet can
    /// give a document none of the scanned terms is in, no untouched document can enter: the
    /// top `limit` (the scratch left clean). Otherwise that limit-th best exact score, a lower
    /// bound of the final one, with the scratch untouched.
    #[allow(clippy::too_many_arguments)]
    fn score_seen_in_full(
        &self,
        query: &[QueryTerm],
        norm: &Norm,
        limit: usize,
        rest: f64,
        up: f64,
        down: f64,
        scratch: &mut Scratch,
    ) -> Result<Vec<(String, f64)>, f64> {
        let mut best = Best::new(limit);
        for &doc in &scratch.touched {
            best.offer(self, doc, self.exact_score(doc, query, norm));
        }
        let worst = best.worst_when_full().unwrap_or(0.0);
        if worst * down <= rest * up {
            return Err(worst);
        }
        for &doc in &scratch.touched {
            scratch.scores[doc as usize] = 0.0;
        }
        scratch.touched.clear();
        Ok(best.into_hits())
    }

    /// Forget (zero) the touched documents that cannot reach `threshold` even with `rest`
    /// added; at least `limit` stay when `threshold` is the limit-th best partial score.
    fn keep_within_reach(
        &self,
        scratch: &mut Scratch,
        rest: f64,
        threshold: f64,
        up: f64,
        down: f64,
    ) {
        let Scratch {
            scores, touched, ..
        } = scratch;
        touched.retain(|&doc| {
            let score = &mut scores[doc as usize];
            let keep = (*score + rest) * up >= threshold * down;
            if !keep {
                *score = 0.0;
            }
            keep
        });
    }

    /// Add `term`'s contribution to the touched documents only.
    fn complete(&self, term: &QueryTerm, norm: &Norm, scratch: &mut Scratch) {
        let posting = &self.postings[term.number as usize];
        let Scratch {
            scores, touched, ..
        } = scratch;
        if posting.docs.len() <= touched.len().saturating_mul(lookup_cost()) {
            // documents out of reach hold a zero score; tombstones (count 0) add nothing
            for (&doc, &tf) in posting.docs.iter().zip(&posting.tfs) {
                let score = &mut scores[doc as usize];
                if *score != 0.0 && tf != 0.0 {
                    *score += contribution(term.gain, tf, norm.of(self.lengths[doc as usize]));
                }
            }
        } else {
            for &doc in touched.iter() {
                if let Some(entry) = self.docs[doc as usize].terms.get(&term.number) {
                    let doc_norm = norm.of(self.lengths[doc as usize]);
                    scores[doc as usize] += contribution(term.gain, f64::from(entry.tf), doc_norm);
                }
            }
        }
    }

    /// `doc`'s BM25 score for `query` as the exhaustive search sums it: term by term in the
    /// caller's order, starting from zero.
    pub(super) fn exact_score(&self, doc: u32, query: &[QueryTerm], norm: &Norm) -> f64 {
        let terms = &self.docs[doc as usize].terms;
        let doc_norm = norm.of(self.lengths[doc as usize]);
        let mut score = 0.0;
        for term in query {
            if let Some(entry) = terms.get(&term.number) {
                score += contribution(term.gain, f64::from(entry.tf), doc_norm);
            }
        }
        score
    }
}

/// The limit-th best partial score of the touched documents, 0 when fewer than `limit`.
fn limit_th_best(scratch: &mut Scratch, limit: usize) -> f64 {
    let Scratch {
        scores,
        touched,
        partials,
        ..
    } = scratch;
    if touched.len() < limit {
        return 0.0;
    }
    partials.clear();
    partials.extend(touched.iter().map(|&doc| scores[doc as usize]));
    let (_, nth, _) = partials.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a));
    *nth
}
