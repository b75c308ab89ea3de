//! The pruned `search` against `search_exhaustive` and the one-document-at-a-time reference,
//! bit for bit, on crafted cases and random Zipf-shaped corpora; and checks that pruning does
//! skip terms where it should.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::prune::{LAST_SCAN, TEST_COSTS, TEST_FORWARD};
use super::tests::{reference_with, suggest_shaped};
use super::LexicalIndex;

type Corpus = BTreeMap<String, Vec<String>>;

fn bits(hits: &[(String, f64)]) -> Vec<(String, u64)> {
    hits.iter().map(|(d, s)| (d.clone(), s.to_bits())).collect()
}

fn index_of(k1: f64, b: f64, docs: &Corpus) -> LexicalIndex {
    let mut index = LexicalIndex::new(k1, b).unwrap();
    for (id, terms) in docs {
        index.add(id, terms).unwrap();
    }
    index
}

/// `search` under the real cost model (None), then pruning whatever it costs with every
/// completion by lookups (Some(0)) or by list walks (Some(MAX)).
const COST_MODELS: [Option<usize>; 3] = [None, Some(0), Some(usize::MAX)];

fn search_with(
    index: &LexicalIndex,
    query: &[&str],
    limit: usize,
    cost: Option<usize>,
) -> Vec<(String, f64)> {
    TEST_COSTS.set(cost);
    let hits = index.search(query, limit);
    TEST_COSTS.set(None);
    hits
}

/// Pruned (each cost model), exhaustive and reference searches agree to the bit; returns the
/// hits of the last pruned search (every completion by list walks).
fn check(index: &LexicalIndex, docs: &Corpus, query: &[&str], limit: usize) -> Vec<(String, f64)> {
    let want = reference_with(index.k1(), index.b(), docs, query, limit);
    let exhaustive = index.search_exhaustive(query, limit);
    assert_eq!(
        bits(&exhaustive),
        bits(&want),
        "query {query:?} limit {limit}"
    );
    let mut pruned = Vec::new();
    for cost in COST_MODELS {
        pruned = search_with(index, query, limit, cost);
        assert_eq!(
            bits(&pruned),
            bits(&want),
            "query {query:?} limit {limit} cost {cost:?}"
        );
    }
    pruned
}

/// 300 documents: "common" in all, "often" in every 3rd, "rare{i % 50}" in each, and a
/// few distinct fillers so lengths differ.
fn zipf_corpus() -> Corpus {
    (0..300)
        .map(|i| {
            let mut terms = vec!["common".to_owned(), format!("rare{}", i % 50)];
            if i % 3 == 0 {
                terms.push("often".to_owned());
            }
            terms.extend((0..i % 4).map(|j| format!("pad{j}")));
            (format!("d{i:03}"), terms)
        })
        .collect()
}

#[test]
fn a_term_in_every_document_is_skipped_and_results_stay_the_same() {
    let docs = zipf_corpus();
    let index = index_of(1.2, 0.75, &docs);
    for limit in [1, 3, 6, 7, 20] {
        // rare7 is in 6 documents, all with equal scores but for their lengths
        let hits = check(&index, &docs, &["common", "often", "rare7"], limit);
        assert!(hits.len() <= limit);
    }
    check(&index, &docs, &["common", "often", "rare7"], 3);
    for cost in COST_MODELS {
        search_with(&index, &["common", "often", "rare7"], 3, cost);
        let (scanned, terms, fell_back) = LAST_SCAN.get();
        assert_eq!(terms, 3);
        assert!(scanned < terms, "common was scanned");
        assert!(!fell_back);
    }
}

#[test]
fn ties_at_the_limit_keep_the_smallest_ids() {
    // 40 identical documents: every limit cuts through a tie
    let mut docs: Corpus = (0..40)
        .map(|i| {
            (
                format!("t{i:02}"),
                vec!["match".to_owned(), "all".to_owned()],
            )
        })
        .collect();
    docs.extend((0..200).map(|i| (format!("o{i:03}"), vec!["all".to_owned()])));
    let index = index_of(1.2, 0.75, &docs);
    for limit in [1, 5, 39, 40, 41, 300] {
        let hits = check(&index, &docs, &["all", "match"], limit);
        if limit <= 40 {
            let ids: Vec<String> = (0..limit).map(|i| format!("t{i:02}")).collect();
            assert_eq!(hits.iter().map(|h| h.0.clone()).collect::<Vec<_>>(), ids);
        }
    }
}

