"""The step fit (docs/ranking.md, Steps), through the core's ranking table: how well a
pattern's steps fit the tools a request asks for. Properties: a request naming k tools prefers
the pattern with exactly those tools over one with a subset or a superset; adding a step the
request gives no evidence for never raises a pattern's factor; the factor stays in
[1 - step_weight, 1] and is 1 with the weight at 0 or without evidence.

These tests hold the Dice part alone (`step_profile_weight` 0); the tool profiles' part is
tested in test_steps_profiles.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server import _core
from pml_server.domain.errors import InvalidArgumentError
from pml_server.ranking import RankingConfig
from pml_server.ranking.table import RankTable, core_params

TOOLS = [
    "flight_search",
    "book_flight",
    "set_reminder",
    "hotel_search",
    "weather_forecast",
    "send_email",
    "translate_text",
    "stock_quote",
]
CONFIG = RankingConfig(step_profile_weight=0.0, step_order_weight=0.0)  # the Dice fit alone
NO_VECTORS = _core.HnswIndex(4)  # the profiles' part is off here


def _table(patterns: dict[str, tuple[str, ...]]) -> RankTable:
    table = RankTable()
    for n, (pattern, tools) in enumerate(patterns.items()):
        table.set_pattern(pattern, f"cap-{pattern}", tools, False, False)
        table.set_counters(pattern, 1, 0, 1, 0, [])
        table.link_intent(n, pattern)
    return table


def _factors(
    table: RankTable,
    patterns: list[str],
    text: str,
    neighbours: list[tuple[int, float]] | None = None,
    config: RankingConfig = CONFIG,
) -> dict[str, float]:
    return dict(
        zip(
            patterns,
            table.step_factors(
                neighbours or [], patterns, text, config, NO_VECTORS, np.ones(4, np.float32)
            ),
            strict=True,
        )
    )


def _request(tools: list[str]) -> str:
    """A request naming each tool by its words ("flight search, then book flight")."""
    return ", then ".join(t.replace("_", " ") for t in tools)


def test_the_pattern_with_exactly_the_named_steps_fits_best() -> None:
    patterns = {
        "two": ("flight_search", "book_flight"),
        "three": ("flight_search", "book_flight", "set_reminder"),
        "four": ("flight_search", "book_flight", "set_reminder", "send_email"),
    }
    table = _table(patterns)
    request = "search a flight, book the flight and set a reminder the day before"
    f = _factors(table, list(patterns), request)
    assert f["three"] > f["two"]
    assert f["three"] > f["four"]


@settings(max_examples=200, deadline=None)
@given(
    named=st.lists(st.sampled_from(TOOLS), min_size=1, max_size=4, unique=True),
    missing=st.integers(0, 3),
    extra=st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3, unique=True),
)
def test_a_request_naming_k_steps_prefers_exactly_those(
    named: list[str], missing: int, extra: list[str]
) -> None:
    # steps the request does not name, not even in part (no word in common)
    said = {w for t in named for w in t.split("_")}
    extra = [t for t in extra if not said & set(t.split("_"))]
    subset = tuple(named[: max(len(named) - max(missing, 1), 0)])
    patterns = {"exact": tuple(named)}
    if subset:
        patterns["subset"] = subset
    if extra:
        patterns["superset"] = (*named, *extra)
    table = _table(patterns)
    f = _factors(table, list(patterns), _request(named))
    assert f["exact"] < 1.0 or len(named) == 0
    for other in set(patterns) - {"exact"}:
        assert f[other] < f["exact"], (other, patterns, f)


@settings(max_examples=200, deadline=None)
@given(
    tools=st.lists(st.sampled_from(TOOLS), min_size=1, max_size=4, unique=True),
    named=st.lists(st.sampled_from(TOOLS), max_size=4, unique=True),
    # neighbours among p's and other's intents (0 and 2): nobody used the unrelated tool
    votes=st.lists(st.tuples(st.sampled_from([0, 2]), st.floats(-1.0, 1.0, width=32)), max_size=10),
    unrelated=st.text(alphabet="qxzv", min_size=3, max_size=8),
)
def test_an_unrelated_step_never_raises_the_factor(
    tools: list[str],
    named: list[str],
    votes: list[tuple[int, float]],
    unrelated: str,
) -> None:
    extra = f"{unrelated}_{unrelated}"  # a tool nothing names and no neighbour uses
    patterns = {"p": tuple(tools), "p_plus": (*tools, extra), "other": ("stock_quote",)}
    table = _table(patterns)
    f = _factors(table, list(patterns), _request(named) if named else "hello", votes)
    assert f["p_plus"] <= f["p"]


@settings(max_examples=100, deadline=None)
@given(
    tools=st.lists(st.sampled_from(TOOLS), min_size=1, max_size=4, unique=True),
    named=st.lists(st.sampled_from(TOOLS), max_size=4, unique=True),
    votes=st.lists(st.tuples(st.integers(0, 2), st.floats(-1.0, 1.0, width=32)), max_size=10),
    weight=st.floats(0.0, 1.0),
)
def test_the_factor_is_bounded_by_the_weight(
    tools: list[str], named: list[str], votes: list[tuple[int, float]], weight: float
) -> None:
    patterns = {"p": tuple(tools), "q": ("hotel_search",), "r": ("send_email", "stock_quote")}
    table = _table(patterns)
    config = replace(CONFIG, step_weight=weight)
    for factor in _factors(table, list(patterns), _request(named), votes, config).values():
        assert 1.0 - weight - 1e-12 <= factor <= 1.0


def test_no_evidence_or_no_weight_leaves_the_total_alone() -> None:
    table = _table({"p": ("flight_search",), "empty": ()})
    assert _factors(table, ["p", "empty"], "hello there") == {"p": 1.0, "empty": 1.0}
    off = replace(CONFIG, step_weight=0.0)
    assert _factors(table, ["p"], "flight search then hotel", config=off) == {"p": 1.0}
    # a tool-less pattern has no steps to judge, an unknown pattern no row
    named = _factors(table, ["p", "empty", "unknown"], "flight search then hotel")
    assert named["empty"] == 1.0
    assert named["unknown"] == 1.0
    assert named["p"] < 1.0


def test_neighbour_votes_count_their_patterns_tools() -> None:
    table = _table({"a": ("hotel_search",), "b": ("weather_forecast",)})
    # intent 0 is pattern a's, intent 1 pattern b's: the nearer one's tool fits better (the
    # gate off: with single-step neighbours it would leave both at 1, test below)
    ungated = replace(CONFIG, step_gate=0.0)
    f = _factors(table, ["a", "b"], "somewhere to stay", [(0, 0.9), (1, 0.3)], ungated)
    assert f["a"] > f["b"]


def test_a_request_whose_neighbours_are_single_step_is_ranked_by_its_match() -> None:
    """The gate (docs/ranking.md, Steps, "Gate"): nearest intents all of one-tool patterns say
    the request asks for one step, so the fit does not choose between same-size siblings (a
    vote that favours the group with the most intents); multi-step neighbours open it."""
    table = _table(
        {
            "a": ("hotel_search",),
            "b": ("weather_forecast",),
            "ab": ("hotel_search", "weather_forecast"),
        }
    )
    single = [(0, 0.9), (1, 0.3)]
    assert _factors(table, ["a", "b", "ab"], "somewhere to stay", single) == {
        "a": 1.0,
        "b": 1.0,
        "ab": 1.0,
    }
    ungated = replace(CONFIG, step_gate=0.0)
    # neighbours averaging two steps or more: the full fit, as without the gate
    multi = [(2, 0.9), (0, 0.3)]  # k = (0.9 * 2 + 0.3 * 1) / 1.2 = 1.75: gate 0.75
    full = [(2, 0.9)]
    for votes, gate in ((multi, 0.75), (full, 1.0)):
        on = _factors(table, ["a", "b", "ab"], "somewhere to stay", votes)
        off = _factors(table, ["a", "b", "ab"], "somewhere to stay", votes, ungated)
        for p in on:
            assert on[p] == pytest.approx(1.0 - gate * (1.0 - off[p]), abs=1e-6)  # f32 cosines
        assert on["ab"] > on["a"]
    # no neighbour (an empty memory, or names alone): the gate stays open
    assert _factors(table, ["ab"], "hotel search then weather forecast") == _factors(
        table, ["ab"], "hotel search then weather forecast", config=ungated
    )


@settings(max_examples=200, deadline=None)
@given(
    tools=st.lists(st.sampled_from(TOOLS), min_size=1, max_size=4, unique=True),
    named=st.lists(st.sampled_from(TOOLS), max_size=4, unique=True),
    votes=st.lists(st.tuples(st.integers(0, 2), st.floats(-1.0, 1.0, width=32)), max_size=10),
    weight=st.floats(0.0, 1.0),
    gate=st.floats(0.0, 1.0),
)
def test_the_gate_only_softens_the_fit(
    tools: list[str],
    named: list[str],
    votes: list[tuple[int, float]],
    weight: float,
    gate: float,
) -> None:
    """Gated, a factor lies between the ungated one and 1: the gate never makes a pattern's
    steps cost more, so the bound [1 - step_weight, 1] (a candidate whose match is more than
    1 / (1 - step_weight) times another's keeps its place) holds whatever the neighbours."""
    patterns = {"p": tuple(tools), "q": ("hotel_search",), "r": ("send_email", "stock_quote")}
    table = _table(patterns)
    config = replace(CONFIG, step_weight=weight, step_gate=gate)
    ungated = replace(config, step_gate=0.0)
    on = _factors(table, list(patterns), _request(named), votes, config)
    off = _factors(table, list(patterns), _request(named), votes, ungated)
    for p in patterns:
        assert off[p] - 1e-12 <= on[p] <= 1.0
        assert 1.0 - weight - 1e-12 <= on[p]


def test_bad_arguments_name_their_field() -> None:
    table = _core.RankTable()
    with pytest.raises(InvalidArgumentError) as err:
        table.set_pattern("p", "c", ["a", "b"], False, False, [["a"]])
    assert "tool_words" in str(err.value)
    with pytest.raises(InvalidArgumentError) as err:
        table.step_factors(
            [1, 2], [0.5], ["p"], [], core_params(CONFIG), NO_VECTORS, np.ones(4, np.float32)
        )
    assert "hit_scores" in str(err.value)
    with pytest.raises(ValueError, match="step_weight"):
        RankingConfig(step_weight=1.5)
    with pytest.raises(ValueError, match="step_gate"):
        RankingConfig(step_gate=-0.1)


@settings(max_examples=200, deadline=None)
@given(
    tools=st.lists(
        st.lists(st.sampled_from(TOOLS), min_size=1, max_size=3, unique=True),
        min_size=2,
        max_size=2,
    ),
    named=st.lists(st.sampled_from(TOOLS), max_size=4, unique=True),
    votes=st.lists(st.tuples(st.integers(0, 1), st.floats(-1.0, 1.0, width=32)), max_size=10),
    cosines=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
    usage=st.tuples(st.integers(1, 500), st.integers(1, 500)),
    gate=st.sampled_from([0.0, 1.0]),
)
def test_steps_and_use_never_reorder_candidates_whose_matches_differ_by_more_than_their_band(
    tools: list[list[str]],
    named: list[str],
    votes: list[tuple[int, float]],
    cosines: tuple[float, float],
    usage: tuple[int, int],
    gate: float,
) -> None:
    """Through rank() with the core's step factors: of two patterns that never failed, the one
    whose match is more than 1 / ((1 - step_weight) (1 - usage_weight)) times the other's ranks
    first, whatever their steps, their use and the neighbours (docs/ranking.md, Served against
    match only)."""
    from pml_server.domain.model import SuggestQuery
    from testing.ranking_oracle import rank
    from tests.support import NOW_MS, candidate, pattern

    config = replace(CONFIG, step_gate=gate)
    table = _table({"a": tuple(tools[0]), "b": tuple(tools[1])})
    steps = _factors(table, ["a", "b"], _request(named), votes, config)
    cands = [
        replace(
            candidate(
                pattern(name, successes=n, usage=n, capability_id=f"c-{name}", tools=tuple(t)),
                cos,
            ),
            steps=steps[name],
        )
        for name, t, cos, n in zip(("a", "b"), tools, cosines, usage, strict=True)
    ]
    result = rank(SuggestQuery("x", k=2, min_match=0.0), cands, config, NOW_MS)
    order = [s.pattern.id for s in result.suggestions]
    match = {s.pattern.id: s.score.match for s in result.suggestions}
    band = (1.0 - config.step_weight) * (1.0 - config.usage_weight)
    if match["a"] * band > match["b"]:
        assert order == ["a", "b"]
    elif match["b"] * band > match["a"]:
        assert order == ["b", "a"]
