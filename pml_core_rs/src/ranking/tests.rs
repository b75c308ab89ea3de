//! Unit tests of the formula, the table and one ranked query on small indexes (the Python
//! suite checks the core against the Python ranking on real stores).

use super::formula::*;
use super::*;
use crate::index::half::{f16_from_f32, f16_to_f32};
use crate::index::{HnswIndex, Params as IndexParams};
use crate::lexical::LexicalIndex;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn seed_example_scores_as_documented() {
    let p = Params::default();
    let now = 1_000 * DAY_MS as i64;
    let csv = Counts {
        successes: 19,
        failures: 1,
        usage: 20,
        last_used_ms: now,
        superseded: false,
    };
    let parts = score(0.85, 0.0, &csv, &p, now, 1.0);
    assert!((parts.success - 20.0 / 22.0).abs() < 1e-12);
    assert_eq!(parts.reliability, 1.0, "19 of 20 is above the expected 90%");
    assert!((parts.total - 0.849).abs() < 0.0005, "{parts:?}");
    let excel = Counts {
        successes: 4,
        failures: 1,
        usage: 5,
        ..csv
    };
    let parts = score(0.72, 0.0, &excel, &p, now, 1.0);
    assert!((parts.reliability - 0.921).abs() < 0.0005, "{parts:?}");
    assert!((parts.total - 0.662).abs() < 0.0005, "{parts:?}");
}

#[test]
fn reliability_is_one_without_failures_and_sinks_with_them() {
    let p = Params::default();
    for successes in [0, 1, 20, 1_000] {
        assert_eq!(reliability_factor(successes, 0, &p), 1.0);
    }
    assert!((reliability_factor(3, 7, &p) - 0.444).abs() < 0.0005);
    assert!((reliability_factor(40, 60, &p) - 0.455).abs() < 0.0005);
    assert!(reliability_factor(1, 1, &p) < reliability_factor(4, 1, &p));
    // negative counts read as zero, as in Python
    assert_eq!(reliability_factor(-3, -2, &p), 1.0);
}

#[test]
fn factors_stay_in_their_ranges() {
    let p = Params::default();
    assert_eq!(normalize_lexical(f64::NAN, &p), 0.0);
    assert_eq!(normalize_lexical(10.0, &p), 0.5);
    assert_eq!(clamp_unit(-0.3), 0.0);
    assert_eq!(clamp_unit(f64::INFINITY), 0.0);
    assert_eq!(fuse_match(0.6, 0.0, &p), 1.0 - (1.0 - 0.6));
    assert_eq!(usage_factor(-4, &p), 1.0 - p.usage_weight);
    assert_eq!(usage_factor(1_000, &p), 1.0);
    assert_eq!(recency_factor(0, (90.0 * DAY_MS) as i64, &p), 1.0);
    assert_eq!(recency_factor(0, (180.0 * DAY_MS) as i64, &p), 0.5);
    assert_eq!(recency_factor(0, (3650.0 * DAY_MS) as i64, &p), 0.2);
    assert_eq!(
        recency_factor(10, 0, &p),
        1.0,
        "a future last use is not overdue"
    );
    let superseded = Counts {
        successes: 1,
        usage: 1,
        superseded: true,
        ..Counts::default()
    };
    assert_eq!(score(1.0, 0.0, &superseded, &p, 0, 1.0).penalty, 0.5);
}

#[test]
fn table_rows_follow_links_and_deletions() {
    let mut table = RankTable::new();
    table.link_intent(1, "p1");
    table.link_intent(1, "p1"); // replay
    table.link_intent(2, "p1");
    assert_eq!(table.intent_count(), 2);
    assert_eq!(table.pattern_of_intent(2), Some("p1"));
    assert_eq!(table.intents_of("p1"), [1, 2]);
    assert!(table.intents_of("p9").is_empty());
    let slot = table.row_of_intent(2).unwrap();
    assert!(!table.row(slot).is_rankable(), "no record nor counters yet");
    table.set_pattern("p1", "c1", &strings(&["b", "a", "a"]), &[], false, false);
    table.set_counters("p1", 1, 0, 1, 5, &strings(&["t"]));
    assert!(table.row(slot).is_rankable());
    assert_eq!(table.row(slot).tools.len(), 2, "tools deduplicated");
    assert!(table.remove_pattern("p1"));
    assert!(!table.row(slot).is_rankable());
    assert_eq!(table.len(), 1, "intents still linked");
    table.unlink_intents(&[1, 2, 99]);
    assert!(table.is_empty());
    assert_eq!(table.pattern_of_intent(1), None);
    // a freed slot is reused
    table.set_pattern("p2", "c1", &[], &[], false, false);
    assert_eq!(table.row_of_pattern("p2"), Some(slot));
    assert!(!table.remove_pattern("nope"));
}

