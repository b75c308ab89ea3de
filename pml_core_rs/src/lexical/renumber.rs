//! Renumbering the documents in a given order (`LexicalIndex::renumber`).
//!
//! A document's number is where it sits in every posting list, and the searches walk the
//! lists in number order: documents that share words and have neighbouring numbers are read
//! from neighbouring memory (their lengths, scores and term entries). A live index numbers its
//! documents as they come, so a tenant's related patterns, captured together, sit together. An
//! index rebuilt at open gets its documents in the store's key order, by pattern id, which is
//! random: at 1M documents of the service bench's corpus its searches took 4.8 ms at p50
//! where the same documents numbered in capture order took 1.1 (docs/ranking.md, Lexical index). `renumber` gives
//! the rebuilt index the order the caller names (the engine: its patterns' capture order).
//!
//! Only numbers change: every list keeps the same entries, sorted again, its tombstones
//! dropped; every document its terms and length. A search returns the same hits with the
//! same score bits before and after (scores depend on the counts and lengths alone, ties are
//! broken by id).

use super::{bits_of, LexicalIndex, Postings};

impl LexicalIndex {
    /// Number the documents named in `order` first, in that order, then the others in their
    /// present order; numbers of no document come last (the next new documents take them).
    /// Names that are unknown, or repeated after their first place, are ignored.
    pub fn renumber<S: AsRef<str>>(&mut self, order: &[S]) {
        let count = self.docs.len();
        let mut new_of_old = vec![u32::MAX; count];
        let mut next = 0u32; // < docs.len() <= 2^32: one per document number
        let mut place = |old: u32, next: &mut u32| {
            let slot = &mut new_of_old[old as usize];
            if *slot == u32::MAX {
                *slot = *next;
                *next += 1;
            }
        };
        for name in order {
            if let Some(&old) = self.ids.get(name.as_ref()) {
                place(old, &mut next);
            }
        }
        for old in 0..count {
            if self.docs[old].name.is_some() {
                place(old as u32, &mut next);
            }
        }
        let live = next as usize;
        for old in 0..count {
            if self.docs[old].name.is_none() {
                place(old as u32, &mut next);
            }
        }
        self.permute_documents(&new_of_old);
        for number in self.ids.values_mut() {
            *number = new_of_old[*number as usize];
        }
        // popped from the end: the lowest free number is taken first
        self.free_docs = (live as u32..count as u32).rev().collect();
        for (term, posting) in self.postings.iter_mut().enumerate() {
            renumber_list(posting, &new_of_old);
            if let Some(bits) = self.dense.get_mut(&(term as u32)) {
                *bits = bits_of(posting);
            }
        }
    }

    /// Move each document's own arrays (`docs`, `lengths`, `name_keys`) to its new number.
    fn permute_documents(&mut self, new_of_old: &[u32]) {
        let mut docs: Vec<_> = std::iter::repeat_with(Default::default)
            .take(self.docs.len())
            .collect();
        let mut lengths = vec![0.0; self.lengths.len()];
        let mut name_keys = vec![0; self.name_keys.len()];
        for (old, &new) in new_of_old.iter().enumerate() {
            let new = new as usize;
            docs[new] = std::mem::take(&mut self.docs[old]);
            lengths[new] = self.lengths[old];
            name_keys[new] = self.name_keys[old];
        }
        self.docs = docs;
        self.lengths = lengths;
        self.name_keys = name_keys;
    }
}

/// `posting`'s entries under their new numbers, in ascending order, without tombstones. Its
/// bounds (`max_tf`, `min_length`) hold for the same entries as before.
fn renumber_list(posting: &mut Postings, new_of_old: &[u32]) {
    let mut entries: Vec<(u32, f64)> = posting
        .docs
        .iter()
        .zip(&posting.tfs)
        .filter(|&(_, &tf)| tf != 0.0)
        .map(|(&doc, &tf)| (new_of_old[doc as usize], tf))
        .collect();
    entries.sort_unstable_by_key(|&(doc, _)| doc);
    posting.docs.clear();
    posting.tfs.clear();
    posting.docs.extend(entries.iter().map(|&(doc, _)| doc));
    posting.tfs.extend(entries.iter().map(|&(_, tf)| tf));
    posting.docs.shrink_to_fit();
    posting.tfs.shrink_to_fit();
    posting.sorted = entries.len() as u32; // < 2^32 (see `Postings::insert`)
    posting.dead = 0;
}

