"""rank(): the seed's example, every filter rule, grouping, k, explain and request validation."""

from __future__ import annotations

import pytest

from pml_server.domain.errors import InvalidArgumentError
from pml_server.domain.model import SuggestQuery
from pml_server.ranking import (
    AVAILABLE_TOOLS,
    BEYOND_K,
    FLAGGED_FOR_REMOVAL,
    MIN_MATCH,
    MIN_SUCCESS,
    SAME_CAPABILITY,
    TAGS,
    RankingConfig,
)
from testing.ranking_oracle import rank
from tests.support import NOW_MS, candidate, pattern

CONFIG = RankingConfig()


def seed_candidates(old_successes: int = 2, old_tries: int = 5) -> list:
    process_csv = pattern("process_csv", successes=19, failures=1, tools=("read_file", "parse_csv"))
    parse_excel = pattern("parse_excel", successes=4, failures=1, tools=("read_file", "parse_xlsx"))
    old_csv_hack = pattern(
        "old_csv_hack", successes=old_successes, failures=old_tries - old_successes
    )
    return [
        candidate(old_csv_hack, 0.68),
        candidate(parse_excel, 0.72),
        candidate(process_csv, 0.85),
    ]


@pytest.mark.parametrize(("old_successes", "old_tries"), [(2, 5), (4, 10), (8, 20), (40, 100)])
def test_seed_example_process_spreadsheet(old_successes: int, old_tries: int) -> None:
    result = rank(
        SuggestQuery("Process spreadsheet", explain=True),
        seed_candidates(old_successes, old_tries),
        CONFIG,
        NOW_MS,
    )
    assert [s.pattern.id for s in result.suggestions] == ["process_csv", "parse_excel"]
    first, second = result.suggestions
    assert first.score.match == pytest.approx(0.85)
    assert second.score.match == pytest.approx(0.72)
    assert first.score.total > second.score.total
    assert first.score.reliability == 1.0
    assert second.score.reliability == pytest.approx((4 + 1.8) / (7 * 0.9))  # 4 of 5: 0.92
    assert [(f.pattern_id, f.rule) for f in result.filtered] == [("old_csv_hack", MIN_SUCCESS)]
    assert "min_success" in result.filtered[0].detail


def test_score_parts_multiply_to_total() -> None:
    (top, *_) = rank(SuggestQuery("x"), seed_candidates(), CONFIG, NOW_MS).suggestions
    s = top.score
    product = s.match * s.reliability * s.usage * s.recency * s.superseded_penalty
    assert s.total == pytest.approx(product)
    assert s.success_estimate == pytest.approx(20 / 22)  # (19 + 1) / (20 + 2)
    assert s.reliability == 1.0  # 19 of 20 is above the expected 90%: no evidence against it
    assert s.recency == 1.0
    assert s.superseded_penalty == 1.0


def test_one_success_in_one_try_is_suggested_but_one_failure_is_not_zero() -> None:
    fresh = pattern("fresh", successes=1)
    result = rank(SuggestQuery("x"), [candidate(fresh, 0.8)], CONFIG, NOW_MS)
    assert [s.pattern.id for s in result.suggestions] == ["fresh"]
    coin = pattern("coin", successes=1, failures=1)
    assert rank(SuggestQuery("x"), [candidate(coin, 0.8)], CONFIG, NOW_MS).suggestions


def test_min_match_filter_with_request_override() -> None:
    weak = pattern("weak")
    cands = [candidate(weak, 0.25)]
    result = rank(SuggestQuery("x", explain=True), cands, CONFIG, NOW_MS)
    assert not result.suggestions
    assert [(f.pattern_id, f.rule) for f in result.filtered] == [("weak", MIN_MATCH)]
    loose = rank(SuggestQuery("x", min_match=0.2), cands, CONFIG, NOW_MS)
    assert [s.pattern.id for s in loose.suggestions] == ["weak"]


def test_lexical_evidence_can_lift_a_candidate_over_min_match() -> None:
    named = pattern("named")
    assert not rank(SuggestQuery("x"), [candidate(named, 0.2)], CONFIG, NOW_MS).suggestions
    lifted = rank(SuggestQuery("x"), [candidate(named, 0.2, lexical=12.0)], CONFIG, NOW_MS)
    assert [s.pattern.id for s in lifted.suggestions] == ["named"]
    assert lifted.suggestions[0].score.lexical == pytest.approx(
        12.0 / (12.0 + CONFIG.lexical_half_score)
    )


