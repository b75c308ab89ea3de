//! The document-at-a-time walk (`daat.rs`) against the one-document-at-a-time reference, bit
//! for bit, on corpora churned so the posting lists carry unsorted tails and tombstones; and
//! the lists' order kept through adds, removals and reused document numbers.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::daat::{Cursor, WALK_REQUIRED};
use super::prune::{LAST_DAAT, TEST_COSTS, TEST_DAAT, TEST_FORWARD};
use super::tests::{apply, reference_with, suggest_shaped, Op};
use super::{LexicalIndex, TEST_DENSE_MIN};

type Corpus = BTreeMap<String, Vec<String>>;

fn bits(hits: &[(String, f64)]) -> Vec<(String, u64)> {
    hits.iter().map(|(d, s)| (d.clone(), s.to_bits())).collect()
}

/// `search` switching to the walk before list `at` (0: the walk alone), seen documents
/// scored in full before every list or never; returns whether the walk ran.
fn search_daat(
    index: &LexicalIndex,
    query: &[&str],
    limit: usize,
    at: usize,
    forward: Option<bool>,
) -> (Vec<(String, f64)>, bool) {
    TEST_DAAT.set(Some(at));
    TEST_FORWARD.set(forward);
    TEST_COSTS.set(Some(usize::MAX)); // prune whatever it costs
    let hits = index.search(query, limit);
    let walked = LAST_DAAT.get();
    TEST_COSTS.set(None);
    TEST_FORWARD.set(None);
    TEST_DAAT.set(None);
    (hits, walked)
}

/// Every way into the walk agrees with the reference to the bit.
fn check(index: &LexicalIndex, docs: &Corpus, query: &[&str], limit: usize) {
    let want = bits(&reference_with(index.k1(), index.b(), docs, query, limit));
    assert_eq!(bits(&index.search_exhaustive(query, limit)), want);
    for at in [0, 1, 2] {
        for forward in [Some(true), Some(false)] {
            let (hits, _) = search_daat(index, query, limit, at, forward);
            assert_eq!(bits(&hits), want, "{query:?} {limit} at {at} {forward:?}");
        }
    }
}

/// The posting lists' invariants: the sorted part ascending, each document once, the dead
/// count true, the tail without tombstones, every live entry the document's own count.
fn assert_lists_sound(index: &LexicalIndex) {
    for (term, posting) in index.postings.iter().enumerate() {
        let (sorted, sorted_tfs) = posting.sorted_part();
        assert!(
            sorted.windows(2).all(|w| w[0] < w[1]),
            "term {term} unsorted"
        );
        let dead = sorted_tfs.iter().filter(|&&tf| tf == 0.0).count();
        assert_eq!(dead, posting.dead as usize, "term {term} dead count");
        let (tail, tail_tfs) = posting.tail();
        assert!(tail_tfs.iter().all(|&tf| tf > 0.0));
        let mut all: Vec<u32> = sorted.iter().chain(tail).copied().collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(
            all.len(),
            posting.docs.len(),
            "term {term} holds a document twice"
        );
        for (&doc, &tf) in posting.docs.iter().zip(&posting.tfs) {
            if tf > 0.0 {
                let held = index.docs[doc as usize].terms.get(&(term as u32));
                assert_eq!(
                    held.map(|t| f64::from(t.tf)),
                    Some(tf),
                    "term {term} doc {doc}"
                );
            }
        }
        // a term's bits, if it has them, are exactly its live documents
        if let Some(bits) = index.dense.get(&(term as u32)) {
            let mut live: Vec<u32> = posting
                .docs
                .iter()
                .zip(&posting.tfs)
                .filter(|(_, &tf)| tf > 0.0)
                .map(|(&doc, _)| doc)
                .collect();
            live.sort_unstable();
            let set: Vec<u32> = (0..bits.len() * 64)
                .filter(|&d| bits[d / 64] >> (d % 64) & 1 == 1)
                .map(|d| d as u32)
                .collect();
            assert_eq!(set, live, "term {term} bits");
        }
    }
    // no bits left for a forgotten term
    for term in index.dense.keys() {
        assert!(
            index.term_names[*term as usize].is_some(),
            "bits of free term {term}"
        );
    }
}

/// Build with every term of at least `min` documents given bits (None: the real threshold).
fn with_dense_min<T>(min: Option<usize>, build: impl FnOnce() -> T) -> T {
    TEST_DENSE_MIN.set(min);
    let built = build();
    TEST_DENSE_MIN.set(None);
    built
}

