"""Tool profiles (docs/ranking.md, Steps, "Tool profiles"), through the core's ranking table and
a real vector index: each tool's profile is the unit mean of the vectors of every intent of
every pattern calling it, and a candidate's profile factor is `1 - w + w * clamp(cos(T), 0,
1)`, `cos(T)` the request's cosine with the sum of its tools' profiles over `profile_norm`.

Properties: a request made of the parts of k tools prefers the pattern with exactly those
tools over a subset and over a superset; adding a tool the request points away from never
raises the factor; the factor stays in [1 - w, 1]; the profiles kept up to date write by
write equal those of a table built in one go; the exact-scan index gives the HNSW index's
factors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server import _core
from pml_server._core import COMPANION_PROFILE_BOOST
from pml_server.ranking import RankingConfig
from pml_server.ranking.table import RankTable
from pml_server.search.vectors import new_index

DIM = 16
# the profiles' part alone: no Dice evidence (no neighbours, no tool named)
CONFIG = RankingConfig(step_weight=0.0, step_order_weight=0.0)
TOOLS = [f"tool_{n}" for n in range(8)]


def _basis(seed: int) -> np.ndarray:
    """An orthonormal basis of DIM random directions, one row per tool (and spares)."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(DIM, DIM)))
    return q.T.astype(np.float32)