def test_min_success_override_lets_a_poor_pattern_through() -> None:
    poor = pattern("poor", successes=2, failures=8)
    cands = [candidate(poor, 0.9)]
    assert not rank(SuggestQuery("x"), cands, CONFIG, NOW_MS).suggestions
    assert rank(SuggestQuery("x", min_success=0.0), cands, CONFIG, NOW_MS).suggestions


def test_flagged_for_removal_excluded_unless_asked_for() -> None:
    flagged = pattern("flagged", flagged=True)
    cands = [candidate(flagged, 0.9)]
    result = rank(SuggestQuery("x", explain=True), cands, CONFIG, NOW_MS)
    assert not result.suggestions
    assert [f.rule for f in result.filtered] == [FLAGGED_FOR_REMOVAL]
    asked = rank(SuggestQuery("x", include_flagged=True), cands, CONFIG, NOW_MS)
    assert [s.pattern.id for s in asked.suggestions] == ["flagged"]


def test_available_tools_excludes_patterns_needing_an_unreachable_tool() -> None:
    mail = pattern("mail", tools=("gmail:get", "memory:search"))
    local = pattern("local", tools=("read_file",))
    cands = [candidate(mail, 0.9), candidate(local, 0.7)]
    query = SuggestQuery("x", available_tools=("read_file", "memory:search"), explain=True)
    result = rank(query, cands, CONFIG, NOW_MS)
    assert [s.pattern.id for s in result.suggestions] == ["local"]
    (removed,) = result.filtered
    assert (removed.pattern_id, removed.rule) == ("mail", AVAILABLE_TOOLS)
    assert "gmail:get" in removed.detail
    unrestricted = rank(SuggestQuery("x"), cands, CONFIG, NOW_MS)
    assert [s.pattern.id for s in unrestricted.suggestions] == ["mail", "local"]
    nothing_reachable = rank(SuggestQuery("x", available_tools=()), cands, CONFIG, NOW_MS)
    assert not nothing_reachable.suggestions


def test_tags_require_every_requested_tag() -> None:
    both = pattern("both")
    one = pattern("one")
    cands = [candidate(both, 0.8, tags=("prod", "python")), candidate(one, 0.9, tags=("prod",))]
    result = rank(SuggestQuery("x", tags=("prod", "python"), explain=True), cands, CONFIG, NOW_MS)
    assert [s.pattern.id for s in result.suggestions] == ["both"]
    assert [(f.pattern_id, f.rule) for f in result.filtered] == [("one", TAGS)]


def test_first_failing_rule_is_reported_in_documented_order() -> None:
    bad = pattern("bad", successes=0, failures=20, flagged=True, tools=("nope",))
    query = SuggestQuery("x", available_tools=("read_file",), tags=("t",), explain=True)
    (only,) = rank(query, [candidate(bad, 0.1)], CONFIG, NOW_MS).filtered
    assert only.rule == FLAGGED_FOR_REMOVAL
    query = SuggestQuery("x", include_flagged=True, available_tools=(), tags=("t",), explain=True)
    (only,) = rank(query, [candidate(bad, 0.1)], CONFIG, NOW_MS).filtered
    assert only.rule == AVAILABLE_TOOLS


def test_one_suggestion_per_capability_represented_by_its_best_pattern() -> None:
    a1 = pattern("a1", capability_id="A", successes=30)
    a2 = pattern("a2", capability_id="A", successes=3, failures=2)
    b1 = pattern("b1", capability_id="B", successes=10)
    cands = [candidate(a2, 0.9), candidate(a1, 0.85), candidate(b1, 0.6)]
    result = rank(SuggestQuery("x", explain=True), cands, CONFIG, NOW_MS)
    assert [(s.capability_id, s.pattern.id) for s in result.suggestions] == [
        ("A", "a1"),
        ("B", "b1"),
    ]
    assert [(f.pattern_id, f.rule) for f in result.filtered] == [("a2", SAME_CAPABILITY)]
    assert "a1" in result.filtered[0].detail


def test_a_filtered_best_pattern_lets_the_next_pattern_represent_the_capability() -> None:
    flaky = pattern("flaky", capability_id="A", successes=1, failures=9)
    solid = pattern("solid", capability_id="A", successes=9)
    result = rank(
        SuggestQuery("x"), [candidate(flaky, 0.95), candidate(solid, 0.6)], CONFIG, NOW_MS
    )
    assert [s.pattern.id for s in result.suggestions] == ["solid"]


