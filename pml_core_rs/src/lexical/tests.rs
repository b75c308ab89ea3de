//! Unit tests: the BM25 formula, tie-breaks, incremental updates against a from-scratch
//! reference computed one document at a time.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().collect()
}

/// BM25 one document at a time over `docs` (id -> terms), the query's distinct terms in order.
fn reference(
    docs: &BTreeMap<String, Vec<String>>,
    query: &[&str],
    limit: usize,
) -> Vec<(String, f64)> {
    reference_with(1.2, 0.75, docs, query, limit)
}

/// `reference` for any `k1` and `b`: the same f64 operations in the same order as the index,
/// so the same bits.
pub(super) fn reference_with(
    k1: f64,
    b: f64,
    docs: &BTreeMap<String, Vec<String>>,
    query: &[&str],
    limit: usize,
) -> Vec<(String, f64)> {
    if limit == 0 || docs.is_empty() {
        return Vec::new();
    }
    let total: usize = docs.values().map(Vec::len).sum();
    let average = total as f64 / docs.len() as f64;
    let average = if average == 0.0 { 1.0 } else { average };
    let mut scores: BTreeMap<&str, f64> = BTreeMap::new();
    let mut distinct: Vec<&str> = Vec::new();
    for term in query {
        if !distinct.contains(term) {
            distinct.push(term);
        }
    }
    for term in distinct {
        let having: Vec<(&str, usize, usize)> = docs
            .iter()
            .map(|(id, t)| {
                (
                    id.as_str(),
                    t.iter().filter(|w| *w == term).count(),
                    t.len(),
                )
            })
            .filter(|(_, tf, _)| *tf > 0)
            .collect();
        if having.is_empty() {
            continue;
        }
        let df = having.len() as f64;
        let idf = ((docs.len() as f64 - df + 0.5) / (df + 0.5)).ln_1p();
        let gain = idf * (k1 + 1.0);
        for (id, tf, len) in having {
            let tf = tf as f64;
            let norm = k1 * (1.0 - b) + k1 * b / average * len as f64;
            *scores.entry(id).or_insert(0.0) += gain * tf / (tf + norm);
        }
    }
    let mut out: Vec<(String, f64)> = scores.into_iter().map(|(d, s)| (d.to_owned(), s)).collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out.truncate(limit);
    out
}

#[test]
fn scores_follow_the_bm25_formula() {
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    index.add("a", &words("alpha beta")).unwrap();
    index.add("b", &words("beta gamma delta")).unwrap();
    let hits = index.search(&["alpha"], 5);
    let idf = ((2.0f64 - 1.0 + 0.5) / (1.0 + 0.5)).ln_1p();
    let expected = idf * 2.2 / (1.0 + 1.2 * (1.0 - 0.75 + 0.75 * 2.0 / 2.5));
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].0, "a");
    assert!((hits[0].1 - expected).abs() < 1e-12);
}

#[test]
fn equal_scores_are_ordered_by_doc_id_and_cut_at_the_limit() {
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    for id in ["d9", "d10", "d2", "é", "b", "a"] {
        index.add(id, &words("read file")).unwrap();
    }
    let ids: Vec<String> = index
        .search(&["read"], 4)
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(ids, ["a", "b", "d10", "d2"]);
    let all: Vec<String> = index
        .search(&["read"], 100)
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(all, ["a", "b", "d10", "d2", "d9", "é"]);
}

#[test]
fn repeated_query_terms_count_once_and_unknown_terms_nothing() {
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    index.add("a", &words("json file")).unwrap();
    index.add("b", &words("csv file")).unwrap();
    assert_eq!(
        index.search(&["json", "json", "nowhere"], 5),
        index.search(&["json"], 5)
    );
    assert!(index.search(&["nowhere"], 5).is_empty());
    assert!(index.search(&["json"], 0).is_empty());
}