/// Four patterns over 2-d vectors: p1 and p2 share capability c1.
fn fixture() -> (RankTable, HnswIndex, LexicalIndex) {
    let mut ann = HnswIndex::new(2, IndexParams::default()).unwrap();
    let vectors = [1.0, 0.0, 0.9, 0.1, 0.7, 0.7, 0.0, 1.0, 0.95, 0.05];
    ann.add(&[1, 2, 3, 4, 5], &vectors).unwrap();
    let mut lexical = LexicalIndex::new(1.2, 0.75).unwrap();
    let mut table = RankTable::new();
    let rows = [
        ("p1", "c1", 1u64, vec!["csv"], "tool_a"),
        ("p2", "c1", 2, vec!["csv", "excel"], "tool_a"),
        ("p3", "c2", 3, vec!["json"], "tool_b"),
        ("p4", "c3", 4, vec!["zip"], "tool_c"),
    ];
    for (pattern, capability, intent, words, tool) in rows {
        table.link_intent(intent, pattern);
        table.set_pattern(pattern, capability, &strings(&[tool]), &[], false, false);
        table.set_counters(pattern, 3, 0, 3, 0, &strings(&["prod"]));
        lexical.add_terms(pattern, &words).unwrap();
    }
    table.link_intent(5, "p3"); // a second intent of p3, near p1's
    (table, ann, lexical)
}

fn run(
    fixture: &(RankTable, HnswIndex, LexicalIndex),
    terms: &[&str],
    k: usize,
    filters: &Filters,
) -> Vec<Ranked> {
    let (table, ann, lexical) = fixture;
    let query = [1.0, 0.0];
    let space = Space::one(ann, &query);
    let found = retrieve(&space, lexical, &strings(terms), 8).unwrap();
    rank_retrieved(
        table,
        &space,
        &found,
        k,
        filters,
        &Params::default(),
        0,
        &RequestWords::default(),
        false,
    )
    .unwrap()
    .suggestions
}

#[test]
fn a_query_groups_by_capability_and_orders_by_total() {
    let f = fixture();
    let all = run(&f, &[], 3, &Filters::default());
    let ids: Vec<&str> = all.iter().map(|r| r.pattern_id.as_str()).collect();
    assert_eq!(
        ids,
        ["p1", "p3", "p4"],
        "p2 is represented by p1; p3 by its two intents"
    );
    // the query is (1, 0): an intent's cosine is its normalized first value as the index
    // stores it (half precision)
    let cosine = |x: f32, y: f32| f64::from(f16_to_f32(f16_from_f32(x / x.hypot(y))));
    assert_eq!(
        Some(all[1].parts.semantic),
        super::formula::pattern_semantic(&mut [cosine(0.7, 0.7), cosine(0.95, 0.05)])
    );
    assert_eq!(f.0.intents_of("p3"), [3, 5]);
    assert!(all.windows(2).all(|w| w[0].parts.total >= w[1].parts.total));
    let mut f = f;
    f.0.set_pattern("p1", "c1", &strings(&["tool_a"]), &[], true, false); // p2 shows for c1
    let tool_a = Filters {
        available_tools: Some(strings(&["tool_a"])),
        ..Filters::default()
    };
    let plain = run(&f, &[], 1, &tool_a);
    let worded = run(&f, &["excel"], 1, &tool_a);
    assert_eq!(
        (plain[0].pattern_id.as_str(), worded[0].pattern_id.as_str()),
        ("p2", "p2")
    );
    assert_eq!(plain[0].parts.lexical, 0.0);
    assert!(worded[0].parts.lexical > 0.0);
    assert!(
        worded[0].parts.matched > plain[0].parts.matched,
        "a shared word lifts the match"
    );
}

