"""The request parts' coverage (docs/ranking.md, Steps, "Request parts' coverage"), through the
core's ranking table and a real vector index: for each part of the request (a vector and a
weight), the best cosine of a candidate's tools' profiles over the best of every profiled tool
of the memory, weighted by part; the factor is `1 - w + w * cover(T)`.

Properties: a request made of the parts of k tools gives the pattern with those tools a factor
of 1 and a strict subset a lower one; adding a tool never lowers the factor; the factor stays
in [1 - w, 1]; fewer than two parts, or w = 0, leave every factor at 1; the core's ranking
applies the factor `step_factors` gives (the oracle's path), bit for bit; bad parts name their
field."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server import _core
from pml_server.domain.errors import CoreArgumentError
from pml_server.ranking import RankingConfig, RankRequest, RequestParts
from pml_server.ranking.lexical import LexicalIndex
from pml_server.ranking.settings import FilterSettings
from tests.ranking.test_steps_profiles import DIM, TOOLS, Memory, _basis

# the coverage alone: no Dice evidence, no profile factor
WEIGHT = 0.6
CONFIG = RankingConfig(
    step_weight=0.0, step_profile_weight=0.0, step_coverage_weight=WEIGHT, step_order_weight=0.0
)


def _taught(basis: np.ndarray, tools: list[str]) -> Memory:
    """One single-tool pattern per tool, its intents along the tool's basis direction, so each
    tool's profile is that direction."""
    memory = Memory()
    for n, tool in enumerate(tools):
        memory.teach(f"only-{tool}", (tool,), basis[n : n + 1])
    return memory


def _factors(
    memory: Memory,
    patterns: list[str],
    parts: RequestParts | None,
    config: RankingConfig = CONFIG,
    companion: bool = False,
) -> dict[str, float]:
    """`companion`: `memory.ann` read as the cross-lingual companion's index (its own set of
    profiles), as for a request in another language."""
    query = np.ones(DIM, dtype=np.float32)
    got = memory.table.step_factors(
        [], patterns, "zzz", config, memory.ann, query, companion=companion, parts=parts
    )
    return dict(zip(patterns, got, strict=True))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), k=st.integers(2, 4), companion=st.booleans())
def test_a_request_of_k_parts_prefers_the_pattern_covering_all_of_them(
    seed: int, k: int, companion: bool
) -> None:
    """In the primary space, and in the companion's (a request in another language, its parts
    embedded by the companion, read against the companion's profiles)."""
    basis = _basis(seed)
    memory = _taught(basis, TOOLS)
    asked = TOOLS[:k]
    memory.candidate("exact", tuple(asked))
    memory.candidate("subset", tuple(asked[:-1]))
    memory.candidate("superset", (*asked, TOOLS[k]))
    parts = RequestParts(tuple(basis[n] for n in range(k)), tuple(1.0 for _ in range(k)))
    got = _factors(memory, ["exact", "subset", "superset"], parts, companion=companion)
    assert got["exact"] == pytest.approx(1.0)
    assert got["superset"] == pytest.approx(1.0)
    # the subset misses one part of k: it loses that part's share
    # (the core keeps vectors in half precision: orthogonal directions meet at about 1e-4)
    assert got["subset"] == pytest.approx(1.0 - WEIGHT / k, abs=1e-3)
    assert got["subset"] < got["exact"]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    parts=st.integers(2, 6),
    tools=st.lists(st.sampled_from(TOOLS), min_size=1, max_size=4, unique=True),
    extra=st.sampled_from(TOOLS),
    weights=st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6),
)
def test_adding_a_tool_never_lowers_the_factor_and_it_stays_bounded(
    seed: int, parts: int, tools: list[str], extra: str, weights: list[float]
) -> None:
    rng = np.random.default_rng(seed)
    memory = Memory()
    for tool in TOOLS:  # random profiles, two intents each
        memory.teach(f"only-{tool}", (tool,), rng.normal(size=(2, DIM)))
    memory.candidate("some", tuple(tools))
    memory.candidate("more", tuple(dict.fromkeys([*tools, extra])))
    request = RequestParts(
        tuple(rng.normal(size=DIM).astype(np.float32) for _ in range(parts)),
        tuple(weights[:parts]),
    )
    got = _factors(memory, ["some", "more"], request)
    assert got["more"] >= got["some"] - 1e-12
    for value in got.values():
        assert 1.0 - WEIGHT - 1e-12 <= value <= 1.0 + 1e-12