/// Word `w` of a skewed vocabulary (as `prune_tests`): z0 about half the time, z1 a quarter,
/// ..., and uniform rare words r0..r15.
fn word(w: u8) -> String {
    if w < 64 {
        format!("z{}", w.trailing_zeros().min(7))
    } else {
        format!("r{}", w % 16)
    }
}

fn op() -> impl Strategy<Value = Op> {
    let doc = 0u8..200;
    let text = proptest::collection::vec(0u8..80, 0..6);
    prop_oneof![
        3 => (doc.clone(), text.clone()).prop_map(|(d, t)| Op::Add(d, t)),
        2 => (doc.clone(), text.clone()).prop_map(|(d, t)| Op::AddTerms(d, t)),
        2 => (doc.clone(), text).prop_map(|(d, t)| Op::RemoveTerms(d, t)),
        1 => doc.prop_map(Op::Remove),
    ]
}

#[test]
fn the_walk_runs_when_asked_and_skips_nothing_it_should_not() {
    // "z0" in every document, "z1" in half, "r3" in a few: the walk alone, and after the rare
    // list was scanned
    let docs: Corpus = (0..400)
        .map(|i| {
            let mut terms = vec!["z0".to_owned()];
            if i % 2 == 0 {
                terms.push("z1".to_owned());
            }
            if i % 50 == 3 {
                terms.push("r3".to_owned());
            }
            terms.extend((0..i % 3).map(|j| format!("pad{j}")));
            (format!("d{i:03}"), terms)
        })
        .collect();
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    for (id, terms) in &docs {
        index.add(id, terms).unwrap();
    }
    for limit in [1, 5, 8, 9, 40, 500] {
        check(&index, &docs, &["z0", "z1", "r3"], limit);
        check(&index, &docs, &["r3", "z1"], limit);
        let (_, walked) = search_daat(&index, &["z0", "z1", "r3"], limit, 0, None);
        assert!(walked);
    }
    // never asked: the term-at-a-time search alone
    let (_, walked) = search_daat(&index, &["z0", "z1", "r3"], 5, usize::MAX, None);
    assert!(!walked);
}

#[test]
fn ties_at_the_limit_walked_keep_the_smallest_ids() {
    // 40 identical documents added in an order unrelated to their ids, so the walk meets the
    // tie in document-number order, not id order
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    let mut docs = Corpus::new();
    for i in 0..240usize {
        let (id, terms) = if i % 6 == 0 {
            let t = (i / 6 * 17) % 40;
            (
                format!("t{t:02}"),
                vec!["match".to_owned(), "all".to_owned()],
            )
        } else {
            (format!("o{i:03}"), vec!["all".to_owned()])
        };
        index.add(&id, &terms).unwrap();
        docs.insert(id, terms);
    }
    for limit in [1, 5, 39, 40, 41, 300] {
        check(&index, &docs, &["all", "match"], limit);
    }
}

#[test]
fn common_words_found_by_intersecting_the_required_lists() {
    for dense in [None, Some(40)] {
        with_dense_min(dense, || common_words_case(dense.is_some()));
    }
}

fn common_words_case(bits: bool) {
    // a query whose rare word is in one document and whose common words all the top ones
    // share: once theta holds those, each common word is required, and the walk intersects
    // their lists; documents are added out of id order, some removed and re-added (numbers
    // reused, tails), and old ones gain a word (out of order)
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    let mut docs = Corpus::new();
    for i in 0..3000usize {
        let j = (i * 1999) % 3000;
        let id = format!("p{j}");
        index.add(&id, &suggest_shaped(j)).unwrap();
        docs.insert(id, suggest_shaped(j));
    }
    for j in (0..3000).step_by(37) {
        let id = format!("p{j}");
        index.remove(&id);
        docs.remove(&id);
    }
    for j in (0..3000).step_by(74) {
        let id = format!("p{j}");
        index.add(&id, &suggest_shaped(j)).unwrap();
        docs.insert(id, suggest_shaped(j));
    }
    for j in (5..3000).step_by(61) {
        let id = format!("p{j}");
        if docs.contains_key(&id) {
            index.add_terms(&id, &["weekly"]).unwrap();
            docs.get_mut(&id).unwrap().push("weekly".to_owned());
        }
    }
    assert_lists_sound(&index);
    let mut required = 0;
    for (j, limit) in [
        (3usize, 1usize),
        (17, 5),
        (42, 9),
        (99, 10),
        (123, 11),
        (7, 40),
    ] {
        let i = j * 7 % 3000;
        let mut query = suggest_shaped(i)[..suggest_shaped(i).len() - 2].to_vec();
        query.push(format!("run{j}")); // not indexed
        let query: Vec<&str> = query.iter().map(String::as_str).collect();
        check(&index, &docs, &query, limit);
        search_daat(&index, &query, limit, 0, Some(false));
        required = required.max(WALK_REQUIRED.get());
    }
    assert!(
        required >= 3,
        "the walk never required three terms: {required}"
    );
    // the common words' lists have bits when asked, none under the real threshold
    assert_eq!(!index.dense.is_empty(), bits);
}

