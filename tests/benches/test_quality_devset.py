"""The dev-set quality bench (benches/harness/quality_devset.py) stays right: its TF-IDF baseline is
the one the set's README reports, and a small run through a real `pml serve` gives sane rows.
Skipped where ../shared/devset is absent (it lives outside the repository)."""

from __future__ import annotations

import pytest

from benches.harness import devset, quality_devset

pytestmark = pytest.mark.skipif(not devset.available(), reason="../shared/devset not present")


def test_tfidf_baseline_reproduces_the_readme() -> None:
    executions, queries = devset.load("default")
    m = quality_devset.metrics(quality_devset.tfidf_ranks(executions, queries))
    # stats.json: hit@1 0.5634, hit@5 0.7638 (its MRR counts every rank, ours stops at k = 5)
    assert m["hit@1"] == pytest.approx(0.5634, abs=5e-4)
    assert m["hit@5"] == pytest.approx(0.7638, abs=5e-4)


def test_splits_are_stable_and_about_a_quarter_checks() -> None:
    _, queries = devset.load("default")
    checks = [q for q in queries if quality_devset.split_of(q) == "check"]
    assert 0.2 < len(checks) / len(queries) < 0.3
    assert [quality_devset.split_of(q) for q in queries] == [
        quality_devset.split_of(q) for q in queries
    ]


@pytest.mark.slow
def test_a_small_run_through_pml_serve_gives_sane_rows() -> None:
    ev = quality_devset.evaluate("default", "hashing", inject=True, max_queries=60)
    rows = {r.metric: r for r in quality_devset.rows_of(ev)}
    served = rows["devset default hashing all served hit@1"].value
    assert 0.3 < served <= 1.0
    assert rows["devset default hashing all served MRR"].value >= served
    twins = rows[
        "devset default hashing injected: served: share of queries where a twin outranks "
        "its original"
    ]
    assert 0.0 <= twins.value <= 1.0
    assert twins.extra["twin patterns"] > 0
