//! BM25 search: score the postings of each query term into a per-thread accumulator, then
//! select the best `limit` documents with the doc-id tie-break.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashSet};

use super::LexicalIndex;

thread_local! {
    /// Score per internal document number, all zeros between searches; reused so a search
    /// allocates nothing proportional to the index. Searches run in parallel under a read
    /// lock, so each thread has its own.
    static SCORES: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
    /// One term's contributions, posting by posting (scratch, reused).
    static GAINS: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
}

impl LexicalIndex {
    /// The `limit` best documents for the distinct `terms` (later repeats are ignored), as
    /// (doc id, BM25 score > 0), best first, equal scores by doc id ascending.
    pub fn search<S: AsRef<str>>(&self, terms: &[S], limit: usize) -> Vec<(String, f64)> {
        let n_docs = self.ids.len();
        if limit == 0 || n_docs == 0 || terms.is_empty() {
            return Vec::new();
        }
        let (k1, b) = (self.k1, self.b);
        let average = self.total_length as f64 / n_docs as f64;
        // the former `total / n or 1.0`: documents may all be empty
        let average = if average == 0.0 { 1.0 } else { average };
        let length_scale = k1 * b / average;
        let length_base = k1 * (1.0 - b);

        GAINS.with_borrow_mut(|contributions| {
            SCORES.with_borrow_mut(|scores| {
                if scores.len() < self.docs.len() {
                    scores.resize(self.docs.len(), 0.0);
                }
                let mut touched: Vec<u32> = Vec::new();
                let mut seen: HashSet<u32> = HashSet::with_capacity(terms.len());
                for term in terms {
                    let Some(&number) = self.term_numbers.get(term.as_ref()) else {
                        continue;
                    };
                    if !seen.insert(number) {
                        continue;
                    }
                    let posting = &self.postings[number as usize];
                    let df = posting.docs.len();
                    let idf = (((n_docs - df) as f64 + 0.5) / (df as f64 + 0.5)).ln_1p();
                    let gain = idf * (k1 + 1.0);
                    // norm per posting, then the division over contiguous arrays (vectorized),
                    // then the scatter into the accumulator: the same f64 operations as one
                    // document at a time, in the same order
                    contributions.clear();
                    contributions.extend(
                        posting
                            .docs
                            .iter()
                            .map(|&doc| length_base + length_scale * self.lengths[doc as usize]),
                    );
                    for (value, &tf) in contributions.iter_mut().zip(&posting.tfs) {
                        *value = gain * tf / (tf + *value);
                    }
                    for (&doc, &value) in posting.docs.iter().zip(contributions.iter()) {
                        let score = &mut scores[doc as usize];
                        if *score == 0.0 {
                            touched.push(doc);
                        }
                        *score += value;
                    }
                }
                // every touched document is drained (its slot zeroed for the next search) into
                // a bounded heap holding the `limit` best so far, its worst on top: most
                // documents are turned away by one comparison with that worst.
                let mut best: BinaryHeap<Ranked<'_>> =
                    BinaryHeap::with_capacity(limit.min(touched.len()));
                for &doc in &touched {
                    let score = std::mem::take(&mut scores[doc as usize]);
                    // a document listed twice (a zero first contribution) was zeroed just above
                    if score <= 0.0 {
                        continue;
                    }
                    let candidate = Ranked {
                        score,
                        key: self.name_keys[doc as usize],
                        name: &self.docs[doc as usize].name,
                    };
                    if best.len() < limit {
                        best.push(candidate);
                    } else if let Some(mut worst) = best.peek_mut() {
                        if candidate < *worst {
                            *worst = candidate;
                        }
                    }
                }
                best.into_sorted_vec()
                    .into_iter()
                    .map(|r| (r.name.to_owned(), r.score))
                    .collect()
            })
        })
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