def _unit(rows: np.ndarray) -> np.ndarray:
    """`rows` normalized as `Memory.teach` normalizes them."""
    out: np.ndarray = (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
    return out


class Memory:
    """A ranking table and a vector index: `teach` stores a pattern calling `tools` with one
    intent per vector; `candidate` a pattern with tools and no intent of its own."""

    def __init__(self, ann: _core.HnswIndex | None = None) -> None:
        self.table = RankTable()
        self.ann = ann if ann is not None else _core.HnswIndex(DIM)
        self.next_id = 0

    def teach(
        self, pattern: str, tools: tuple[str, ...], vectors: np.ndarray, tools_last: bool = False
    ) -> list[int]:
        """`tools_last`: the intents are linked before the pattern's record sets its tools."""
        if not tools_last:
            self.table.set_pattern(pattern, f"cap-{pattern}", tools, False, False)
        self.table.set_counters(pattern, 1, 0, 1, 0, [])
        ids = list(range(self.next_id, self.next_id + len(vectors)))
        self.next_id += len(vectors)
        self.ann.add(np.array(ids, dtype=np.uint64), _unit(vectors))
        for i in ids:
            self.table.link_intent(i, pattern)
        if tools_last:
            self.table.set_pattern(pattern, f"cap-{pattern}", tools, False, False)
        return ids

    def forget(self, ids: list[int]) -> None:
        self.ann.remove(np.array(ids, dtype=np.uint64))
        self.table.unlink_intents(ids)

    def candidate(self, pattern: str, tools: tuple[str, ...]) -> None:
        self.table.set_pattern(pattern, f"cap-{pattern}", tools, False, False)
        self.table.set_counters(pattern, 1, 0, 1, 0, [])

    def factors(
        self, patterns: list[str], query: np.ndarray, config: RankingConfig = CONFIG
    ) -> dict[str, float]:
        got = self.table.step_factors(
            [], patterns, "zzz", config, self.ann, query.astype(np.float32)
        )
        return dict(zip(patterns, got, strict=True))


def _taught(basis: np.ndarray, tools: list[str]) -> Memory:
    """Each tool learned from one single-tool pattern whose intents point its own way."""
    memory = Memory()
    for n, tool in enumerate(tools):
        memory.teach(f"teach-{tool}", (tool,), np.stack([basis[n], basis[n]]))
    return memory


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 4),
    missing=st.integers(1, 3),
    extra=st.integers(1, 3),
)
def test_a_request_made_of_k_tools_prefers_exactly_those(
    seed: int, k: int, missing: int, extra: int
) -> None:
    basis = _basis(seed)
    memory = _taught(basis, TOOLS)
    named = TOOLS[:k]
    request = basis[:k].sum(axis=0)  # a request made of the k tools' parts
    memory.candidate("exact", tuple(named))
    patterns = ["exact"]
    if k - missing >= 1:
        memory.candidate("subset", tuple(named[: k - missing]))
        patterns.append("subset")
    memory.candidate("superset", (*named, *TOOLS[k : k + extra]))
    patterns.append("superset")
    f = memory.factors(patterns, request)
    assert f["exact"] == pytest.approx(1.0, abs=2e-3)
    for other in patterns[1:]:
        assert f[other] < f["exact"] - 1e-3, (other, f)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(1, 4),
    weight=st.floats(0.05, 1.0),
)
def test_a_tool_the_request_points_away_from_never_raises_the_factor(
    seed: int, k: int, weight: float
) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(k + 1, DIM)).astype(np.float32)
    request = rng.normal(size=DIM).astype(np.float32)
    unit = request / np.linalg.norm(request)
    # the added tool's intents point away from the request (cosine at most -0.05)
    away = vectors[k] - (float(vectors[k] @ unit) + 0.05 * np.linalg.norm(vectors[k])) * unit
    vectors[k] = away if float(away @ unit) < 0 else -unit
    memory = Memory()
    tools = [f"t{n}" for n in range(k + 1)]
    for n, tool in enumerate(tools):
        memory.teach(f"teach-{tool}", (tool,), vectors[n : n + 1])
    memory.candidate("p", tuple(tools[:k]))
    memory.candidate("p_plus", tuple(tools))
    config = replace(CONFIG, step_profile_weight=weight)
    f = memory.factors(["p", "p_plus"], request, config)
    assert f["p_plus"] <= f["p"], f
    for factor in f.values():
        assert 1.0 - weight - 1e-12 <= factor <= 1.0


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    steps=st.lists(
        st.tuples(st.integers(0, 5), st.lists(st.sampled_from(TOOLS[:5]), min_size=1, max_size=3)),
        min_size=1,
        max_size=12,
    ),
    forget=st.lists(st.integers(0, 11), max_size=4),
    tools_last=st.lists(st.booleans(), min_size=12, max_size=12),
    retool=st.lists(st.integers(0, 11), max_size=3),
)
def test_profiles_kept_write_by_write_equal_a_table_built_at_once(
    seed: int,
    steps: list[tuple[int, list[str]]],
    forget: list[int],
    tools_last: list[bool],
    retool: list[int],
) -> None:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(len(steps), DIM)).astype(np.float32)
    request = rng.normal(size=DIM).astype(np.float32)
    candidates = {f"c{n}": tuple(TOOLS[n : n + 2]) for n in range(4)} | {"c7": (TOOLS[7],)}
    gone = {n for n in forget if n < len(steps)}
    moved = {n for n in retool if n < len(steps)}  # a pattern whose tools become tool_7's
    final = [
        (TOOLS[7],) if n in moved else tuple(sorted(set(tools)))
        for n, (_, tools) in enumerate(steps)
    ]
    # asked after every write: the profiles are brought up to date query by query
    live = Memory()
    for name, tools in candidates.items():
        live.candidate(name, tools)
    owned: list[list[int]] = []
    for n, (pattern, tools) in enumerate(steps):
        name = f"p{pattern}-{n}"
        ids = live.teach(name, tuple(sorted(set(tools))), vectors[n : n + 1], tools_last[n])
        owned.append(ids)
        live.factors(list(candidates), request)
    for n in sorted(moved):
        live.table.set_pattern(f"p{steps[n][0]}-{n}", "cap", final[n], False, False)
        live.factors(list(candidates), request)
    for n in sorted(gone):
        live.forget(owned[n])
        live.factors(list(candidates), request)
    # the same memory written at once, asked once
    once = Memory()
    for name, tools in candidates.items():
        once.candidate(name, tools)
    for n, (pattern, _) in enumerate(steps):
        if n not in gone:
            once.teach(f"p{pattern}-{n}", final[n], vectors[n : n + 1])
    got, want = live.factors(list(candidates), request), once.factors(list(candidates), request)
    assert got == pytest.approx(want, abs=1e-9)


def test_the_exact_scan_index_gives_the_hnsw_index_factors() -> None:
    basis = _basis(7)
    core, python = Memory(), Memory(new_index("exact", DIM))
    for memory in (core, python):
        for n, tool in enumerate(TOOLS[:4]):
            memory.teach(f"teach-{tool}", (tool,), basis[n : n + 1] + 0.3 * basis[n + 4])
        memory.candidate("pair", (TOOLS[0], TOOLS[1]))
        memory.candidate("one", (TOOLS[2],))
    request = basis[0] + basis[1]
    got = python.factors(["pair", "one"], request)
    want = core.factors(["pair", "one"], request)
    assert got == pytest.approx(want, abs=1e-9)  # the same stored vectors, scanned either way
    assert got["pair"] > got["one"]


