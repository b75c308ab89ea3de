//! In-memory Okapi BM25 (Lucene's idf) over term documents that grow and shrink in place.
//!
//! The Python side tokenizes (snowball stemming is part of the ranking contract) and hands over
//! term lists; this module keeps the inverted index and scores. One document per pattern holds
//! the terms of all its intents and tools, added and removed one intent at a time
//! (`add_terms` / `remove_terms`), so nothing here rebuilds a document or a posting wholesale.
//!
//! Why not the `bm25` crate: its scorer fixes avgdl when a document's embedding is computed
//! (later upserts make older scores drift, by its own documentation), keeps f32 scores, and has
//! no per-document term add/remove. The ranking contract needs the live average document
//! length, float64 scores bit-identical to the former numpy implementation, and incremental
//! updates.
//!
//! Scoring, per query term in the caller's order: idf = ln_1p((N - df + 0.5) / (df + 0.5)),
//! gain = idf * (k1 + 1), norm = k1 * (1 - b) + k1 * b / avgdl * len,
//! score += gain * tf / (tf + norm); every operation in that order, in f64, so the sums are the
//! same bits as one document at a time. Results: the `limit` best documents with a score > 0,
//! ties broken by doc id ascending (byte order of UTF-8 = code point order, as Python's).
//!
//! `search` prunes (`prune.rs`, term at a time, and `daat.rs`, document at a time over the
//! lists kept in document order): it skips the postings of terms too common to change the top
//! `limit`, yet returns the same documents with the same score bits as scanning every posting.
//!
//! This type is not synchronized; the Python handle wraps it in an `RwLock`.

mod daat;
#[cfg(test)]
mod daat_tests;
mod prune;
#[cfg(test)]
mod prune_tests;
mod renumber;
mod search;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::error::{CoreError, CoreResult};

/// A term's posting list as two parallel arrays: internal document numbers and the term's
/// count in each (kept as f64, the type it is scored in; exact below 2^53). Separate arrays let
/// `search` run the BM25 division over contiguous counts, which the compiler vectorizes.
///
/// The first `sorted` entries are in ascending document order (`daat.rs` walks them document
/// at a time, skipping ahead); entries after them are a short unsorted tail,
/// documents that joined out of order (a document number reused, a term added to an older
/// document), merged in once the tail outgrows `tail_room`. A removal in the sorted part
/// leaves a tombstone (count 0, so it scores nothing) counted in `dead`, so nothing shifts;
/// the list is compacted once a quarter of it is dead (amortized O(1) moves a removal). An
/// update finds its entry by binary search (O(log n), plus the tail); an out-of-order insert
/// costs O(tail) and, amortized over the tail's room, the merge's moves (at most n / room).
/// Keeping the whole list sorted instead would move up to the whole list (8 MB for a term in
/// every document of a 1M index) on each out-of-order change.
///
/// `max_tf` and `min_length` bound the term's BM25 contribution for the pruning: never below
/// the largest count, never above the shortest document length in the list. They are only
/// pushed outwards (a removal leaves them loose, which is still sound) and reset when the list
/// empties.
#[derive(Debug)]
struct Postings {
    docs: Vec<u32>,
    tfs: Vec<f64>,
    max_tf: f64,
    min_length: f64,
    sorted: u32,
    dead: u32,
}

impl Default for Postings {
    fn default() -> Self {
        Postings {
            docs: Vec::new(),
            tfs: Vec::new(),
            max_tf: 0.0,
            min_length: f64::INFINITY,
            sorted: 0,
            dead: 0,
        }
    }
}

/// How long the unsorted tail of a list of `len` entries may grow before it is merged into the
/// sorted part. A search scores the tails' documents one by one from their own terms (about
/// 0.9 us each at 1M documents); a merge moves up to the whole list. A root of the length keeps
/// both bounded: at 1M, at most 282 documents a list scored, at most 3.5k entries moved per
/// out-of-order insert. Measured at 1M (`benches.profile.lexical_core --kinds`, one document in 50
/// emptied and filled again, numbers reused): re-adding cost 12.9 us a document with a
/// sixteenth of the root, 10.0 with a quarter, 8.7 with the whole root, the service bench's
/// queries after it 1.2 to 1.35 ms p50 in all three; a quarter bounds the worst search cost
/// at a quarter of the root's.
fn tail_room(len: usize) -> usize {
    // the root in f64 (integer isqrt is newer than the crate's MSRV); exact enough for a size
    32 + (len as f64).sqrt() as usize / 4
}