#[test]
fn filters_remove_candidates() {
    let f = fixture();
    let only_b = Filters {
        available_tools: Some(strings(&["tool_b", "unknown"])),
        ..Filters::default()
    };
    let ids: Vec<String> = run(&f, &[], 5, &only_b)
        .into_iter()
        .map(|r| r.pattern_id)
        .collect();
    assert_eq!(ids, ["p3"]);
    let no_tools = Filters {
        available_tools: Some(vec![]),
        ..Filters::default()
    };
    assert!(run(&f, &[], 5, &no_tools).is_empty());
    let unknown_tag = Filters {
        tags: strings(&["prod", "never-seen"]),
        ..Filters::default()
    };
    assert!(run(&f, &[], 5, &unknown_tag).is_empty());
    let strict = Filters {
        min_match: 0.9999,
        ..Filters::default()
    };
    assert_eq!(run(&f, &[], 5, &strict).len(), 1);
    let picky = Filters {
        min_success: 0.9,
        ..Filters::default()
    };
    assert!(run(&f, &[], 5, &picky).is_empty(), "3 of 3 is 0.8");
}

#[test]
fn flagged_and_deleted_patterns_are_left_out() {
    let mut f = fixture();
    f.0.set_pattern("p1", "c1", &strings(&["tool_a"]), &[], true, false);
    let top = run(&f, &[], 1, &Filters::default());
    assert_eq!(top[0].pattern_id, "p2", "c1 is represented by p2");
    let with_flagged = Filters {
        include_flagged: true,
        ..Filters::default()
    };
    assert_eq!(run(&f, &[], 1, &with_flagged)[0].pattern_id, "p1");
    f.0.remove_pattern("p1");
    assert!(run(&f, &[], 5, &with_flagged)
        .iter()
        .all(|r| r.pattern_id != "p1"));
}

#[test]
fn permitted_lists_the_patterns_the_context_filters_let_through() {
    let mut table = RankTable::new();
    let p = Params::default();
    for (id, tools, tags, failures) in [
        ("a", &["read"][..], &["prod"][..], 0),
        ("b", &["read", "send"][..], &[][..], 0),
        ("c", &["zip"][..], &["prod"][..], 9),
    ] {
        table.set_pattern(id, &format!("cap_{id}"), &strings(tools), &[], false, false);
        table.set_counters(id, 1, failures, 1, 0, &strings(tags));
    }
    table.link_intent(1, "a");
    table.link_intent(2, "b");
    table.link_intent(3, "c");
    table.link_intent(4, "a");
    let filters = |tools: Option<&[&str]>, tags: &[&str], min_success: f64| Filters {
        available_tools: tools.map(strings),
        tags: strings(tags),
        min_success,
        ..Filters::default()
    };
    let got = permitted(&table, &filters(Some(&["read", "zip"]), &[], 0.0), &p).unwrap();
    assert_eq!(got.pattern_ids(&table), ["a", "c"]);
    assert_eq!(got.intents, vec![1, 4, 3]);
    let got = permitted(&table, &filters(None, &["prod"], 0.5), &p).unwrap();
    assert_eq!(got.pattern_ids(&table), ["a"]);
    // a tag no row has permits nothing; filters permitting everything need no allow-list
    let none = permitted(&table, &filters(None, &["never"], 0.0), &p).unwrap();
    assert!(none.slots.is_empty() && none.intents.is_empty());
    assert_eq!(permitted(&table, &filters(None, &[], 0.0), &p), None);
    assert!(restricts(&filters(None, &[], 0.0), true));
    assert!(!restricts(&filters(None, &[], 0.5), false));
}

