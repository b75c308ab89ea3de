"""The exact multi-step queries (benches/README.md, "Exact multi-step queries")."""

from __future__ import annotations

import pytest

from benches.harness import devset, make_exact_multistep

pytestmark = pytest.mark.skipif(not devset.available(), reason="the dev set is not here")


def test_every_query_is_multi_step_and_its_sequence_is_stored() -> None:
    store, queries = make_exact_multistep.build()
    stored_ids = {e.id for e in store}
    groups = {e.group for e in store}
    assert queries
    for q in queries:
        assert len(q.expected_tools) >= 2
        assert q.expected_group in groups  # some stored execution has the exact sequence
        assert q.id not in stored_ids  # held apart
    held = [q for q in queries if q.origin == "held-apart-execution"]
    assert held
    for q in held:  # each moved group keeps at least MIN_LEFT executions
        left = sum(e.group == q.expected_group for e in store)
        assert left >= make_exact_multistep.MIN_LEFT


def test_build_and_baseline_are_deterministic() -> None:
    first = make_exact_multistep.build()
    second = make_exact_multistep.build()
    assert first == second
    store, queries = first
    baseline = make_exact_multistep.tfidf_baseline(store, queries[:40])
    assert baseline == make_exact_multistep.tfidf_baseline(store, queries[:40])
    assert 0.0 <= baseline["hit@1"] <= baseline["hit@5"] <= 1.0