impl Postings {
    /// Documents holding the term (tombstones excluded): the document frequency.
    fn live(&self) -> usize {
        self.docs.len() - self.dead as usize
    }

    /// The sorted part: ascending document numbers, tombstones (count 0) included.
    fn sorted_part(&self) -> (&[u32], &[f64]) {
        let n = self.sorted as usize;
        (&self.docs[..n], &self.tfs[..n])
    }

    /// The unsorted tail's entries (never tombstones).
    fn tail(&self) -> (&[u32], &[f64]) {
        let n = self.sorted as usize;
        (&self.docs[n..], &self.tfs[n..])
    }

    /// Where `doc` sits (live or tombstone); the last entry first, where a document being
    /// filled has just put it.
    fn find(&self, doc: u32) -> Option<usize> {
        let last = self.docs.len().checked_sub(1)?;
        if self.docs[last] == doc {
            return Some(last);
        }
        let sorted = self.sorted as usize;
        if let Ok(at) = search_sorted(&self.docs[..sorted], doc) {
            return Some(at);
        }
        self.docs[sorted..]
            .iter()
            .position(|&d| d == doc)
            .map(|at| sorted + at)
    }

    /// Put `doc` in with count `tf`, the term not yet in that document.
    fn insert(&mut self, doc: u32, tf: f64) {
        let sorted = self.sorted as usize;
        if let Ok(at) = search_sorted(&self.docs[..sorted], doc) {
            // its tombstone (the number's former document had the term): revived in place
            debug_assert_eq!(self.tfs[at], 0.0);
            self.tfs[at] = tf;
            self.dead -= 1;
            return;
        }
        if self.docs.capacity() == 0 {
            // most terms stay in one document: no room for four
            self.docs.reserve_exact(1);
            self.tfs.reserve_exact(1);
        }
        let in_order = sorted == self.docs.len() && self.docs.last().map_or(true, |&d| d < doc);
        self.docs.push(doc);
        self.tfs.push(tf);
        if in_order {
            self.sorted += 1; // < 2^32: one entry per document number, itself a u32
        } else if self.docs.len() - sorted > tail_room(self.docs.len()) {
            self.merge_tail();
        }
    }

    /// Take out entry `at` (a live one).
    fn remove_at(&mut self, at: usize) {
        let sorted = self.sorted as usize;
        if at >= sorted {
            // the tail has no order to keep
            self.docs.swap_remove(at);
            self.tfs.swap_remove(at);
        } else {
            self.tfs[at] = 0.0;
            self.dead += 1;
        }
        if self.live() == 0 {
            self.docs.clear();
            self.tfs.clear();
            self.sorted = 0;
            self.dead = 0;
        } else if self.dead as usize * 4 > self.docs.len() {
            self.compact();
        }
    }

    /// Merge the tail into the sorted part, from the back: only the sorted entries above the
    /// tail's smallest document move (few, when the tail's documents are recent ones).
    fn merge_tail(&mut self) {
        let sorted = self.sorted as usize;
        let mut tail: Vec<(u32, f64)> = self.docs[sorted..]
            .iter()
            .copied()
            .zip(self.tfs[sorted..].iter().copied())
            .collect();
        tail.sort_unstable_by_key(|&(doc, _)| doc);
        let (mut head, mut out) = (sorted, self.docs.len());
        while let Some(&(doc, tf)) = tail.last() {
            out -= 1;
            if head > 0 && self.docs[head - 1] > doc {
                head -= 1;
                self.docs[out] = self.docs[head];
                self.tfs[out] = self.tfs[head];
            } else {
                self.docs[out] = doc;
                self.tfs[out] = tf;
                tail.pop();
            }
        }
        self.sorted = self.docs.len() as u32; // < 2^32 (see `insert`)
    }