#[test]
fn a_transition_multiplies_its_capabilitys_total_and_nothing_else() {
    // docs/ranking.md, Sessions: the factor is the last multiplication of the total
    let f = fixture();
    let plain = run(&f, &[], 3, &Filters::default());
    let lifted = Filters {
        transitions: [("c3".to_owned(), 1.25)].into_iter().collect(),
        ..Filters::default()
    };
    let with = run(&f, &[], 3, &lifted);
    for (before, after) in plain.iter().zip(&with) {
        assert_eq!(before.pattern_id, after.pattern_id);
        if after.capability_id == "c3" {
            assert_eq!(after.parts.transition, 1.25);
            assert_eq!(after.parts.total, before.parts.total * 1.25);
        } else {
            assert_eq!(after.parts, before.parts);
            assert_eq!(after.parts.transition, 1.0);
        }
    }
    // a large enough factor moves c2 (p3) ahead of c1 (p1); p4's match is 0, so it stays last
    let far = Filters {
        transitions: [("c2".to_owned(), 100.0), ("c3".to_owned(), 100.0)]
            .into_iter()
            .collect(),
        ..Filters::default()
    };
    let ids: Vec<String> = run(&f, &[], 3, &far)
        .into_iter()
        .map(|r| r.pattern_id)
        .collect();
    assert_eq!(ids, ["p3", "p1", "p4"]);
}

fn explain(fixture: &(RankTable, HnswIndex, LexicalIndex), k: usize, filters: &Filters) -> Ranking {
    let (table, ann, lexical) = fixture;
    let query = [1.0, 0.0];
    let space = Space::one(ann, &query);
    let found = retrieve(&space, lexical, &[], 8).unwrap();
    rank_retrieved(
        table,
        &space,
        &found,
        k,
        filters,
        &Params::default(),
        0,
        &RequestWords::default(),
        true,
    )
    .unwrap()
}

#[test]
fn explain_lists_every_other_candidate_with_its_rule() {
    let mut f = fixture();
    let plain = explain(&f, 1, &Filters::default());
    assert_eq!(plain.suggestions, run(&f, &[], 1, &Filters::default()));
    let rules: Vec<(&str, Rule)> = plain
        .filtered
        .iter()
        .map(|c| (c.pattern_id.as_str(), c.rule))
        .collect();
    // p2 shares c1 with p1; p3 and p4 rank after the k=1 suggestion, in order
    assert_eq!(
        rules,
        [
            ("p2", Rule::SameCapability),
            ("p3", Rule::BeyondK),
            ("p4", Rule::BeyondK)
        ]
    );
    assert_eq!(
        plain.filtered[0].detail,
        "capability represented by pattern p1"
    );
    assert_eq!(
        plain.filtered[1].detail,
        "ranked 2, after the k=1 suggestions"
    );
    assert_eq!(
        plain.filtered[2].detail,
        "ranked 3, after the k=1 suggestions"
    );
    f.0.set_pattern("p1", "c1", &strings(&["tool_a"]), &[], true, false);
    f.0.set_counters("p3", 1, 4, 5, 0, &strings(&["prod"]));
    let strict = Filters {
        available_tools: Some(strings(&["tool_a", "tool_b"])),
        tags: strings(&["prod", "zzz"]),
        min_success: 0.5,
        ..Filters::default()
    };
    let got = explain(&f, 3, &strict);
    assert!(got.suggestions.is_empty(), "no row has the tag zzz");
    let details: Vec<(&str, &str, &str)> = got
        .filtered
        .iter()
        .map(|c| (c.pattern_id.as_str(), c.rule.name(), c.detail.as_str()))
        .collect();
    assert_eq!(
        details,
        [
            (
                "p1",
                "flagged_for_removal",
                "pattern is flagged for removal (include_flagged is off)"
            ),
            ("p2", "tags", "lacks requested tags: zzz"),
            ("p3", "tags", "lacks requested tags: zzz"), // its failures sink it below p2
            (
                "p4",
                "available_tools",
                "needs tools the caller cannot reach: tool_c"
            ),
        ]
    );
    let picky = Filters {
        min_success: 0.5,
        min_match: 0.5,
        ..Filters::default()
    };
    let got = explain(&f, 3, &picky);
    let p3 = got.filtered.iter().find(|c| c.pattern_id == "p3").unwrap();
    assert_eq!(
        p3.detail,
        "success estimate 0.286 (1 of 5 tries) < min_success 0.500"
    );
    let p4 = got.filtered.iter().find(|c| c.pattern_id == "p4").unwrap();
    assert_eq!(
        (p4.rule, p4.detail.as_str()),
        (Rule::MinMatch, "match 0.000 < min_match 0.500")
    );
}

