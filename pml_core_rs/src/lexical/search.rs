//! BM25 search: score the postings of query terms into a per-thread accumulator, then select
//! the best `limit` documents with the doc-id tie-break. `search` skips the terms that cannot
//! change the result (`prune.rs`); `search_exhaustive` scans every posting, as a baseline.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};

use super::LexicalIndex;

/// Buffers reused by every search of a thread, so a search allocates nothing proportional to
/// the index. Searches run in parallel under a read lock, so each thread has its own.
pub(super) struct Scratch {
    /// Score per internal document number, all zeros between searches.
    pub(super) scores: Vec<f64>,
    /// Documents whose score left zero, each listed once.
    pub(super) touched: Vec<u32>,
    /// One term's contributions, posting by posting.
    contributions: Vec<f64>,
    /// Partial scores copied out for selecting the limit-th best.
    pub(super) partials: Vec<f64>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = const {
        RefCell::new(Scratch {
            scores: Vec::new(),
            touched: Vec::new(),
            contributions: Vec::new(),
            partials: Vec::new(),
        })
    };
}

/// A distinct, indexed query term: `gain` = idf * (k1 + 1), and `bound`, at least its
/// contribution to any document (see `Postings::max_tf`).
pub(super) struct QueryTerm {
    pub(super) number: u32,
    pub(super) gain: f64,
    pub(super) bound: f64,
}

/// The length normalisation of the current index state: norm = base + scale * length.
pub(super) struct Norm {
    base: f64,
    scale: f64,
}

impl Norm {
    pub(super) fn of(&self, length: f64) -> f64 {
        self.base + self.scale * length
    }
}

/// One term's BM25 contribution to one document: the single expression every path uses, so
/// all of them produce the same bits.
#[inline(always)]
pub(super) fn contribution(gain: f64, tf: f64, norm: f64) -> f64 {
    gain * tf / (tf + norm)
}

impl LexicalIndex {
    /// The `limit` best documents for the distinct `terms` (later repeats are ignored), as
    /// (doc id, BM25 score > 0), best first, equal scores by doc id ascending.
    pub fn search<S: AsRef<str>>(&self, terms: &[S], limit: usize) -> Vec<(String, f64)> {
        self.run_search(terms, limit, true)
    }

    /// `search` scanning every posting of every query term, without pruning: same results,
    /// kept as the baseline that tests and benchmarks compare `search` with.
    pub fn search_exhaustive<S: AsRef<str>>(
        &self,
        terms: &[S],
        limit: usize,
    ) -> Vec<(String, f64)> {
        self.run_search(terms, limit, false)
    }