#[test]
fn every_k1_and_b_extreme_prunes_exactly() {
    let docs = zipf_corpus();
    for (k1, b) in [(0.0, 0.75), (1.2, 0.0), (1.2, 1.0), (0.0, 0.0), (3.0, 1.0)] {
        let index = index_of(k1, b, &docs);
        for limit in [1, 4, 10] {
            check(&index, &docs, &["rare3", "common", "often", "pad2"], limit);
            check(&index, &docs, &["often", "common"], limit);
        }
    }
}

#[test]
fn empty_documents_repeats_and_limits_beyond_the_matches() {
    let mut docs = zipf_corpus();
    docs.insert("empty".to_owned(), Vec::new());
    let index = index_of(1.2, 0.75, &docs);
    let hits = check(
        &index,
        &docs,
        &["rare1", "rare1", "nowhere", "rare2", "rare1"],
        50,
    );
    assert_eq!(hits.len(), 12);
    check(&index, &docs, &["nowhere"], 5);
    check(&index, &docs, &["common"], 1000);
}

#[test]
fn bounds_stay_sound_when_documents_shrink_and_grow() {
    let mut docs = zipf_corpus();
    let mut index = index_of(1.2, 0.75, &docs);
    // shrink some documents below the shortest length each posting list has seen, and grow
    // others: the bounds must keep covering them
    for i in (0..300).step_by(7) {
        let id = format!("d{i:03}");
        let pads: Vec<String> = (0..i % 4).map(|j| format!("pad{j}")).collect();
        index.remove_terms(&id, &pads);
        let held = docs.get_mut(&id).unwrap();
        held.retain(|t| !t.starts_with("pad"));
        index.add_terms(&id, &["often", "often"]).unwrap();
        held.extend(["often".to_owned(), "often".to_owned()]);
    }
    for limit in [1, 5, 30] {
        check(&index, &docs, &["often", "common", "rare9"], limit);
        check(&index, &docs, &["common", "pad1", "often"], limit);
    }
}

#[test]
fn a_document_shrunk_below_every_other_length_is_still_found() {
    // "w" is only in long documents, so its bound is small; then "hit" drops to one term and
    // scores far above that bound: skipping "w" would lose it
    let long = |head: &str| -> Vec<String> {
        std::iter::once(head.to_owned())
            .chain(std::iter::repeat_n("pad".to_owned(), 39))
            .collect()
    };
    let mut docs: Corpus = (0..100)
        .map(|i| (format!("s{i:03}"), vec!["filler".to_owned()]))
        .collect();
    docs.extend((0..20).map(|i| (format!("w{i:02}"), long("w"))));
    docs.extend((0..3).map(|i| (format!("q{i}"), long("q"))));
    docs.insert("hit".to_owned(), long("w"));
    let mut index = index_of(1.2, 0.75, &docs);
    let pads = vec!["pad"; 39];
    index.remove_terms("hit", &pads);
    docs.insert("hit".to_owned(), vec!["w".to_owned()]);
    let hits = check(&index, &docs, &["q", "w"], 3);
    assert_eq!(hits[0].0, "hit");
}

#[test]
fn many_exact_ties_fall_back_to_the_full_scan_and_leave_no_trace() {
    // every document holds every query word, 100 of them tie at the top: rescoring them one
    // by one would cost more than scanning every list
    let mut docs: Corpus = (0..300)
        .map(|i| (format!("x{i:03}"), words_of("a b c")))
        .collect();
    docs.extend((0..100).map(|i| (format!("y{i:03}"), words_of("a b c c"))));
    let index = index_of(1.2, 0.75, &docs);
    let hits = search_with(&index, &["a", "b", "c"], 5, None);
    assert!(LAST_SCAN.get().2, "no fallback: {:?}", LAST_SCAN.get());
    let ids: Vec<&str> = hits.iter().map(|h| h.0.as_str()).collect();
    assert_eq!(ids, ["y000", "y001", "y002", "y003", "y004"]);
    // the scratch was cleaned: the next searches are exact too
    check(&index, &docs, &["a", "b", "c"], 5);
    check(&index, &docs, &["c", "a"], 120);
}

/// The service bench's intents (`benches/harness/service_workload.py`): verb, object words and place
/// words repeat with a period of 480 documents, each document has a unique `batch{i}` and its
/// two tool words. Ten documents share each intent's words and length.
fn suggest_shaped_corpus(n: usize) -> Corpus {
    (0..n)
        .map(|i| {
            let mut terms = suggest_shaped(i);
            // a shelf of 600 documents holds each intent (verb, object, place) 10 times,
            // however big the corpus: the ties at the limit stay 10 while the lists grow.
            // Before the batch and tool words, where it was: the queries take a document's
            // words but its last two (the tool words).
            terms.insert(terms.len() - 3, format!("shelf{}", i / 600));
            (format!("p{i}"), terms)
        })
        .collect()
}

