"""A pattern's parameters and schema as every successful run showed them (docs/normalization.md,
Schema), through the engine on the embedded RocksDB store and the shared PostgreSQL store:
runs of one code hash whose values differ widen the stored schema, failed runs do not, and a
parameter a run showed to carry a secret loses its earlier values."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pml_server.domain.model import ExecutionRecord, PatternView, ToolCall
from pml_server.service import Engine
from tests.support import open_engine

T = "t"


@pytest.fixture(params=["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    overrides = (
        {"store": request.getfixturevalue("postgres_dsn")} if request.param == "postgresql" else {}
    )
    engine = open_engine(tmp_path / "db", **overrides)
    yield engine
    engine.close()


def _run(engine: Engine, n: int, literal: str, *, ok: bool = True) -> str:
    record = ExecutionRecord(
        request_id=f"r{n}",
        intent="Fetch the first rows of the report",
        code=f"await mcp.fetch_rows({{source: {literal}}});",
        language="javascript",
        tool_calls=(ToolCall("fetch_rows", ok=ok),),
    )
    return engine.record(T, record).pattern_id


def _source(pattern: PatternView) -> dict[str, object]:
    prop: dict[str, object] = json.loads(pattern.parameter_schema_json)["properties"]["$SOURCE"]
    return prop


def test_later_runs_widen_the_schema_and_failed_runs_do_not(engine: Engine) -> None:
    pid = _run(engine, 1, "5")
    assert _source(engine.get_pattern(T, pid)) == {"type": "integer"}
    assert _run(engine, 2, "2.5", ok=False) == pid  # a failed try: nothing learned
    assert _source(engine.get_pattern(T, pid)) == {"type": "integer"}
    assert _run(engine, 3, "2.5") == pid
    pattern = engine.get_pattern(T, pid)
    assert _source(pattern) == {"type": "number"}
    assert [(p.name, p.json_type) for p in pattern.params] == [("$SOURCE", "number")]
    assert _run(engine, 4, "7") == pid
    assert _source(engine.get_pattern(T, pid)) == {"type": "number"}
    assert engine.get_pattern(T, pid).success_count == 3


def test_a_format_stays_only_while_every_value_shows_it(engine: Engine) -> None:
    pid = _run(engine, 1, '"reports/2026.csv"')
    assert _source(engine.get_pattern(T, pid)) == {"type": "string", "format": "path"}
    _run(engine, 2, '"quarterly"')
    assert _source(engine.get_pattern(T, pid)) == {"type": "string"}


def test_a_parameter_turned_secret_keeps_none_of_its_values(engine: Engine) -> None:
    pid = _run(engine, 1, '"quarterly"')
    _run(engine, 2, '"sk-abcdefghijklmnopqrstuvwx"')
    pattern = engine.get_pattern(T, pid)
    assert _source(pattern) == {"type": "string", "writeOnly": True}
    (param,) = pattern.params
    assert param.secret
    assert param.recent_values_json == ('"[REDACTED]"', '"[REDACTED]"')
    assert "quarterly" not in json.dumps([p.recent_values_json for p in pattern.params])