#[test]
fn terms_added_then_removed_leave_no_trace() {
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    index.add_terms("p", &words("read file read_file")).unwrap();
    index.add_terms("p", &words("rare word file")).unwrap();
    index.remove_terms("p", &words("rare word file"));
    assert!(!index.term_numbers.contains_key("rare"));
    assert_eq!(
        index.postings[index.term_numbers["file"] as usize].tfs[0],
        1.0
    );
    assert_eq!(index.total_length, 3);
    index.remove_terms("p", &words("read file read_file"));
    assert!(!index.contains("p"));
    assert!(index.term_numbers.is_empty());
    assert_eq!(index.total_length, 0);
}

#[test]
fn empty_documents_count_and_are_never_found() {
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    index.add::<&str>("empty", &[]).unwrap();
    assert_eq!(index.len(), 1);
    assert!(index.search(&["x"], 3).is_empty());
    index.add("full", &words("x")).unwrap();
    assert_eq!(index.search(&["x"], 3)[0].0, "full");
}

#[test]
fn bad_arguments_are_named() {
    let err = LexicalIndex::new(-1.0, 0.5).unwrap_err();
    assert!(err.to_string().contains("`k1`"), "{err}");
    let err = LexicalIndex::new(1.0, f64::NAN).unwrap_err();
    assert!(err.to_string().contains("`b`"), "{err}");
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    let err = index.add_terms("", &["x"]).unwrap_err();
    assert!(err.to_string().contains("`doc_id`"), "{err}");
}

/// One update of the index in a property test: document `d{n}`, words by their numbers.
#[derive(Clone, Debug)]
pub(super) enum Op {
    Add(u8, Vec<u8>),
    AddTerms(u8, Vec<u8>),
    RemoveTerms(u8, Vec<u8>),
    Remove(u8),
}

/// Apply `op` to the index and to `docs`, the corpus the reference searches (word `w` is
/// `word(w)`), as the index's own semantics say: a removal takes each term out once, and the
/// document goes when it holds no term.
pub(super) fn apply(
    index: &mut LexicalIndex,
    docs: &mut BTreeMap<String, Vec<String>>,
    op: &Op,
    word: impl Fn(u8) -> String,
) {
    let terms = |t: &[u8]| -> Vec<String> { t.iter().map(|&w| word(w)).collect() };
    match op {
        Op::Add(d, t) => {
            index.add(&format!("d{d}"), &terms(t)).unwrap();
            docs.insert(format!("d{d}"), terms(t));
        }
        Op::AddTerms(d, t) => {
            index.add_terms(&format!("d{d}"), &terms(t)).unwrap();
            docs.entry(format!("d{d}")).or_default().extend(terms(t));
        }
        Op::RemoveTerms(d, t) => {
            index.remove_terms(&format!("d{d}"), &terms(t));
            if let Some(held) = docs.get_mut(&format!("d{d}")) {
                for term in terms(t) {
                    if let Some(at) = held.iter().position(|h| *h == term) {
                        held.remove(at);
                    }
                }
                if held.is_empty() {
                    docs.remove(&format!("d{d}"));
                }
            }
        }
        Op::Remove(d) => {
            index.remove(&format!("d{d}"));
            docs.remove(&format!("d{d}"));
        }
    }
}

/// The service bench's intents in small (`benches/harness/service_workload.py`): verb, object and place
/// words repeat with a period of 60 documents, each document has its own batch word and two
/// tool words; the documents of the same shape tie exactly.
pub(super) fn suggest_shaped(i: usize) -> Vec<String> {
    let verbs = ["read", "parse", "load", "write", "convert"];
    let objects = [
        &["json", "file"][..],
        &["csv", "export"],
        &["sheet"],
        &["log", "archive"],
    ];
    let places = [&["disk"][..], &["weekly", "report"], &["shared", "drive"]];
    let mut terms = vec![verbs[i % 5].to_owned()];
    terms.extend(objects[(i / 5) % 4].iter().map(|w| (*w).to_owned()));
    terms.extend(places[(i / 20) % 3].iter().map(|w| (*w).to_owned()));
    terms.push(format!("batch{i}"));
    terms.extend([format!("tool{}", i % 97), format!("step{}", i / 97)]);
    terms
}