def test_one_part_no_parts_or_no_weight_leave_every_factor_at_one() -> None:
    basis = _basis(7)
    memory = _taught(basis, TOOLS)
    memory.candidate("one", (TOOLS[0],))
    patterns = ["one", "only-tool_1"]
    two = RequestParts((basis[0], basis[1]), (1.0, 1.0))
    assert set(_factors(memory, patterns, None).values()) == {1.0}
    assert set(_factors(memory, patterns, RequestParts((basis[1],), (1.0,))).values()) == {1.0}
    off = RankingConfig(step_weight=0.0, step_profile_weight=0.0, step_coverage_weight=0.0)
    assert set(_factors(memory, patterns, two, off).values()) == {1.0}
    # and with the weight, each single-tool pattern covers one of the two parts
    for value in _factors(memory, patterns, two).values():
        assert value == pytest.approx(1.0 - WEIGHT / 2, abs=1e-3)


def test_the_ranking_applies_the_factor_step_factors_gives() -> None:
    """The core's Suggest ranking (`rank`, with explain) reports as `steps` exactly the factor
    `step_factors` computes for the same request (the oracle's path), parts included, with
    every step signal on (the neighbours' vote and the gate read the request's nearest
    intents)."""
    config = RankingConfig()
    basis = _basis(11)
    memory = _taught(basis, TOOLS)
    memory.teach("pair", (TOOLS[0], TOOLS[1]), basis[0:1] + basis[1:2])
    lexical = LexicalIndex()
    query = (basis[0] + basis[1]) / np.sqrt(2)
    parts = RequestParts((basis[0], basis[1]), (1.0, 0.5))
    request = RankRequest(
        query.astype(np.float32),
        "zzz",
        40,
        10,
        FilterSettings(0.0, 0.0, False, None, frozenset()),
        config,
        0,
        parts=parts,
    )
    ranked, _ = memory.table.explain(memory.ann, lexical, request)
    assert ranked
    ids, scores = memory.ann.search(query.astype(np.float32), _core.STEP_NEIGHBOURS)
    expected = memory.table.step_factors(
        list(zip(ids.tolist(), scores.tolist(), strict=True)),
        [r.pattern_id for r in ranked],
        "zzz",
        config,
        memory.ann,
        query.astype(np.float32),
        parts=parts,
    )
    assert [r.score.steps for r in ranked] == expected
    assert ranked[0].pattern_id == "pair"
    assert any(r.score.steps < 1.0 for r in ranked)


@pytest.mark.parametrize(
    ("parts", "weights", "field"),
    [
        ([np.ones(DIM, dtype=np.float32)] * 2, [1.0], "part_weights"),
        ([np.ones(DIM + 1, dtype=np.float32)] * 2, [1.0, 1.0], "parts"),
        ([np.ones(DIM, dtype=np.float32)] * 2, [1.0, -1.0], "part_weights"),
        ([np.ones(DIM, dtype=np.float32)] * 2, [1.0, float("nan")], "part_weights"),
        ([np.ones(DIM, dtype=np.float32)] * (_core.MAX_REQUEST_PARTS + 1), [1.0] * 17, "parts"),
        (None, [1.0], "part_weights"),
    ],
)
def test_bad_parts_name_their_field(
    parts: list[np.ndarray] | None, weights: list[float], field: str
) -> None:
    memory = _taught(_basis(3), TOOLS)
    with pytest.raises(CoreArgumentError) as err:
        memory.table._core.step_factors(
            [],
            [],
            [],
            [],
            _core_params(),
            memory.ann,
            np.ones(DIM, dtype=np.float32),
            parts=parts,
            part_weights=weights,
        )
    assert field in str(err.value)


def _core_params() -> _core.RankParams:
    from pml_server.ranking.table import core_params

    return core_params(CONFIG)