    /// Drop the tombstones, keeping the order; the tail is merged first.
    fn compact(&mut self) {
        if (self.sorted as usize) < self.docs.len() {
            self.merge_tail();
        }
        let mut kept = 0;
        for i in 0..self.docs.len() {
            if self.tfs[i] != 0.0 {
                self.docs[kept] = self.docs[i];
                self.tfs[kept] = self.tfs[i];
                kept += 1;
            }
        }
        self.docs.truncate(kept);
        self.tfs.truncate(kept);
        self.docs.shrink_to(kept + kept / 8);
        self.tfs.shrink_to(kept + kept / 8);
        self.sorted = kept as u32; // < 2^32 (see `insert`)
        self.dead = 0;
    }
}

/// A term of one document: its count (a count beyond u32 is refused). Where the document sits
/// in the term's posting list is found by `Postings::find`: entries move when a list is merged
/// or compacted, so a stored position would have to be rewritten for every entry moved.
#[derive(Clone, Copy, Debug)]
struct DocTerm {
    tf: u32,
}

/// A document's terms, keyed by our own term numbers: a vector sorted by term number. A hash
/// map of them cost about 240 bytes a document at the bench's 13 terms (buckets rounded up to
/// a power of two, control bytes, the map header); this is 8 bytes a term. Lookups are a
/// binary search over a document's few dozen terms at most, as quick as hashing them.
#[derive(Debug, Default)]
struct DocTerms(Vec<(u32, DocTerm)>);

impl DocTerms {
    fn position(&self, term: u32) -> Result<usize, usize> {
        self.0.binary_search_by_key(&term, |(number, _)| *number)
    }

    fn get(&self, term: &u32) -> Option<&DocTerm> {
        self.position(*term).ok().map(|i| &self.0[i].1)
    }

    fn get_mut(&mut self, term: &u32) -> Option<&mut DocTerm> {
        self.position(*term).ok().map(|i| &mut self.0[i].1)
    }

    /// Insert a term not yet in the document.
    fn insert(&mut self, term: u32, entry: DocTerm) {
        match self.position(term) {
            Ok(i) => self.0[i].1 = entry,
            Err(i) => self.0.insert(i, (term, entry)),
        }
    }

    fn remove(&mut self, term: &u32) {
        if let Ok(i) = self.position(*term) {
            self.0.remove(i);
        }
    }

