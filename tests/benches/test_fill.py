"""The benchmark stores: filled in record_many batches (benches/harness/fill.py `record_all`) or in
bulk (`bulk_record_new`, the 1M store of --large), they hold the same rows and their indexes answer
alike. Counts, rows and lookups only, never a timing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from benches.harness import service_workload as work
from benches.harness.check_fill import _open, lexical_answers, store_contents
from benches.harness.fill import bulk_record_new, record_all
from benches.harness.service_server import TENANT, _record, populate
from pml_server.domain.model import ExecutionRecord, SuggestQuery

COUNT = 300  # more than four batches of record_many, and of the bulk chunk below
CHUNK = 64  # the bulk fill's chunk in these tests: chunk edges and a partial last chunk


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


def _with_vector(i: int) -> ExecutionRecord:
    return _record(i, tuple(work.stored_vectors(1, offset=i)[0].tolist()))


def _bulk_fill(data_dir: Path, count: int) -> None:
    engine = _open(data_dir)
    try:
        bulk_record_new(engine, TENANT, count, _with_vector, chunk=CHUNK)
    finally:
        engine.close()


def _contents(data_dir: Path) -> tuple[dict[str, object], object, int]:
    engine = _open(data_dir)
    try:
        vectors = engine._state.indexes.for_tenant(TENANT).vector_count()
        return store_contents(engine), lexical_answers(engine), vectors
    finally:
        engine.close()


@pytest.mark.model
def test_bulk_fill_stores_what_record_many_batches_store(tmp_path: Path) -> None:
    populate(tmp_path / "batched", COUNT, "minilm", with_vectors=True, bulk=False)
    _bulk_fill(tmp_path / "bulk", COUNT)
    batched, batched_lexical, batched_vectors = _contents(tmp_path / "batched")
    bulk, bulk_lexical, bulk_vectors = _contents(tmp_path / "bulk")
    assert bulk["stats"] == batched["stats"]
    assert bulk["stats"]["patterns"] == bulk["stats"]["intents"] == COUNT  # type: ignore[index]
    assert bulk["rows"] == batched["rows"]
    assert bulk["answers"] == batched["answers"]
    assert bulk["patterns"] == batched["patterns"]
    assert len(bulk["patterns"]) == COUNT  # type: ignore[arg-type]
    assert bulk_lexical == batched_lexical
    assert bulk_vectors == batched_vectors == COUNT
    probes = [0, CHUNK - 1, CHUNK, 150, COUNT - 1]  # chunk edges and the partial last chunk
    assert all(_own_patterns_found(tmp_path / "bulk", probes))
    assert all(_own_patterns_found(tmp_path / "batched", probes))


def test_the_bulk_fill_refuses_what_would_not_be_a_new_pattern(tmp_path: Path) -> None:
    engine = _open(tmp_path / "store")
    try:
        same_code = {70: 3}  # execution 70 repeats execution 3's code (and so its tools)

        def make(i: int) -> ExecutionRecord:
            record = _with_vector(i)
            twin = same_code.get(i)
            if twin is None:
                return record
            calls = _record(twin, None).tool_calls
            return replace(record, code=work.code_for(twin), tool_calls=calls)

        with pytest.raises(ValueError, match="pop-70 repeats a code hash"):
            bulk_record_new(engine, TENANT, 100, make, chunk=CHUNK)
        assert engine.stats(TENANT).patterns == CHUNK  # the first chunk, not the refused one
        with pytest.raises(ValueError, match="already holds patterns"):
            bulk_record_new(engine, TENANT, 10, _with_vector, chunk=CHUNK)
    finally:
        engine.close()
    engine = _open(tmp_path / "vectorless")
    try:
        with pytest.raises(ValueError, match="pop-0 has no vector"):
            bulk_record_new(engine, TENANT, 10, lambda i: _record(i, None), chunk=CHUNK)
    finally:
        engine.close()


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
