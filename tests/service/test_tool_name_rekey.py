"""An older build read a tool named in an argument (`client.callTool({name: "get_weather",
...})`, `session.call_tool("get_weather", ...)`) as a parameter, so runs of two tools shared a
pattern (docs/normalization.md, Tool calls). Opening such a store moves every such pattern to
today's hash once, before the server is ready, so that the next run of its code finds it and a
run of another tool starts its own pattern; on the embedded RocksDB store and on the shared
PostgreSQL store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pml_server.domain.model import SuggestQuery
from pml_server.domain.records import ParamSpec
from pml_server.service import Engine
from pml_server.storage.keys import CF_META
from pml_server.storage.repo._meta import _TOOL_NAMES_KEY as TOOL_NAMES_KEY
from tests.support import make_record, open_engine

T = "t"
CODE = 'const r = await client.callTool({name: "get_weather", arguments: {city: "Paris"}});'
OTHER = 'const r = await client.callTool({name: "get_news", arguments: {city: "Paris"}});'
INTENT = "what is the weather like in Paris today"
OLD_HASH = "0" * 64  # what the older build keyed the pattern by
OLD_TEMPLATE = "const r = await client.callTool({name: $NAME, arguments: {city: $CITY}});"


def _plant_old_build(engine: Engine, pattern_id: str) -> str:
    """Rewrite the stored pattern as the older build wrote it: keyed by another hash, with the
    tool's name a parameter (and no marker). Returns today's hash."""
    repo = engine._state.repo
    pattern = repo.patterns.pattern(T, pattern_id)
    counters = repo.patterns.counters(T, pattern_id)
    assert pattern is not None
    assert counters is not None
    assert pattern.template == CODE.replace('"Paris"', "$CITY")  # today: the name is code
    old = replace(
        pattern,
        code_hash=OLD_HASH,
        template=OLD_TEMPLATE,
        params=(ParamSpec("$NAME", "string", False), *pattern.params),
    )
    recent = {"$NAME": ['"get_weather"'], **counters.recent_values}
    engine._state.store.write(
        [
            repo.patterns.put_pattern(T, old),
            repo.patterns.put_counters(T, pattern_id, replace(counters, recent_values=recent)),
            repo.patterns.delete_hash(T, pattern.code_hash),
            repo.patterns.put_hash(T, OLD_HASH, pattern_id),
            (CF_META, TOOL_NAMES_KEY, None),
        ]
    )
    return pattern.code_hash


def _rekeyed(engine: Engine) -> list[str]:
    return [e["pattern_id"] for e in engine.admin.audit_log(T) if e["action"] == "rekeyed"]


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_an_older_builds_patterns_of_named_tools_move_to_todays_hash_once(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dsn = request.getfixturevalue("postgres_dsn") if store == "postgresql" else None
    overrides = {"store": dsn} if dsn else {}
    engine = open_engine(tmp_path / "e", **overrides)
    first = engine.record(T, make_record("r1", INTENT, ["get_weather"], code=CODE))
    assert first.new_pattern
    other = engine.record(T, make_record("r2", "latest news", ["get_news"], code=OTHER))
    assert other.pattern_id != first.pattern_id  # today: two tools, two patterns
    today = _plant_old_build(engine, first.pattern_id)
    assert engine._state.repo.patterns.pattern_id_for_hash(T, today) is None
    engine.close()

    engine = open_engine(tmp_path / "e", **overrides)
    try:
        assert _rekeyed(engine) == [first.pattern_id]  # the other pattern was already today's
        view = engine.get_pattern(T, first.pattern_id)
        assert view.code_hash == today
        assert view.template == OLD_TEMPLATE.replace("$NAME", '"get_weather"')
        assert [p.name for p in view.params] == ["$CITY"]
        assert [s.tool for s in view.steps] == ["get_weather"]
        repo = engine._state.repo
        assert repo.patterns.pattern_id_for_hash(T, OLD_HASH) is None
        counters = repo.patterns.counters(T, first.pattern_id)
        assert counters is not None
        assert "$NAME" not in counters.recent_values
        again = engine.record(T, make_record("r3", INTENT, ["get_weather"], code=CODE))
        assert (again.pattern_id, again.new_pattern) == (first.pattern_id, False)
        found = engine.suggest(T, SuggestQuery(intent=INTENT))
        assert found.suggestions[0].pattern.id == first.pattern_id
    finally:
        engine.close()

    engine = open_engine(tmp_path / "e", **overrides)  # the marker: nothing runs again
    try:
        assert engine._state.repo.meta.tool_names_read()
        assert _rekeyed(engine) == [first.pattern_id]
    finally:
        engine.close()