#[test]
fn what_comes_next_is_scored_by_the_transition_weight() {
    let (mut table, _, _) = fixture();
    table.set_counters("p4", 1, 9, 10, 0, &[]);
    let weights: rustc_hash::FxHashMap<String, f64> =
        [("c1".to_owned(), 0.5), ("c3".to_owned(), 0.9)]
            .into_iter()
            .collect();
    let ids = strings(&["p4", "p1", "p2", "p1", "gone"]);
    let p = Params::default();
    let got = rank_next(&table, &ids, &weights, 5, &Filters::default(), &p, 0, true);
    let order: Vec<&str> = got
        .suggestions
        .iter()
        .map(|r| r.pattern_id.as_str())
        .collect();
    // p4's failures sink it below c1 despite its weight; p2 is c1's second pattern
    assert_eq!(order, ["p1", "p4"]);
    let p1 = &got.suggestions[0].parts;
    assert_eq!((p1.matched, p1.transition), (0.0, 0.5));
    assert_eq!(
        p1.total,
        0.5 * (p1.reliability * p1.usage * p1.recency * p1.penalty)
    );
    assert_eq!(got.filtered.len(), 1);
    assert_eq!(got.filtered[0].rule, Rule::SameCapability);
    let strict = Filters {
        min_success: 0.5,
        min_match: 1.0, // not applied: there is no match
        ..Filters::default()
    };
    let got = rank_next(&table, &ids, &weights, 5, &strict, &p, 0, false);
    assert_eq!(got.suggestions.len(), 1);
    assert!(got.filtered.is_empty(), "listed with explain only");
}

#[test]
fn an_exact_index_scans_every_vector() {
    let (_, mut ann, _) = fixture();
    ann.set_exact(true);
    assert!(ann.exact());
    let hits = ann.search(&[1.0, 0.0], 5, None, None).unwrap();
    let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
    assert_eq!(ids, [1, 5, 2, 3, 4]);
    let graph = {
        ann.set_exact(false);
        ann.search(&[1.0, 0.0], 5, None, None).unwrap()
    };
    assert_eq!(graph, hits, "a small graph finds them all too");
}

/// The request parts' coverage (docs/ranking.md, Steps, "Request parts' coverage"): two parts
/// along tool_a's and tool_c's directions; a pattern holding both tools covers both parts
/// (factor 1), one holding tool_a alone loses half the weight, a tool-less pattern is left
/// alone, and one part or none gives 1.
#[test]
fn the_request_parts_coverage_counts_each_part_its_tools_cover() {
    let (mut table, ann, _) = fixture();
    table.set_pattern(
        "both",
        "c9",
        &strings(&["tool_a", "tool_c"]),
        &[],
        false,
        false,
    );
    table.set_pattern("none", "c8", &[], &[], false, false);
    table.refresh_profiles(&ann);
    let parts = [1.0f32, 0.0, 0.0, 1.0];
    let weights = [1.0, 1.0];
    let request = RequestParts {
        vectors: &parts,
        weights: &weights,
    };
    let w = 0.6;
    let coverage = PartCoverage::new(&table, ProfileSpace::Primary, Some(request), 2, w);
    let factor = |p: &str| coverage.factor(table.row(table.row_of_pattern(p).unwrap()));
    assert!((factor("both") - 1.0).abs() < 1e-3);
    assert!((factor("p1") - (1.0 - w / 2.0)).abs() < 0.02);
    assert!(factor("p1") < factor("both"));
    assert_eq!(factor("none"), 1.0);
    let one = RequestParts {
        vectors: &parts[..2],
        weights: &weights[..1],
    };
    let single = PartCoverage::new(&table, ProfileSpace::Primary, Some(one), 2, w);
    assert_eq!(
        single.factor(table.row(table.row_of_pattern("p1").unwrap())),
        1.0
    );
    let off = PartCoverage::new(&table, ProfileSpace::Primary, None, 2, w);
    assert_eq!(
        off.factor(table.row(table.row_of_pattern("p1").unwrap())),
        1.0
    );
}