    /// `search` among the documents `keep` accepts (by doc id) alone: the `limit` best of
    /// them, scanning every posting of the query's terms (docs/ranking.md, Context filters).
    pub fn search_among<S: AsRef<str>>(
        &self,
        terms: &[S],
        limit: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<(String, f64)> {
        let n_docs = self.ids.len();
        if limit == 0 || n_docs == 0 || terms.is_empty() {
            return Vec::new();
        }
        let norm = self.norm();
        let query = self.query_terms(terms, &norm);
        SCRATCH.with_borrow_mut(|scratch| {
            if scratch.scores.len() < self.docs.len() {
                scratch.scores.resize(self.docs.len(), 0.0);
            }
            for term in &query {
                self.scatter(term, &norm, scratch);
            }
            let mut best = Best::new(limit);
            for &doc in &scratch.touched {
                let score = std::mem::take(&mut scratch.scores[doc as usize]);
                if keep(self.docs[doc as usize].name()) {
                    best.offer(self, doc, score);
                }
            }
            scratch.touched.clear();
            best.into_hits()
        })
    }

    /// The length normalisation of the current index state.
    fn norm(&self) -> Norm {
        let (k1, b) = (self.k1, self.b);
        let average = self.total_length as f64 / self.ids.len().max(1) as f64;
        // the former `total / n or 1.0`: documents may all be empty
        let average = if average == 0.0 { 1.0 } else { average };
        Norm {
            base: k1 * (1.0 - b),
            scale: k1 * b / average,
        }
    }

    fn run_search<S: AsRef<str>>(
        &self,
        terms: &[S],
        limit: usize,
        prune: bool,
    ) -> Vec<(String, f64)> {
        let n_docs = self.ids.len();
        if limit == 0 || n_docs == 0 || terms.is_empty() {
            return Vec::new();
        }
        let (k1, b) = (self.k1, self.b);
        let average = self.total_length as f64 / n_docs as f64;
        // the former `total / n or 1.0`: documents may all be empty
        let average = if average == 0.0 { 1.0 } else { average };
        let norm = Norm {
            base: k1 * (1.0 - b),
            scale: k1 * b / average,
        };
        let query = self.query_terms(terms, &norm);
        SCRATCH.with_borrow_mut(|scratch| {
            if scratch.scores.len() < self.docs.len() {
                scratch.scores.resize(self.docs.len(), 0.0);
            }
            // bounds overflow only with an absurd k1; such a search is not worth pruning
            let finite = query.iter().map(|t| t.bound).sum::<f64>().is_finite();
            if prune && finite {
                if let Some(hits) = self.pruned_top(&query, &norm, limit, scratch) {
                    return hits;
                }
            }
            for term in &query {
                self.scatter(term, &norm, scratch);
            }
            let mut best = Best::new(limit);
            for &doc in &scratch.touched {
                let score = std::mem::take(&mut scratch.scores[doc as usize]);
                best.offer(self, doc, score);
            }
            scratch.touched.clear();
            best.into_hits()
        })
    }

    /// The distinct indexed `terms` in the caller's order, with their gains and bounds.
    fn query_terms<S: AsRef<str>>(&self, terms: &[S], norm: &Norm) -> Vec<QueryTerm> {
        let n_docs = self.ids.len();
        let gain_scale = self.k1 + 1.0;
        let mut seen: HashSet<u32> = HashSet::with_capacity(terms.len());
        let mut query = Vec::with_capacity(terms.len());
        for term in terms {
            let Some(&number) = self.term_numbers.get(term.as_ref()) else {
                continue;
            };
            if !seen.insert(number) {
                continue;
            }
            let posting = &self.postings[number as usize];
            let df = posting.live();
            let idf = (((n_docs - df) as f64 + 0.5) / (df as f64 + 0.5)).ln_1p();
            let gain = idf * gain_scale;
            // tf / (tf + norm) grows with tf and shrinks with the length
            let bound = contribution(gain, posting.max_tf, norm.of(posting.min_length));
            query.push(QueryTerm {
                number,
                gain,
                bound,
            });
        }
        query
    }

    /// Add `term`'s contribution to the score of each document in its posting list.
    pub(super) fn scatter(&self, term: &QueryTerm, norm: &Norm, scratch: &mut Scratch) {
        let posting = &self.postings[term.number as usize];
        let Scratch {
            scores,
            touched,
            contributions,
            ..
        } = scratch;
        // norm per posting, then the division over contiguous arrays (vectorized), then the
        // scatter into the accumulator: the same f64 operations as one document at a time
        contributions.clear();
        contributions.extend(
            posting
                .docs
                .iter()
                .map(|&doc| norm.of(self.lengths[doc as usize])),
        );
        for (value, &tf) in contributions.iter_mut().zip(&posting.tfs) {
            // a tombstone (count 0) adds nothing; with k1 = 0 the formula would give 0 / 0
            *value = if tf == 0.0 {
                0.0
            } else {
                contribution(term.gain, tf, *value)
            };
        }
        for (&doc, &value) in posting.docs.iter().zip(contributions.iter()) {
            let score = &mut scores[doc as usize];
            let before = *score;
            *score = before + value;
            // contributions are >= 0, so a score leaves zero at most once
            if before == 0.0 && *score != 0.0 {
                touched.push(doc);
            }
        }
    }
}

/// The `limit` best documents offered so far in a bounded heap, its worst on top: most
/// documents are turned away by one comparison with that worst.
pub(super) struct Best<'a> {
    heap: BinaryHeap<Ranked<'a>>,
    limit: usize,
}

impl<'a> Best<'a> {
    pub(super) fn new(limit: usize) -> Self {
        Best {
            heap: BinaryHeap::with_capacity(limit.min(1024)),
            limit,
        }
    }

    /// Consider document `doc` with `score`; scores <= 0 never rank.
    pub(super) fn offer(&mut self, index: &'a LexicalIndex, doc: u32, score: f64) {
        if score <= 0.0 {
            return;
        }
        if self.heap.len() >= self.limit {
            // below the worst kept: turned away before its id is read (two cache misses a
            // document at 1M, where the walk offers thousands)
            if self.heap.peek().is_some_and(|worst| score < worst.score) {
                return;
            }
        }
        let candidate = Ranked {
            score,
            key: index.name_keys[doc as usize],
            name: index.docs[doc as usize].name(),
        };
        if self.heap.len() < self.limit {
            self.heap.push(candidate);
        } else if let Some(mut worst) = self.heap.peek_mut() {
            if candidate < *worst {
                *worst = candidate;
            }
        }
    }

    /// The score a document must beat to enter, once `limit` documents are in.
    pub(super) fn worst_when_full(&self) -> Option<f64> {
        if self.heap.len() < self.limit {
            return None;
        }
        self.heap.peek().map(|worst| worst.score)
    }

    pub(super) fn into_hits(self) -> Vec<(String, f64)> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|r| (r.name.to_owned(), r.score))
            .collect()
    }
}

/// A scored document in result order: `a < b` when `a` ranks first (higher score, then the
/// smaller doc id). `key` is the id's first 8 bytes, big-endian and zero-padded, which orders
/// like the id whenever two keys differ, so ties rarely need the full string comparison.
struct Ranked<'a> {
    score: f64,
    key: u64,
    name: &'a str,
}

impl Ord for Ranked<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then_with(|| self.key.cmp(&other.key))
            .then_with(|| self.name.cmp(other.name))
    }
}

impl PartialOrd for Ranked<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked<'_> {}

/// The sort key of a doc id's first 8 bytes (see `Ranked`).
pub(super) fn name_key(name: &str) -> u64 {
    let mut head = [0u8; 8];
    let bytes = name.as_bytes();
    let n = bytes.len().min(8);
    head[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(head)
}
