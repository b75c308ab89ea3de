"""Suggest ranked in the Rust core gives the Python ranking's answer, on a real engine.

The engine ranks in the core (`ranking.table`, one call over its ranking table), with or
without `explain`; the oracle ranks in Python (`testing/ranking_oracle/path.py`: `retrieve` +
`rank_lazily`, the former Python path, whose lazy answer equals the full `rank`:
tests/ranking/oracle/test_lazy.py). The suggestions of the two must be equal, score parts bit
for bit, and with `explain` so must every filtered candidate (rule, detail, score), after
captures, failures, tags, retention marks, ungrouping, deletions and a restart (the table
restored from the store)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pml_server import _core
from pml_server.domain.model import PageRequest, SuggestContext, SuggestQuery
from pml_server.ranking import (
    FilterSettings,
    LexicalIndex,
    RankingConfig,
    RankRequest,
    RankTable,
    core_params,
)
from pml_server.service import Engine, _curation
from testing.ranking_oracle import path as oracle
from testing.ranking_oracle.scoring import relevance
from testing.ranking_oracle.signals import (
    recency_factor,
    reliability_factor,
    success_estimate,
    usage_factor,
)
from tests.support import Clock, make_record, open_engine

WORDS = [
    "read",
    "parse",
    "csv",
    "json",
    "excel",
    "upload",
    "send",
    "email",
    "report",
    "invoice",
    "resize",
    "image",
    "zip",
]
TOOLS = ["read_file", "parse_csv", "parse_xlsx", "gmail_send", "s3_put", "resize", "zip"]


def _populate(engine: Engine, clock: Clock, rng: random.Random, tenant: str) -> None:
    for i in range(70):
        tools = rng.sample(TOOLS, rng.randint(1, 3))
        intent = " ".join(rng.sample(WORDS, rng.randint(2, 4)))
        failed = {tools[0]} if rng.random() < 0.25 else None
        tags = tuple(rng.sample(["prod", "beta", "eu"], rng.randint(0, 2)))
        # a few codes repeat: counters grow, intents are added to existing patterns
        path = f"f{rng.randint(0, 25)}.json"
        engine.record(
            tenant, make_record(f"r{i}", intent, tools, failed=failed, path=path, tags=tags)
        )
        clock.advance_days(rng.choice([0.0, 0.0, 3.0, 40.0]))


def _queries(rng: random.Random) -> list[SuggestQuery]:
    queries = []
    for _ in range(40):
        intent = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
        queries.append(
            SuggestQuery(
                intent,
                k=rng.randint(1, 6),
                min_match=rng.choice([None, 0.0, 0.2]),
                min_success=rng.choice([None, 0.0, 0.6]),
                include_flagged=rng.random() < 0.3,
                available_tools=rng.choice([None, None, tuple(rng.sample(TOOLS, 4)), ()]),
                tags=rng.choice([(), (), ("prod",), ("prod", "eu"), ("never",)]),
            )
        )
    return queries


def _assert_core_equals_python(engine: Engine, tenant: str, queries: list[SuggestQuery]) -> int:
    shown = 0
    for query in queries:
        core = engine.suggest(tenant, query)
        python = oracle.rank_suggestions(engine._state, tenant, replace(query, explain=True))
        assert core.suggestions == python.suggestions, query
        assert core.filtered == ()
        explained = engine.suggest(tenant, replace(query, explain=True))
        # what the filters removed is a second ranking, not the oracle's
        # (tests/service/test_context_filters.py)
        assert replace(explained, removed_by_filters=0, missing_tools=()) == python, query
        shown += len(core.suggestions)
    return shown


@pytest.mark.parametrize("seed", [1, 2])
def test_the_core_ranks_as_the_python_ranking(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    engine = open_engine(tmp_path, clock, retention_in_background=False)
    _populate(engine, clock, rng, "t")
    _populate(engine, clock, random.Random(seed + 100), "other")  # tenant isolation
    queries = _queries(rng)
    assert _assert_core_equals_python(engine, "t", queries) > 40  # not vacuous
    # marks, ungrouping and deletions change what ranks
    patterns = engine.list_patterns("t", PageRequest(page_size=100)).items
    engine.run_retention("t", apply=True)
    for view in patterns[:3]:
        _curation.set_marks(engine._state, "t", view.id, True, patterns[-1].id)
    engine.admin.ungroup_pattern("t", patterns[4].id)
    engine.delete_pattern("t", patterns[5].id)
    clock.advance_days(150)
    _assert_core_equals_python(engine, "t", queries)
    _assert_core_equals_python(engine, "other", queries)
    engine.close()
    reopened = open_engine(tmp_path, clock, retention_in_background=False)
    _assert_core_equals_python(reopened, "t", queries)
    assert reopened.suggest("nobody", queries[0]).suggestions == ()
    reopened.close()


def test_the_exact_vector_index_ranks_in_the_core_as_the_python_ranking(tmp_path: Path) -> None:
    """`vector_index = "exact"` (the core index scanning every vector) takes the same core
    call: its answers, explained ones too, are the oracle's over the same index."""
    rng = random.Random(3)
    clock = Clock()
    engine = open_engine(tmp_path, clock, retention_in_background=False, vector_index="exact")
    assert engine._state.indexes.get("t") is None
    _populate(engine, clock, rng, "t")
    index = engine._state.indexes.get("t")
    assert index is not None
    assert index.ann.exact
    assert _assert_core_equals_python(engine, "t", _queries(rng)) > 40
    engine.close()


