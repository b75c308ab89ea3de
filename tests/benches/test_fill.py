"""The benchmark stores filled in record_many batches (benches/fill.py) hold what the old fill,
one `record` per execution, stored. Counts and lookups only, never a timing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from benches import service_workload as work
from benches.check_fill import _open, sequential_fill
from benches.fill import record_all
from benches.service_server import TENANT, _record, populate
from pml_server.domain.model import ExecutionRecord, SuggestQuery

COUNT = 300  # more than four batches, the last one partial


def _own_patterns_found(data_dir: Path, probes: list[int]) -> list[bool]:
    """Whether Suggest, asked with execution i's own intent and vector, answers i's code first."""
    engine = _open(data_dir)
    try:
        vectors = work.stored_vectors(COUNT)
        found = []
        for i in probes:
            query = SuggestQuery(
                work.intent_text(i), k=1, intent_embedding=tuple(vectors[i].tolist())
            )
            top = engine.suggest(TENANT, query).suggestions
            found.append(bool(top) and top[0].pattern.original_code == work.code_for(i))
        return found
    finally:
        engine.close()


def _counts(data_dir: Path) -> tuple[int, int, int, int]:
    engine = _open(data_dir)
    try:
        s = engine.stats(TENANT)
        return s.patterns, s.capabilities, s.intents, s.executions
    finally:
        engine.close()


def test_batched_fill_stores_what_the_sequential_fill_stores(tmp_path: Path) -> None:
    sequential_fill(tmp_path / "sequential", COUNT)
    populate(tmp_path / "batched", COUNT, "minilm", with_vectors=True)
    assert _counts(tmp_path / "batched") == _counts(tmp_path / "sequential")
    assert _counts(tmp_path / "batched") == (COUNT, COUNT, COUNT, COUNT)
    probes = [0, 63, 64, 150, COUNT - 1]  # batch edges and the partial last batch
    assert all(_own_patterns_found(tmp_path / "batched", probes))
    assert all(_own_patterns_found(tmp_path / "sequential", probes))


def test_a_refused_execution_fails_the_fill(tmp_path: Path) -> None:
    engine = _open(tmp_path / "store")
    try:

        def make(i: int) -> ExecutionRecord:
            record = _record(i, None)
            return replace(record, intent="") if i == 70 else record  # empty intent: refused

        with pytest.raises(RuntimeError, match="pop-70 refused"):
            record_all(engine, TENANT, 100, make)
    finally:
        engine.close()