    fn keys(&self) -> impl Iterator<Item = &u32> {
        self.0.iter().map(|(number, _)| number)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Room for `more` terms: exactly that many on a new document (most get all their terms
    /// in one call), amortized growth after.
    fn reserve(&mut self, more: usize) {
        if self.0.capacity() == 0 {
            self.0.reserve_exact(more);
        } else {
            self.0.reserve(more);
        }
    }
}

impl IntoIterator for DocTerms {
    type Item = (u32, DocTerm);
    type IntoIter = std::vec::IntoIter<(u32, DocTerm)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[derive(Debug, Default)]
struct Doc {
    /// Shared with the id map's key (one copy of each id).
    name: Option<Arc<str>>,
    /// `search` looks terms up here to complete and rescore candidates.
    terms: DocTerms,
}

impl Doc {
    fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }
}

/// A BM25 inverted index keyed by non-empty string ids.
#[derive(Debug)]
pub struct LexicalIndex {
    k1: f64,
    b: f64,
    ids: HashMap<Arc<str>, u32>,
    /// Internal number -> document (no name marks a free number).
    docs: Vec<Doc>,
    /// Internal number -> document length in terms, as f64: the array `search` reads per
    /// posting, kept apart from `docs` so the hot loop touches only this.
    lengths: Vec<f64>,
    /// Internal number -> `search::name_key` of its id, for cheap tie-breaks.
    name_keys: Vec<u64>,
    free_docs: Vec<u32>,
    /// Term -> term number; the key is shared with `term_names` (one copy of each term: most
    /// terms of a real vocabulary occur in one or two documents, so per-term overhead counts).
    term_numbers: HashMap<Arc<str>, u32>,
    /// Term number -> term (None when free), to forget a term without scanning the map.
    term_names: Vec<Option<Arc<str>>>,
    postings: Vec<Postings>,
    /// Term number -> a bit per document number, set for the documents holding the term, for
    /// the terms in at least a sixteenth of the documents (`dense_min`): the walk intersects
    /// such lists a word of 64 documents at a time (`daat.rs`). A bit costs 1/8 byte a
    /// document, at most 2 bytes a posting of the term.
    /// (An Fx map: it is looked up for every posting added or removed, and its keys are our
    /// own small numbers, no input to guard against.)
    dense: FxHashMap<u32, Vec<u64>>,
    free_terms: Vec<u32>,
    total_length: u64,
}

impl LexicalIndex {
    /// An empty index; `k1 >= 0` and `0 <= b <= 1` (NaN refused).
    pub fn new(k1: f64, b: f64) -> CoreResult<Self> {
        if !(k1 >= 0.0 && k1.is_finite()) {
            return Err(invalid("k1", format!("must be finite and >= 0, got {k1}")));
        }
        if !(0.0..=1.0).contains(&b) {
            return Err(invalid("b", format!("must be between 0 and 1, got {b}")));
        }
        Ok(LexicalIndex {
            k1,
            b,
            ids: HashMap::new(),
            docs: Vec::new(),
            lengths: Vec::new(),
            name_keys: Vec::new(),
            free_docs: Vec::new(),
            term_numbers: HashMap::new(),
            term_names: Vec::new(),
            postings: Vec::new(),
            dense: FxHashMap::default(),
            free_terms: Vec::new(),
            total_length: 0,
        })
    }

    pub fn k1(&self) -> f64 {
        self.k1
    }

    pub fn b(&self) -> f64 {
        self.b
    }

    /// Number of documents (a document added with no terms counts, as it did before).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    pub fn contains(&self, doc_id: &str) -> bool {
        self.ids.contains_key(doc_id)
    }

    /// Index `terms` under `doc_id`, replacing what the id held before.
    pub fn add<S: AsRef<str>>(&mut self, doc_id: &str, terms: &[S]) -> CoreResult<()> {
        check_id(doc_id)?;
        self.remove(doc_id);
        self.add_terms(doc_id, terms)
    }

    /// Add `terms` (one entry per occurrence) to `doc_id`, created (possibly empty) if new.
    pub fn add_terms<S: AsRef<str>>(&mut self, doc_id: &str, terms: &[S]) -> CoreResult<()> {
        check_id(doc_id)?;
        let number = match self.ids.get(doc_id) {
            Some(&number) => number,
            None => self.new_doc(doc_id)?,
        };
        self.docs[number as usize].terms.reserve(terms.len());
        let mut joined: Vec<u32> = Vec::new();
        let mut outcome = Ok(());
        for term in terms {
            let term = match self.term_number(term.as_ref()) {
                Ok(term) => term,
                Err(err) => {
                    outcome = Err(err);
                    break;
                }
            };
            let doc = &mut self.docs[number as usize];
            let posting = &mut self.postings[term as usize];
            let tf = match doc.terms.get_mut(&term) {
                Some(entry) => {
                    let Some(tf) = entry.tf.checked_add(1) else {
                        outcome = Err(too_large("terms", "a term occurs 2^32 times in a document"));
                        break;
                    };
                    entry.tf = tf;
                    if let Some(at) = posting.find(number) {
                        posting.tfs[at] = f64::from(tf);
                    }
                    tf
                }
                None => {
                    doc.terms.insert(term, DocTerm { tf: 1 });
                    posting.insert(number, 1.0);
                    if let Some(bits) = self.dense.get_mut(&term) {
                        set_bit(bits, number);
                    } else if posting.live() >= dense_min(self.ids.len()) {
                        self.dense.insert(term, bits_of(posting));
                    }
                    joined.push(term);
                    1
                }
            };
            posting.max_tf = posting.max_tf.max(f64::from(tf));
            // per term, so the lengths stay true even if a later term fails
            self.lengths[number as usize] += 1.0;
            self.total_length += 1;
        }
        // the length the call leaves, not the one a term joined at: lengths only grow until
        // `remove_terms`, so this bounds the document from below and stays tight
        let length = self.lengths[number as usize];
        for term in joined {
            let posting = &mut self.postings[term as usize];
            posting.min_length = posting.min_length.min(length);
        }
        outcome
    }

    /// Take `terms` (one entry per occurrence, added before with `add_terms`) out of `doc_id`;
    /// the document disappears once it holds no term. Unknown ids and terms do nothing.
    pub fn remove_terms<S: AsRef<str>>(&mut self, doc_id: &str, terms: &[S]) {
        let Some(&number) = self.ids.get(doc_id) else {
            return;
        };
        let mut removed = 0u64;
        for term in terms {
            let Some(&term) = self.term_numbers.get(term.as_ref()) else {
                continue;
            };
            let Some(entry) = self.docs[number as usize].terms.get_mut(&term) else {
                continue;
            };
            removed += 1;
            if entry.tf > 1 {
                entry.tf -= 1;
                let tf = f64::from(entry.tf);
                let posting = &mut self.postings[term as usize];
                if let Some(at) = posting.find(number) {
                    posting.tfs[at] = tf;
                }
            } else {
                self.docs[number as usize].terms.remove(&term);
                self.unlink(term, number);
            }
        }
        self.lengths[number as usize] -= removed as f64;
        let length = self.lengths[number as usize];
        self.total_length -= removed;
        let doc = &self.docs[number as usize];
        if doc.terms.is_empty() {
            self.remove(doc_id);
        } else if removed > 0 {
            // the shorter document may now be the shortest of each list it is in
            for &term in doc.terms.keys() {
                let posting = &mut self.postings[term as usize];
                posting.min_length = posting.min_length.min(length);
            }
        }
    }

    /// Forget `doc_id`; returns whether it was there (deletions may be replayed).
    pub fn remove(&mut self, doc_id: &str) -> bool {
        let Some(number) = self.ids.remove(doc_id) else {
            return false;
        };
        let doc = std::mem::take(&mut self.docs[number as usize]);
        for (term, _) in doc.terms {
            self.unlink(term, number);
        }
        self.total_length -= self.lengths[number as usize] as u64;
        self.lengths[number as usize] = 0.0;
        self.free_docs.push(number);
        true
    }

    fn new_doc(&mut self, doc_id: &str) -> CoreResult<u32> {
        let number = match self.free_docs.pop() {
            Some(number) => number,
            None => {
                let number = u32::try_from(self.docs.len()).map_err(|_| {
                    too_large("doc_id", "would make more than 2^32 lexical documents")
                })?;
                self.docs.push(Doc::default());
                self.lengths.push(0.0);
                self.name_keys.push(0);
                number
            }
        };
        let name: Arc<str> = Arc::from(doc_id);
        self.docs[number as usize].name = Some(Arc::clone(&name));
        self.name_keys[number as usize] = search::name_key(doc_id);
        self.ids.insert(name, number);
        Ok(number)
    }

    fn term_number(&mut self, term: &str) -> CoreResult<u32> {
        if let Some(&number) = self.term_numbers.get(term) {
            return Ok(number);
        }
        let number = match self.free_terms.pop() {
            Some(number) => number,
            None => {
                let number = u32::try_from(self.postings.len())
                    .map_err(|_| too_large("terms", "would make more than 2^32 distinct terms"))?;
                self.postings.push(Postings::default());
                self.term_names.push(None);
                number
            }
        };
        let name: Arc<str> = Arc::from(term);
        self.term_names[number as usize] = Some(Arc::clone(&name));
        self.term_numbers.insert(name, number);
        Ok(number)
    }

    /// Take document `doc` out of `term`'s posting list; a term left without documents is
    /// forgotten so churned words do not pile up.
    fn unlink(&mut self, term: u32, doc: u32) {
        let posting = &mut self.postings[term as usize];
        if let Some(at) = posting.find(doc) {
            posting.remove_at(at);
        }
        if let Some(bits) = self.dense.get_mut(&term) {
            bits[doc as usize / 64] &= !(1u64 << (doc % 64));
            // halfway under the threshold, so a term at the edge is not rebuilt back and forth
            if posting.live() == 0 || posting.live() < dense_min(self.ids.len()) / 2 {
                self.dense.remove(&term);
            }
        }
        if posting.live() == 0 {
            posting.max_tf = 0.0;
            posting.min_length = f64::INFINITY;
            if let Some(name) = self.term_names[term as usize].take() {
                self.term_numbers.remove(&name);
            }
            self.free_terms.push(term);
        }
    }
}

/// The first index at or after `from` whose document is >= `target` (`docs` ascending).
///
/// The lists' documents spread about evenly over the numbers, so the first probe is where the
/// target would sit at the list's average density from `from`; doubling steps from it bracket
/// the target, a binary search ends. On the service bench's lists at 1M documents that is a
/// few probes where doubling steps from `from` alone took about twice as many and a binary
/// search of a whole list twenty, each a likely cache miss on a long list.
fn seek(docs: &[u32], from: usize, target: u64) -> usize {
    let len = docs.len();
    if from >= len || u64::from(docs[from]) >= target {
        return from;
    }
    let (here, last) = (u64::from(docs[from]), u64::from(docs[len - 1]));
    if last < target {
        return len;
    }
    // docs[low] < target <= docs[high]
    let (mut low, mut high) = (from, len - 1);
    if u64::from(docs[low + 1]) >= target {
        return low + 1; // the next entry: most skips in a dense list, no division needed
    }
    // in f64: a u64 division costs several times a float one, and this runs per skip
    let share = (target - here) as f64 / (last - here) as f64;
    let guess = low + ((high - low) as f64 * share) as usize;
    let guess = guess.clamp(low + 1, high);
    if u64::from(docs[guess]) < target {
        low = guess;
        let mut step = 1;
        while low + step < high && u64::from(docs[low + step]) < target {
            low += step;
            step *= 2;
        }
        high = high.min(low + step);
    } else {
        high = guess;
        let mut step = 1;
        while step < high - low && u64::from(docs[high - step]) >= target {
            high -= step;
            step *= 2;
        }
        low = low.max(high.saturating_sub(step));
    }
    low + 1 + docs[low + 1..high].partition_point(|&d| u64::from(d) < target)
}

/// `binary_search` of the sorted part by `seek`.
fn search_sorted(docs: &[u32], doc: u32) -> Result<usize, usize> {
    let at = seek(docs, 0, u64::from(doc));
    if docs.get(at) == Some(&doc) {
        Ok(at)
    } else {
        Err(at)
    }
}

/// Fewer documents than this hold a term: its list gets no bits (`LexicalIndex::dense`).
fn dense_min(docs: usize) -> usize {
    #[cfg(test)]
    if let Some(min) = TEST_DENSE_MIN.get() {
        return min;
    }
    (docs / 16).max(4096)
}

#[cfg(test)]
thread_local! {
    /// Replaces `dense_min`, so small test corpora get bits too.
    pub(super) static TEST_DENSE_MIN: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

fn set_bit(bits: &mut Vec<u64>, doc: u32) {
    let word = doc as usize / 64;
    if word >= bits.len() {
        bits.resize(word + 1, 0);
    }
    bits[word] |= 1u64 << (doc % 64);
}

/// The bits of the documents `posting` holds (tombstones excluded).
fn bits_of(posting: &Postings) -> Vec<u64> {
    let mut bits = Vec::new();
    for (&doc, &tf) in posting.docs.iter().zip(&posting.tfs) {
        if tf != 0.0 {
            set_bit(&mut bits, doc);
        }
    }
    bits
}

fn check_id(doc_id: &str) -> CoreResult<()> {
    if doc_id.is_empty() {
        return Err(invalid("doc_id", "must be a non-empty string"));
    }
    Ok(())
}

fn invalid(field: &str, reason: impl Into<String>) -> CoreError {
    CoreError::InvalidArgument {
        field: field.to_owned(),
        reason: reason.into(),
    }
}

fn too_large(field: &str, reason: &str) -> CoreError {
    CoreError::TooLarge {
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}
