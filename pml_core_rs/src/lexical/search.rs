//! BM25 search: score the postings of each query term into a per-thread accumulator, then
//! select the best `limit` documents with the doc-id tie-break.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashSet;

use super::LexicalIndex;

thread_local! {
    /// Score per internal document number, all zeros between searches; reused so a search
    /// allocates nothing proportional to the index. Searches run in parallel under a read
    /// lock, so each thread has its own.
    static SCORES: RefCell<Vec<f64>> = const { RefCell::new(Vec::new()) };
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
                let df = posting.len();
                let idf = (((n_docs - df) as f64 + 0.5) / (df as f64 + 0.5)).ln_1p();
                let gain = idf * (k1 + 1.0);
                for p in posting {
                    let doc = p.doc as usize;
                    let norm = length_base + length_scale * self.lengths[doc];
                    if scores[doc] == 0.0 {
                        touched.push(p.doc);
                    }
                    scores[doc] += gain * p.tf / (p.tf + norm);
                }
            }
            let mut hits: Vec<(u32, f64)> = Vec::with_capacity(touched.len());
            for &doc in &touched {
                let score = std::mem::take(&mut scores[doc as usize]);
                // a document listed twice (a zero first contribution) was zeroed just above
                if score > 0.0 {
                    hits.push((doc, score));
                }
            }
            self.best(hits, limit)
        })
    }

    fn best(&self, mut hits: Vec<(u32, f64)>, limit: usize) -> Vec<(String, f64)> {
        let order = |a: &(u32, f64), b: &(u32, f64)| -> Ordering {
            b.1.total_cmp(&a.1).then_with(|| {
                self.docs[a.0 as usize]
                    .name
                    .cmp(&self.docs[b.0 as usize].name)
            })
        };
        if hits.len() > limit {
            hits.select_nth_unstable_by(limit - 1, order);
            hits.truncate(limit);
        }
        hits.sort_unstable_by(order);
        hits.into_iter()
            .map(|(doc, score)| (self.docs[doc as usize].name.clone(), score))
            .collect()
    }
}