#[test]
fn suggest_shaped_queries_skip_common_terms_with_ties_at_the_limit() {
    // 6,000 documents: a query's intent and shelf words are shared by 10 documents of equal
    // length, so every limit between 2 and 10 cuts through an exact tie; limits go beyond the
    // matches. At 600 documents the scan of every list is the cheaper plan, and the cost model
    // rightly takes it: the corpus is big enough for pruning to pay.
    let docs = suggest_shaped_corpus(6000);
    let index = index_of(1.2, 0.75, &docs);
    for (j, limit) in [
        (3usize, 1usize),
        (17, 2),
        (42, 5),
        (99, 9),
        (123, 10),
        (7, 40),
        (8, 7000),
    ] {
        let i = j * 7 % 6000;
        let mut query: Vec<String> =
            docs[&format!("p{i}")][..docs[&format!("p{i}")].len() - 2].to_vec();
        query.extend(["quick".to_owned(), format!("run{j}")]); // not indexed
        let query: Vec<&str> = query.iter().map(String::as_str).collect();
        let hits = check(&index, &docs, &query, limit);
        assert_eq!(
            hits[0].0,
            format!("p{i}"),
            "its own batch word ranks it first"
        );
        let ties = hits[1..].iter().filter(|h| h.1 == hits[1].1).count();
        assert!(limit < 3 || ties >= 2, "no tie at limit {limit}: {hits:?}");
        if limit <= 10 {
            // the real cost model prunes: the place words (in a third of the documents) are
            // never scanned in full, and the ties are rescored rather than the lists rescanned
            search_with(&index, &query, limit, None);
            let (scanned, terms, fell_back) = LAST_SCAN.get();
            assert!(
                scanned < terms && !fell_back,
                "limit {limit}: {:?}",
                LAST_SCAN.get()
            );
        }
    }
}

/// `search` with the seen documents scored in full before every list (Some(true)), never
/// (Some(false)) or as the cost model says (None), under each cost model of the rest.
fn search_forward(
    index: &LexicalIndex,
    query: &[&str],
    limit: usize,
    forward: Option<bool>,
    cost: Option<usize>,
) -> Vec<(String, f64)> {
    TEST_FORWARD.set(forward);
    let hits = search_with(index, query, limit, cost);
    TEST_FORWARD.set(None);
    hits
}

const FORWARD_MODES: [Option<bool>; 3] = [None, Some(true), Some(false)];

#[test]
fn a_few_rare_matches_scored_in_full_end_the_search_before_the_common_lists() {
    // "rare7" is in 30 of 3,000 documents, "half0" in 1,500 and "everywhere" in all: the 30
    // scored in full outscore anything the two common words can give
    let docs: Corpus = (0..3000)
        .map(|i| {
            let mut terms = vec![
                "everywhere".to_owned(),
                format!("half{}", i % 2),
                format!("rare{}", i % 100),
            ];
            terms.extend((0..i % 5).map(|j| format!("pad{j}")));
            (format!("d{i:04}"), terms)
        })
        .collect();
    let index = index_of(1.2, 0.75, &docs);
    for query in [
        &["everywhere", "half0", "rare7"][..],
        &["half1", "rare7", "everywhere"],
        &["rare8", "half0", "rare9", "everywhere"],
    ] {
        for limit in [1, 5, 30, 31, 45] {
            let want = bits(&reference_with(1.2, 0.75, &docs, query, limit));
            for forward in FORWARD_MODES {
                for cost in COST_MODELS {
                    let hits = search_forward(&index, query, limit, forward, cost);
                    assert_eq!(bits(&hits), want, "{query:?} {limit} {forward:?} {cost:?}");
                }
            }
        }
        // under the real cost models the rare lists alone are scanned
        search_forward(&index, query, 5, None, None);
        let (scanned, terms, fell_back) = LAST_SCAN.get();
        let rare = query.iter().filter(|t| t.starts_with("rare")).count();
        assert_eq!((scanned, terms, fell_back), (rare, query.len(), false));
    }
}

#[test]
fn ties_at_the_limit_scored_in_full_keep_the_smallest_ids() {
    // the suggest-shaped corpus's ties, every search scoring the seen documents in full
    let docs = suggest_shaped_corpus(6000);
    let index = index_of(1.2, 0.75, &docs);
    for (j, limit) in [(3usize, 1usize), (42, 5), (123, 10), (7, 40)] {
        let i = j * 7 % 6000;
        let held = &docs[&format!("p{i}")];
        let query: Vec<&str> = held[..held.len() - 2].iter().map(String::as_str).collect();
        let want = bits(&reference_with(1.2, 0.75, &docs, &query, limit));
        for forward in FORWARD_MODES {
            for cost in COST_MODELS {
                let hits = search_forward(&index, &query, limit, forward, cost);
                assert_eq!(
                    bits(&hits),
                    want,
                    "j {j} limit {limit} {forward:?} {cost:?}"
                );
            }
        }
    }
}