const VOCABULARY: [&str; 8] = ["read", "json", "file", "csv", "send", "mail", "disk", "x"];

fn op() -> impl Strategy<Value = Op> {
    let doc = 0u8..10;
    let text = proptest::collection::vec(0u8..8, 0..6);
    prop_oneof![
        (doc.clone(), text.clone()).prop_map(|(d, t)| Op::Add(d, t)),
        (doc.clone(), text.clone()).prop_map(|(d, t)| Op::AddTerms(d, t)),
        (doc.clone(), text).prop_map(|(d, t)| Op::RemoveTerms(d, t)),
        doc.prop_map(Op::Remove),
    ]
}

fn terms_of(t: &[u8]) -> Vec<String> {
    t.iter()
        .map(|&w| VOCABULARY[w as usize].to_owned())
        .collect()
}

proptest! {
    #[test]
    fn any_sequence_of_updates_searches_like_the_reference(
        ops in proptest::collection::vec(op(), 0..40),
        query in proptest::collection::vec(0u8..8, 0..5),
        limit in 0usize..8,
    ) {
        let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
        let mut docs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let query: Vec<String> = terms_of(&query);
        let query: Vec<&str> = query.iter().map(String::as_str).collect();
        for op in ops {
            apply(&mut index, &mut docs, &op, |w| VOCABULARY[w as usize].to_owned());
            prop_assert_eq!(index.len(), docs.len());
            let got = index.search(&query, limit);
            let want = reference(&docs, &query, limit);
            let got_ids: Vec<&String> = got.iter().map(|h| &h.0).collect();
            let want_ids: Vec<&String> = want.iter().map(|h| &h.0).collect();
            prop_assert_eq!(got_ids, want_ids);
            for (g, w) in got.iter().zip(&want) {
                prop_assert!((g.1 - w.1).abs() <= 1e-12 * w.1.abs());
            }
        }
    }
}

#[test]
fn a_documents_terms_stay_sorted_through_adds_and_removals() {
    let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
    index
        .add_terms("p", &words("zeta alpha mid alpha"))
        .unwrap();
    index.add_terms("p", &words("beta omega")).unwrap();
    index.remove_terms("p", &words("mid"));
    let number = index.ids["p"];
    let doc = &index.docs[number as usize];
    let numbers: Vec<u32> = doc.terms.keys().copied().collect();
    let mut sorted = numbers.clone();
    sorted.sort_unstable();
    assert_eq!(numbers, sorted);
    assert_eq!(numbers.len(), 4); // zeta, alpha, beta, omega: mid left with its only count
    let alpha = index.term_numbers["alpha"];
    assert_eq!(doc.terms.get(&alpha).map(|t| t.tf), Some(2));
    assert!(!index.term_numbers.contains_key("mid"));
    assert_eq!(doc.name(), "p");
    // the id map and the document share one copy of the id
    let key = index.ids.keys().next().unwrap();
    assert!(Arc::ptr_eq(key, doc.name.as_ref().unwrap()));
}

proptest! {
    /// `search_among` is the full ranking filtered: the `limit` best of the kept documents
    /// (same ids, same score bits as `search` over every document).
    #[test]
    fn search_among_is_the_full_search_filtered(
        ops in proptest::collection::vec(op(), 0..40),
        query in proptest::collection::vec(0u8..8, 0..5),
        limit in 0usize..8,
        kept in proptest::collection::vec(any::<bool>(), 16),
    ) {
        let mut index = LexicalIndex::new(1.2, 0.75).unwrap();
        let mut docs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let query: Vec<String> = terms_of(&query);
        for op in ops {
            apply(&mut index, &mut docs, &op, |w| VOCABULARY[w as usize].to_owned());
        }
        let keep = |doc: &str| {
            let n = doc.bytes().map(usize::from).sum::<usize>() % kept.len();
            kept[n]
        };
        let got = index.search_among(&query, limit, keep);
        let mut want = index.search(&query, usize::MAX);
        want.retain(|(doc, _)| keep(doc));
        want.truncate(limit);
        prop_assert_eq!(got, want);
    }
}