#[test]
fn lists_stay_sorted_through_reused_numbers_and_out_of_order_terms() {
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    let mut docs = Corpus::new();
    for i in 0..3000u32 {
        // documents come and go (numbers reused), old ones gain words (out of order)
        let d = (i * 7919) % 61;
        let text: Vec<u8> = (0..(i % 5) as u8)
            .map(|k| (i as u8).wrapping_mul(k + 3))
            .collect();
        let op = match i % 4 {
            0 => Op::Add(d as u8, text),
            1 => Op::AddTerms(d as u8, text),
            2 => Op::RemoveTerms(d as u8, text),
            _ => Op::Remove(((d * 3) % 60) as u8),
        };
        apply(&mut index, &mut docs, &op, word);
        if i % 97 == 0 {
            assert_lists_sound(&index);
            check(&index, &docs, &["z0", "z2", "r5", "z1"], 7);
        }
    }
    assert_lists_sound(&index);
    // the churn did leave tails and tombstones for the walk to meet
    let tails: usize = index.postings.iter().map(|p| p.tail().0.len()).sum();
    let dead: u32 = index.postings.iter().map(|p| p.dead).sum();
    assert!(tails > 0 && dead > 0, "tails {tails} dead {dead}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn a_cursor_advances_to_the_first_live_document_at_or_after_the_target(
        gaps in proptest::collection::vec((1u32..2000, proptest::bool::weighted(0.2)), 0..300),
        targets in proptest::collection::vec(0u64..700_000, 1..40),
    ) {
        // uneven gaps (the interpolated first probe lands anywhere) and tombstones
        let mut docs = Vec::new();
        let mut tfs = Vec::new();
        let mut doc = 0u32;
        for (gap, dead) in gaps {
            doc += gap * gap / 8 + 1;
            docs.push(doc);
            tfs.push(if dead { 0.0 } else { 1.0 });
        }
        let mut targets = targets;
        targets.sort_unstable();
        let mut cursor = Cursor { docs: &docs, tfs: &tfs, pos: 0, term: 0, gain: 1.0, bound: 1.0, bits: None };
        while cursor.pos < docs.len() && tfs[cursor.pos] == 0.0 {
            cursor.pos += 1;
        }
        for target in targets {
            let from = cursor.pos;
            cursor.advance(target);
            let want = (from..docs.len())
                .find(|&i| u64::from(docs[i]) >= target && tfs[i] != 0.0)
                .unwrap_or(docs.len());
            // a live position already at or past the target stays
            let want = if from < docs.len() && u64::from(docs[from]) >= target { from } else { want };
            prop_assert_eq!(cursor.pos, want, "target {}", target);
        }
    }

    #[test]
    fn churned_corpora_walk_to_the_exhaustive_bits(
        ops in proptest::collection::vec(op(), 0..150),
        query in proptest::collection::vec(0u8..80, 0..9),
        params in (0usize..4, 0usize..4),
        limit in 0usize..15,
        dense in proptest::option::of(1usize..12),
    ) {
        let k1 = [0.0, 0.5, 1.2, 3.0][params.0];
        let b = [0.0, 0.5, 0.75, 1.0][params.1];
        let mut index = LexicalIndex::new(k1, b).unwrap();
        let mut docs = Corpus::new();
        // terms of a few documents get bits, which come and go with the churn
        with_dense_min(dense, || {
            for op in &ops {
                apply(&mut index, &mut docs, op, word);
            }
        });
        assert_lists_sound(&index);
        let query: Vec<String> = query.iter().map(|&w| word(w)).collect();
        let query: Vec<&str> = query.iter().map(String::as_str).collect();
        let want = bits(&reference_with(k1, b, &docs, &query, limit));
        prop_assert_eq!(bits(&index.search_exhaustive(&query, limit)), want.clone());
        for at in [0, 1, 3] {
            for forward in [Some(true), Some(false)] {
                let (hits, _) = search_daat(&index, &query, limit, at, forward);
                prop_assert_eq!(bits(&hits), want.clone(), "at {} {:?}", at, forward);
            }
        }
        prop_assert_eq!(bits(&index.search(&query, limit)), want);
    }
}