fn words_of(text: &str) -> Vec<String> {
    text.split(' ').map(str::to_owned).collect()
}

/// Word `w` of a skewed vocabulary: 0 about half the time, 1 a quarter... (Zipf-like), and
/// uniform rare words from 8 up.
fn word(w: u8) -> String {
    if w < 64 {
        format!("z{}", w.trailing_zeros().min(7))
    } else {
        format!("r{}", w % 16)
    }
}

fn corpus(texts: &[Vec<u8>], picks: &[usize]) -> Corpus {
    picks
        .iter()
        .enumerate()
        .map(|(i, &p)| {
            let text = &texts[p % texts.len()];
            (format!("d{i}"), text.iter().map(|&w| word(w)).collect())
        })
        .collect()
}

/// Take the first term out of each listed document (index and reference corpus alike), a
/// document left empty leaving the corpus: lengths fall below the recorded minimums.
fn drop_first_terms(index: &mut LexicalIndex, docs: &mut Corpus, shrink: &[usize]) {
    for i in shrink {
        let id = format!("d{i}");
        if let Some(held) = docs.get_mut(&id) {
            if let Some(first) = held.first().cloned() {
                index.remove_terms(&id, &[first.as_str()]);
                held.remove(0);
                if held.is_empty() {
                    docs.remove(&id);
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn random_skewed_corpora_prune_to_the_exhaustive_bits(
        // few distinct texts picked many times: plenty of exact ties
        texts in proptest::collection::vec(proptest::collection::vec(0u8..80, 0..8), 1..12),
        picks in proptest::collection::vec(0usize..12, 0..120),
        query in proptest::collection::vec(0u8..80, 0..9),
        params in (0usize..4, 0usize..4),
        limit in 0usize..15,
        shrink in proptest::collection::vec(0usize..120, 0..10),
    ) {
        let k1 = [0.0, 0.5, 1.2, 3.0][params.0];
        let b = [0.0, 0.5, 0.75, 1.0][params.1];
        let mut docs = corpus(&texts, &picks);
        let mut index = index_of(k1, b, &docs);
        // drop each picked document's first term: lengths fall below the recorded minimums
        drop_first_terms(&mut index, &mut docs, &shrink);
        let query: Vec<String> = query.iter().map(|&w| word(w)).collect();
        let query: Vec<&str> = query.iter().map(String::as_str).collect();
        let want = bits(&reference_with(k1, b, &docs, &query, limit));
        prop_assert_eq!(bits(&index.search_exhaustive(&query, limit)), want.clone());
        for cost in COST_MODELS {
            let pruned = search_with(&index, &query, limit, cost);
            prop_assert_eq!(bits(&pruned), want.clone(), "cost model {:?}", cost);
        }
    }

    #[test]
    fn documents_scored_in_full_give_the_exhaustive_bits(
        texts in proptest::collection::vec(proptest::collection::vec(0u8..80, 0..8), 1..12),
        picks in proptest::collection::vec(0usize..12, 0..120),
        query in proptest::collection::vec(0u8..80, 0..9),
        limit in 0usize..15,
        grow in proptest::collection::vec((0usize..120, 0u8..80), 0..10),
        shrink in proptest::collection::vec(0usize..120, 0..10),
    ) {
        let mut docs = corpus(&texts, &picks);
        let mut index = index_of(1.2, 0.75, &docs);
        // documents grow and shrink in place, as a pattern's intents come and go
        for (i, w) in grow {
            let id = format!("d{i}");
            if let Some(held) = docs.get_mut(&id) {
                index.add_terms(&id, &[word(w)]).unwrap();
                held.push(word(w));
            }
        }
        drop_first_terms(&mut index, &mut docs, &shrink);
        let query: Vec<String> = query.iter().map(|&w| word(w)).collect();
        let query: Vec<&str> = query.iter().map(String::as_str).collect();
        let want = bits(&index.search_exhaustive(&query, limit));
        prop_assert_eq!(want.clone(), bits(&reference_with(1.2, 0.75, &docs, &query, limit)));
        for forward in FORWARD_MODES {
            for cost in COST_MODELS {
                let pruned = search_forward(&index, &query, limit, forward, cost);
                prop_assert_eq!(bits(&pruned), want.clone(), "{:?} {:?}", forward, cost);
            }
        }
    }
}