def test_the_core_ranks_as_the_python_ranking_with_a_context(tmp_path: Path) -> None:
    """The session signal (docs/ranking.md, Sessions) is applied alike on both paths: random
    sessions over random patterns, queries with a session, previous tools or patterns."""
    rng = random.Random(5)
    clock = Clock()
    engine = open_engine(tmp_path, clock, retention_in_background=False)
    _populate(engine, clock, rng, "t")
    for n in range(60):  # 20 sessions of 3 steps, single tools
        tools = [rng.choice(TOOLS)]
        intent = " ".join(rng.sample(WORDS, 2))
        record = make_record(f"s{n}", intent, tools, path=f"f{rng.randint(0, 5)}.json")
        engine.record("t", replace(record, session_id=f"session-{n // 3}"))
    pattern_ids = [p.id for p in engine.list_patterns("t", PageRequest(page_size=100)).items]
    contexts = [
        SuggestContext(session_id=f"session-{rng.randint(0, 19)}"),
        SuggestContext(previous_tools=(rng.choice(TOOLS),)),
        SuggestContext(previous_patterns=(rng.choice(pattern_ids),)),
    ]
    queries = [replace(q, context=rng.choice(contexts)) for q in _queries(rng)]
    assert _assert_core_equals_python(engine, "t", queries) > 40
    lifted = [
        s.score.transition
        for q in queries
        for s in engine.suggest("t", replace(q, min_match=0.0)).suggestions
    ]
    assert any(t > 1.0 for t in lifted), "some suggestions followed the previous step"
    engine.close()


def test_the_core_formula_is_the_python_reference() -> None:
    """One pattern at a time through the core (a 1-intent table) against `scoring`."""
    config = RankingConfig(
        usage_weight=0.3,
        prior_failures=2.0,
        recency_floor=0.1,
        expected_success_rate=0.8,
        reliability_prior_strength=3.0,
        step_gate=0.0,  # a lone single-step pattern would close the gate: the profile shows
    )
    reliabilities: set[float] = set()
    rng = random.Random(7)
    now = 1_800_000_000_000
    for i in range(200):
        ann = _core.HnswIndex(4)
        vector = np.array([rng.uniform(-1, 1) for _ in range(4)], dtype=np.float32)
        ann.add(np.array([1], dtype=np.uint64), vector.reshape(1, -1))
        table = RankTable()
        successes, failures, usage = rng.randint(0, 80), rng.randint(0, 30), rng.randint(0, 500)
        last = now - rng.randint(0, 400 * 86_400_000)
        table.link_intent(1, f"p{i}")
        table.set_pattern(f"p{i}", "c", ["t"], False, rng.random() < 0.5)
        table.set_counters(f"p{i}", successes, failures, usage, last, [])
        settings = FilterSettings(0.0, 0.0, True, None, frozenset())
        query = np.array([rng.uniform(-1, 1) for _ in range(4)], dtype=np.float32)
        factor = rng.choice([None, 1.0, 1.0 + rng.random() * 0.25])
        transitions = None if factor is None else {"c": factor}
        request = RankRequest(query, "", 8, 1, settings, config, now, transitions)
        (got,) = table.rank(ann, LexicalIndex(), request)
        _, (cosine,) = ann.search(query, 1)
        parts = got.score
        assert (parts.semantic, parts.lexical, parts.match) == relevance(float(cosine), 0.0, config)
        assert parts.success_estimate == success_estimate(successes, failures, config)
        assert parts.reliability == reliability_factor(successes, failures, config)
        reliabilities.add(parts.reliability)
        assert parts.usage == usage_factor(usage, config)
        assert parts.recency == recency_factor(last, now, config)
        product = parts.match * parts.reliability * parts.usage * parts.recency
        assert parts.transition == (factor or 1.0)
        # the step fit: the lone tool's profile is this pattern's one intent (docs/ranking.md,
        # Steps, "Tool profiles"), so the factor follows the request's cosine with it
        profile = 1.0 - config.step_profile_weight + config.step_profile_weight * max(cosine, 0.0)
        assert parts.steps == pytest.approx(profile, abs=2e-3)
        steps = parts.superseded_penalty * parts.steps
        assert parts.total == product * steps * parts.transition
        if factor is None:
            assert parts.total == product * steps
    assert 1.0 in reliabilities, "patterns without failures were drawn"
    assert min(reliabilities) < 0.5, "mostly failing patterns were drawn"
    assert core_params(config) is core_params(config)