def test_no_profile_or_no_weight_leaves_the_total_alone() -> None:
    memory = Memory()
    memory.candidate("unknown_tools", ("never_seen",))
    memory.candidate("toolless", ())
    memory.teach("taught", ("known",), np.ones((1, DIM), np.float32))
    query = np.ones(DIM, np.float32)
    f = memory.factors(["unknown_tools", "toolless", "missing"], query)
    assert f == {"unknown_tools": 1.0, "toolless": 1.0, "missing": 1.0}
    off = replace(CONFIG, step_profile_weight=0.0)
    away = memory.factors(["taught"], -query, off)
    assert away == {"taught": 1.0}
    assert memory.factors(["taught"], -query)["taught"] == pytest.approx(1.0 - 0.8)


def test_bad_arguments_name_their_field() -> None:
    with pytest.raises(ValueError, match="step_profile_weight"):
        RankingConfig(step_profile_weight=1.5)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    steps=st.lists(
        st.lists(st.sampled_from(TOOLS[:5]), min_size=1, max_size=3), min_size=1, max_size=10
    ),
    late=st.lists(st.booleans(), min_size=10, max_size=10),
    weight=st.floats(0.05, 1.0),
)
def test_the_companions_profiles_are_its_own_spaces(
    seed: int, steps: list[list[str]], late: list[bool], weight: float
) -> None:
    """A request in another language reads the tool profiles summed from the companion's
    vectors (docs/ranking.md, Other languages, "Tool profiles in the companion's space"),
    kept apart from the primary's, with the weight `step_profile_weight` x
    `COMPANION_PROFILE_BOOST` at most 1; a companion vector computed after its intent was
    linked (the companion fills its index on a thread) is added when it arrives. So its
    factors are those of a table whose only space holds the companion's vectors."""
    rng = np.random.default_rng(seed)
    companion_dim = DIM + 4  # another model, another size
    primary = rng.normal(size=(len(steps), DIM)).astype(np.float32)
    other = rng.normal(size=(len(steps), companion_dim)).astype(np.float32)
    other /= np.linalg.norm(other, axis=1, keepdims=True)
    request = rng.normal(size=companion_dim).astype(np.float32)
    candidates = {f"c{n}": tuple(TOOLS[n : n + 2]) for n in range(4)}
    config = replace(CONFIG, step_profile_weight=weight)
    # the engine's table: profiles of the primary space and, apart, of the companion's
    both = Memory()
    companion = _core.HnswIndex(companion_dim)
    for name, tools in candidates.items():
        both.candidate(name, tools)
    for n, tools in enumerate(steps):
        (intent,) = both.teach(f"p{n}", tuple(sorted(set(tools))), primary[n : n + 1])
        if not late[n]:
            companion.add(np.array([intent], dtype=np.uint64), _unit(other[n : n + 1]))
    both.factors(list(candidates), primary[0])  # the primary profiles summed first
    ask = list(candidates)

    def in_companion() -> list[float]:
        return both.table.step_factors([], ask, "zzz", config, companion, request, companion=True)

    in_companion()  # the late vectors are not in yet
    for n in range(len(steps)):
        if late[n]:
            companion.add(np.array([n], dtype=np.uint64), _unit(other[n : n + 1]))
    got = in_companion()
    # a table whose one space is the companion's, at the boosted weight; its vectors added
    # as `Memory.teach` adds them (`_unit`), as the companion's were: the index keeps
    # half-precision vectors, and a float32 ulp apart can round to another half, which moves
    # a factor by about 1e-5

    alone = Memory(_core.HnswIndex(companion_dim))
    for name, tools in candidates.items():
        alone.candidate(name, tools)
    for n, tools in enumerate(steps):
        alone.teach(f"p{n}", tuple(sorted(set(tools))), other[n : n + 1])
    boosted = replace(config, step_profile_weight=min(1.0, weight * COMPANION_PROFILE_BOOST))
    assert got == pytest.approx(list(alone.factors(ask, request, boosted).values()), abs=1e-6)
    # the primary profiles did not move
    fresh = Memory()
    for name, tools in candidates.items():
        fresh.candidate(name, tools)
    for n, tools in enumerate(steps):
        fresh.teach(f"p{n}", tuple(sorted(set(tools))), primary[n : n + 1])
    assert both.factors(ask, primary[0], config) == pytest.approx(
        fresh.factors(ask, primary[0], config), abs=1e-9
    )