def test_top_k_and_beyond_k_in_explain() -> None:
    pats = [pattern(f"p{i}", successes=5) for i in range(6)]
    cands = [candidate(p, 0.9 - i * 0.05) for i, p in enumerate(pats)]
    result = rank(SuggestQuery("x", k=2, explain=True), cands, CONFIG, NOW_MS)
    assert [s.pattern.id for s in result.suggestions] == ["p0", "p1"]
    beyond = [(f.pattern_id, f.rule) for f in result.filtered]
    assert beyond == [(f"p{i}", BEYOND_K) for i in range(2, 6)]
    assert all(f.score is not None for f in result.filtered)
    assert rank(SuggestQuery("x", k=2), cands, CONFIG, NOW_MS).filtered == ()


def test_recency_full_weight_to_90_days_then_lower() -> None:
    fresh = pattern("fresh", successes=5, days_unused=89)
    old = pattern("old", successes=5, days_unused=200)
    result = rank(SuggestQuery("x"), [candidate(old, 0.8), candidate(fresh, 0.75)], CONFIG, NOW_MS)
    assert [s.pattern.id for s in result.suggestions] == ["fresh", "old"]
    assert result.suggestions[0].score.recency == 1.0
    assert result.suggestions[1].score.recency < 1.0


def test_superseded_pattern_is_penalized() -> None:
    beaten = pattern("beaten", successes=10, superseded_by="other")
    rival = pattern("rival", successes=10)
    result = rank(
        SuggestQuery("x"), [candidate(beaten, 0.8), candidate(rival, 0.6)], CONFIG, NOW_MS
    )
    assert [s.pattern.id for s in result.suggestions] == ["rival", "beaten"]
    assert result.suggestions[1].score.superseded_penalty == CONFIG.superseded_penalty


def test_same_pattern_twice_is_merged_with_best_signals() -> None:
    p = pattern("p")
    result = rank(
        SuggestQuery("x", explain=True),
        [candidate(p, 0.7, 0.0), candidate(p, 0.0, CONFIG.lexical_half_score)],
        CONFIG,
        NOW_MS,
    )
    (only,) = result.suggestions
    assert result.filtered == ()
    assert only.score.semantic == pytest.approx(0.7)
    assert only.score.lexical == pytest.approx(0.5)


def test_no_candidates_gives_empty_answer() -> None:
    assert rank(SuggestQuery("x", explain=True), [], CONFIG, NOW_MS).suggestions == ()


@pytest.mark.parametrize(
    ("query", "field"),
    [
        (SuggestQuery("x", k=0), "k"),
        (SuggestQuery("x", k=101), "k"),
        (SuggestQuery("x", min_match=1.5), "min_match"),
        (SuggestQuery("x", min_match=float("nan")), "min_match"),
        (SuggestQuery("x", min_success=-0.1), "min_success"),
        (SuggestQuery("x", available_tools=("",)), "available_tools"),
        (SuggestQuery("x", tags=("",)), "tags"),
    ],
)
def test_bad_request_names_the_field(query: SuggestQuery, field: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        rank(query, seed_candidates(), CONFIG, NOW_MS)
    assert [v.field for v in caught.value.violations] == [field]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_match": 2.0},
        {"lexical_half_score": 0.0},
        {"recency_half_life_days": float("inf")},
        {"overfetch": 0},
        {"prior_successes": 0.0, "prior_failures": 0.0},
    ],
)
def test_bad_config_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="RankingConfig"):
        RankingConfig(**kwargs)  # type: ignore[arg-type]


def test_a_fresh_exact_match_beats_a_popular_near_miss() -> None:
    """The issue's case: match 0.99 used once against match 0.79 used 61 times (and the
    README's "Load JSON data": 1.00 once against 0.78 at 61 uses)."""
    fresh = pattern("fresh_exact", successes=1)
    popular = pattern("popular", successes=61)
    cands = [candidate(popular, 0.79), candidate(fresh, 0.99)]
    result = rank(SuggestQuery("x"), cands, CONFIG, NOW_MS)
    assert [s.pattern.id for s in result.suggestions] == ["fresh_exact", "popular"]
    assert result.suggestions[0].score.reliability == 1.0


def test_a_twin_failing_most_of_its_tries_sinks_below_its_healthy_original() -> None:
    original = pattern("original", successes=16, capability_id="cap")
    twin = pattern("twin", successes=3, failures=9, capability_id="cap")
    cands = [candidate(twin, 0.9), candidate(original, 0.6)]
    result = rank(SuggestQuery("x", min_success=0.0, explain=True), cands, CONFIG, NOW_MS)
    assert [s.pattern.id for s in result.suggestions] == ["original"]
    assert [(f.pattern_id, f.rule) for f in result.filtered] == [("twin", SAME_CAPABILITY)]
