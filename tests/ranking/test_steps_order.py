"""The order fit (docs/ranking.md, Steps, "Order of the steps"), through the core's ranking
table: for a request that states an order ("then", "after that", "first", ...), a pattern
running two steps the request names by their tools' distinctive words in the other order than
named loses `step_order_weight` x its share of such pairs.

Properties: the pattern running the named steps in the order named keeps 1, its reverse gets
1 - w; any order stays in [1 - w, 1] and loses in proportion to its discordant pairs; a request
stating no order, or w = 0, leaves every order at 1; served, two patterns with the same steps
and the same intent are told apart by the order the request names their steps in."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.ranking import RankingConfig
from pml_server.ranking.plans import states_order
from tests.ranking.test_steps_profiles import DIM, Memory

WEIGHT = 0.2
# the order fit alone: no Dice evidence, no profile factor, no coverage
CONFIG = RankingConfig(
    step_weight=0.0, step_profile_weight=0.0, step_coverage_weight=0.0, step_order_weight=WEIGHT
)
# tools whose names share a word ("data", generic, and "report") besides one of their own
NOUNS = ["lyrics", "translation", "sentiment", "invoice", "forecast"]
TOOLS = [f"get_{noun}_report" for noun in NOUNS]


def _factors(order: tuple[int, ...], asked: list[int], text: str | None = None) -> float:
    memory = Memory()
    memory.candidate("p", tuple(TOOLS[n] for n in order))
    request = text or "first " + " then ".join(NOUNS[n] for n in asked)
    (got,) = memory.table.step_factors(
        [], ["p"], request, CONFIG, memory.ann, np.ones(DIM, dtype=np.float32)
    )
    return got


def _discordant_share(order: tuple[int, ...], asked: list[int]) -> float:
    at = {n: i for i, n in enumerate(asked)}
    named = [at[n] for n in order if n in at]
    pairs = [(a, b) for a, b in itertools.combinations(named, 2)]
    return sum(a > b for a, b in pairs) / len(pairs) if pairs else 0.0


@settings(max_examples=60, deadline=None)
@given(st.permutations(range(len(NOUNS))), st.integers(2, len(NOUNS)), st.integers(2, 5))
def test_a_pattern_loses_in_proportion_to_the_pairs_it_runs_in_the_other_order(
    asked_all: list[int], k: int, size: int
) -> None:
    asked = asked_all[:k]
    in_order = tuple(asked)
    assert _factors(in_order, asked) == 1.0
    assert _factors(in_order[::-1], asked) == pytest.approx(1.0 - WEIGHT)
    # any pattern over some of the tools (named or not), in any order
    order = tuple(asked_all[:size][::-1])
    got = _factors(order, asked)
    assert 1.0 - WEIGHT - 1e-12 <= got <= 1.0
    assert got == pytest.approx(1.0 - WEIGHT * _discordant_share(order, asked))


def test_without_a_stated_order_or_at_weight_0_every_order_fits_alike() -> None:
    unordered = "lyrics and translation"
    assert not states_order(unordered)
    assert _factors((0, 1), [0, 1], unordered) == _factors((1, 0), [0, 1], unordered) == 1.0
    memory = Memory()
    memory.candidate("p", (TOOLS[1], TOOLS[0]))
    off = RankingConfig(
        step_weight=0.0, step_profile_weight=0.0, step_coverage_weight=0.0, step_order_weight=0.0
    )
    (got,) = memory.table.step_factors(
        [], ["p"], "first lyrics then translation", off, memory.ann, np.ones(DIM, np.float32)
    )
    assert got == 1.0


def test_a_word_every_tool_of_the_pattern_has_places_none_of_them() -> None:
    """ "report" is in both names: it says nothing about which step comes first."""
    assert _factors((1, 0), [0, 1], "first the report then the report") == 1.0


@pytest.mark.parametrize(
    ("text", "ordered"),
    [
        ("Find the lyrics and then translate them to French.", True),
        ("Summarize the file. After that, email it.", True),
        ("First, get the forecast; next, book the flight.", True),
        ("Find the lyrics and translate them.", False),
        ("Book a flight for next Monday.", False),
    ],
)
def test_which_requests_state_an_order(text: str, ordered: bool) -> None:
    assert states_order(text) is ordered