#[cfg(test)]
mod tests {
    use super::super::LexicalIndex;

    fn corpus() -> LexicalIndex {
        let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
        let docs = [
            ("p3", "read json file parse"),
            ("p1", "read csv file"),
            ("p7", "write json report"),
            ("p2", "parse json json"),
            ("p5", "send mail report"),
            ("p4", "read file"),
        ];
        for (id, text) in docs {
            let terms: Vec<&str> = text.split(' ').collect();
            index.add_terms(id, &terms).unwrap();
        }
        // a freed number and a tombstone in a list
        index.remove("p5");
        index.remove_terms("p4", &["file"]);
        index
    }

    const QUERIES: [&[&str]; 5] = [
        &["read", "file"],
        &["json", "parse"],
        &["report", "mail", "write"],
        &["csv"],
        &["read", "json", "file", "parse", "write"],
    ];

    fn answers(index: &LexicalIndex) -> Vec<Vec<(String, f64)>> {
        let mut out = Vec::new();
        for query in QUERIES {
            for limit in [1, 2, 10] {
                out.push(index.search(query, limit));
                out.push(index.search_exhaustive(query, limit));
            }
        }
        out
    }

    fn numbers(index: &LexicalIndex, ids: &[&str]) -> Vec<u32> {
        ids.iter().map(|id| index.ids[*id]).collect()
    }

    #[test]
    fn documents_take_the_order_given_and_answers_keep_their_bits() {
        let mut index = corpus();
        let before = answers(&index);
        index.renumber(&["p4", "p1", "p2", "p3", "p7"]);
        assert_eq!(
            numbers(&index, &["p4", "p1", "p2", "p3", "p7"]),
            [0, 1, 2, 3, 4]
        );
        let after = answers(&index);
        for (was, now) in before.iter().zip(&after) {
            assert_eq!(was.len(), now.len());
            for ((id, score), (id2, score2)) in was.iter().zip(now) {
                assert_eq!(id, id2);
                assert_eq!(score.to_bits(), score2.to_bits());
            }
        }
        for posting in &index.postings {
            assert!(posting.docs.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(posting.sorted as usize, posting.docs.len());
            assert_eq!(posting.dead, 0);
        }
    }

    #[test]
    fn unnamed_documents_follow_in_their_order_and_free_numbers_come_last() {
        let mut index = corpus();
        index.renumber(&["p7", "nope", "p7"]);
        // p7 first; then p3, p1, p2, p4 as they were numbered (p5's number was freed)
        assert_eq!(
            numbers(&index, &["p7", "p3", "p1", "p2", "p4"]),
            [0, 1, 2, 3, 4]
        );
        assert_eq!(index.free_docs, [5]);
        assert!(index.docs[5].name.is_none());
        // a new document takes the free number, and the index goes on updating
        index.add_terms("p9", &["mail", "json"]).unwrap();
        assert_eq!(index.ids["p9"], 5);
        index.remove_terms("p3", &["json"]);
        let fresh = {
            let mut fresh = LexicalIndex::new(1.2, 0.75).unwrap();
            for (id, text) in [
                ("p3", "read file parse"),
                ("p1", "read csv file"),
                ("p7", "write json report"),
                ("p2", "parse json json"),
                ("p4", "read"),
                ("p9", "mail json"),
            ] {
                let terms: Vec<&str> = text.split(' ').collect();
                fresh.add_terms(id, &terms).unwrap();
            }
            fresh
        };
        assert_eq!(answers(&index), answers(&fresh));
    }

    #[test]
    fn dense_bits_follow_the_new_numbers() {
        super::super::TEST_DENSE_MIN.set(Some(1));
        let mut index = corpus();
        index.renumber(&["p2", "p7", "p4"]);
        for (term, bits) in &index.dense {
            let posting = &index.postings[*term as usize];
            for &doc in &posting.docs {
                assert_ne!(bits[doc as usize / 64] & (1 << (doc % 64)), 0);
            }
            let set: u32 = bits.iter().map(|word| word.count_ones()).sum();
            assert_eq!(set as usize, posting.live());
        }
        super::super::TEST_DENSE_MIN.set(None);
    }
}
