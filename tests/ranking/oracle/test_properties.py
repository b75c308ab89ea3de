"""Invariants of rank(): the score is monotone in success and match; relevance decides between
patterns without failures; failing patterns sink; filters always hold."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.domain.model import SuggestQuery
from pml_server.ranking import RankingConfig
from testing.ranking_oracle import Candidate, rank, score
from tests.support import NOW_MS, candidate, pattern

CONFIG = RankingConfig()
unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
counts = st.integers(min_value=0, max_value=500)
TOOLS = ("read_file", "write_file", "gmail:send", "git_push", "sql_query")


@st.composite
def candidates(draw: st.DrawFn) -> Candidate:
    i = draw(st.integers(min_value=0, max_value=10_000))
    p = pattern(
        f"p{i}",
        successes=draw(counts),
        failures=draw(counts),
        capability_id=f"c{draw(st.integers(min_value=0, max_value=5))}",
        tools=tuple(draw(st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3))),
        days_unused=draw(st.floats(min_value=0, max_value=1000)),
        flagged=draw(st.booleans()),
        superseded_by=draw(st.sampled_from(["", "other"])),
    )
    tags = tuple(draw(st.lists(st.sampled_from(("a", "b", "c")), max_size=3)))
    return candidate(p, draw(unit), draw(st.floats(min_value=0, max_value=50)), tags)


@settings(deadline=None)  # a pure function; timing on a shared machine is not the property
@given(candidates(), unit, unit)
def test_total_is_monotone_in_match(cand: Candidate, s1: float, s2: float) -> None:
    low, high = sorted((s1, s2))
    assert (
        score(replace(cand, semantic=low), CONFIG, NOW_MS).total
        <= score(replace(cand, semantic=high), CONFIG, NOW_MS).total
    )
    lex_low, lex_high = sorted((s1 * 30, s2 * 30))
    assert (
        score(replace(cand, lexical=lex_low), CONFIG, NOW_MS).total
        <= score(replace(cand, lexical=lex_high), CONFIG, NOW_MS).total
    )


@settings(deadline=None)
@given(candidates(), st.integers(min_value=0, max_value=100))
def test_total_is_monotone_in_success(cand: Candidate, extra: int) -> None:
    """Turning failures into successes (same tries, same usage) never lowers the score."""
    p = cand.pattern
    moved = min(extra, p.failure_count)
    better = replace(
        p, success_count=p.success_count + moved, failure_count=p.failure_count - moved
    )
    assert (
        score(cand, CONFIG, NOW_MS).total
        <= score(replace(cand, pattern=better), CONFIG, NOW_MS).total
    )
    for part in ("success_estimate", "reliability"):
        assert getattr(score(cand, CONFIG, NOW_MS), part) <= getattr(
            score(replace(cand, pattern=better), CONFIG, NOW_MS), part
        )


def _healthy(i: int, successes: int, usage: int) -> Candidate:
    return candidate(pattern(f"h{i}", successes=successes, usage=usage), 0.0)


@settings(deadline=None)
@given(unit, unit, counts, counts, counts, counts)
def test_without_failures_relevance_decides_whatever_the_counts(
    m1: float, m2: float, s1: int, s2: int, u1: int, u2: int
) -> None:
    """Two fresh patterns that never failed: the better match ranks first unless the matches
    are within the usage tie-break (a factor 1 - usage_weight) of each other."""
    a = replace(_healthy(1, s1 + 1, u1 + s1 + 1), semantic=m1)
    b = replace(_healthy(2, s2 + 1, u2 + s2 + 1), semantic=m2)
    result = rank(SuggestQuery("x", k=2, min_match=0.0), [a, b], CONFIG, NOW_MS)
    order = [s.pattern.id for s in result.suggestions]
    assert all(s.score.reliability == 1.0 for s in result.suggestions)
    # the fused matches, not the inputs: a cosine of 1e-71 fuses to a match of 0.0
    match = {s.pattern.id: s.score.match for s in result.suggestions}
    if match["h1"] * (1.0 - CONFIG.usage_weight) > match["h2"]:
        assert order == ["h1", "h2"]
    elif match["h2"] * (1.0 - CONFIG.usage_weight) > match["h1"]:
        assert order == ["h2", "h1"]


@settings(deadline=None)
@given(
    st.integers(min_value=10, max_value=1000),
    st.floats(min_value=0.0, max_value=0.4),
    st.floats(min_value=0.05, max_value=1.0),
    counts,
)
def test_a_pattern_failing_most_of_many_tries_sinks(
    tries: int, rate: float, failing_match: float, healthy_successes: int
) -> None:
    """At most 40% success in 10+ tries: a healthy pattern with 56% of its match beats it."""
    successes = max(1, int(rate * tries))
    failing = candidate(
        pattern("failing", successes=successes, failures=tries - successes), failing_match
    )
    healthy = candidate(pattern("healthy", successes=healthy_successes + 1), 0.56 * failing_match)
    result = rank(
        SuggestQuery("x", k=2, min_match=0.0, min_success=0.0), [failing, healthy], CONFIG, NOW_MS
    )
    assert [s.pattern.id for s in result.suggestions] == ["healthy", "failing"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(candidates(), max_size=25),
    st.integers(min_value=1, max_value=10),
    st.one_of(st.none(), unit),
    st.one_of(st.none(), unit),
    st.booleans(),
    st.one_of(st.none(), st.lists(st.sampled_from(TOOLS), max_size=5).map(tuple)),
    st.lists(st.sampled_from(("a", "b", "c")), max_size=2).map(tuple),
)
def test_filters_are_always_respected(
    cands: list[Candidate],
    k: int,
    min_match: float | None,
    min_success: float | None,
    include_flagged: bool,
    available_tools: tuple[str, ...] | None,
    tags: tuple[str, ...],
) -> None:
    query = SuggestQuery(
        "q",
        k=k,
        min_match=min_match,
        min_success=min_success,
        include_flagged=include_flagged,
        available_tools=available_tools,
        tags=tags,
        explain=True,
    )
    result = rank(query, cands, CONFIG, NOW_MS)
    threshold_match = CONFIG.min_match if min_match is None else min_match
    threshold_success = CONFIG.min_success if min_success is None else min_success
    assert len(result.suggestions) <= k
    capability_ids = [s.capability_id for s in result.suggestions]
    assert len(capability_ids) == len(set(capability_ids))
    totals = [s.score.total for s in result.suggestions]
    assert totals == sorted(totals, reverse=True)
    # The same pattern retrieved twice is merged with the union of its tags.
    tags_of: dict[str, set[str]] = {}
    for c in cands:
        tags_of.setdefault(c.pattern.id, set()).update(c.tags)
    for s in result.suggestions:
        assert s.score.match >= threshold_match
        assert s.score.success_estimate >= threshold_success
        assert include_flagged or not s.pattern.flagged_for_removal
        assert available_tools is None or set(s.pattern.tools_used) <= set(available_tools)
        assert set(tags) <= tags_of[s.pattern.id]
    # Every distinct input pattern is either suggested or explained, never both.
    suggested = {s.pattern.id for s in result.suggestions}
    explained = [f.pattern_id for f in result.filtered]
    assert len(explained) == len(set(explained))
    assert suggested.isdisjoint(explained)
    assert suggested | set(explained) == {c.pattern.id for c in cands}
