"""The views Suggest keeps between calls (`service._views`) are never stale: after every kind of
write (a capture counting a run, a failure, a new intent, tags, retention marks, ungrouping,
deletion, retention) the cached answer equals the one read from the store, on a real engine.
And the cache's own rules: a fill read before an invalidation is refused, the bytes stay
bounded."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pml_server.domain.model import (
    IntentView,
    PageRequest,
    PatternView,
    SuggestQuery,
    SuggestResult,
)
from pml_server.service import Engine, _curation
from pml_server.service._views import ViewCache, view_bytes
from testing.ranking_oracle import path as oracle
from tests.support import Clock, make_record, open_engine

QUERY = SuggestQuery("parse the csv report", k=5)


def _fresh(engine: Engine, tenant: str, query: SuggestQuery) -> SuggestResult:
    """The answer with every view read from the store now (the oracle's Python path reads the
    views itself)."""
    result = oracle.rank_suggestions(engine._state, tenant, replace(query, explain=True))
    return replace(result, filtered=())


def _cached_equals_fresh(engine: Engine, tenant: str = "t", query: SuggestQuery = QUERY) -> None:
    cached = engine.suggest(tenant, query)
    assert cached.suggestions == _fresh(engine, tenant, query).suggestions


def _views(engine: Engine) -> ViewCache:
    views = engine._state.views
    assert views is not None
    return views


def test_every_write_reaches_the_views_suggest_shows(tmp_path: Path) -> None:
    clock = Clock()
    engine = open_engine(tmp_path, clock, retention_in_background=False)
    tools = ["read_file", "parse_csv"]
    engine.record("t", make_record("a", "parse the csv report", tools))
    engine.record("t", make_record("b", "parse csv files", ["read_file", "parse_csv", "zip"]))
    engine.record("t", make_record("c", "read the csv report", ["read_file"], path="r.json"))
    engine.record("other", make_record("o", "parse the csv report", tools))

    first = engine.suggest("t", QUERY)
    assert len(first.suggestions) == 3
    views = _views(engine)
    assert len(views) >= 3  # filled by the answer
    again = engine.suggest("t", QUERY)
    assert again == first
    assert views.hits >= 3
    top = first.suggestions[0].pattern.id

    # a run counted (same code): usage, success and last used move
    clock.advance_days(1)
    engine.record("t", make_record("a2", "parse the csv report", tools))
    _cached_equals_fresh(engine)
    # a failure: counters, failure count
    engine.record("t", make_record("a3", "parse the csv report", tools, failed={"parse_csv"}))
    _cached_equals_fresh(engine)
    # a new intent of an existing pattern (same code, other words)
    engine.record("t", make_record("a4", "csv report parsing please", tools))
    after = engine.suggest("t", QUERY)
    _cached_equals_fresh(engine)
    shown = {s.pattern.id: s.pattern for s in after.suggestions}
    assert any(len(p.intents) == 2 for p in shown.values())
    # tags
    engine.record("t", make_record("a5", "parse the csv report", tools, tags=("prod",)))
    _cached_equals_fresh(engine)
    _cached_equals_fresh(engine, query=replace(QUERY, tags=("prod",)))
    # retention marks (flagged, superseded), shown with include_flagged
    others = [s.pattern.id for s in after.suggestions if s.pattern.id != top]
    _curation.set_marks(engine._state, "t", others[0], True, top)
    _cached_equals_fresh(engine)
    _cached_equals_fresh(engine, query=replace(QUERY, include_flagged=True))
    _curation.set_marks(engine._state, "t", others[0], False, "")
    _cached_equals_fresh(engine)
    # ungrouping: the capability changes
    engine.admin.ungroup_pattern("t", top)
    _cached_equals_fresh(engine)
    # retention, applied 200 days on
    clock.advance_days(200)
    engine.run_retention("t", apply=True)
    _cached_equals_fresh(engine)
    _cached_equals_fresh(engine, query=replace(QUERY, include_flagged=True))
    # deletion: the pattern is gone from the answer
    engine.delete_pattern("t", top)
    answer = engine.suggest("t", replace(QUERY, include_flagged=True))
    assert top not in {s.pattern.id for s in answer.suggestions}
    _cached_equals_fresh(engine, query=replace(QUERY, include_flagged=True))
    # the other tenant's pattern of the same code and words is its own, and unchanged
    other = engine.suggest("other", QUERY)
    assert [s.pattern.usage_count for s in other.suggestions] == [1]
    _cached_equals_fresh(engine, "other")
    engine.close()


def test_a_view_equals_get_pattern_after_each_capture(tmp_path: Path) -> None:
    """Captures one after the other, each answer's views against GetPattern's (read from the
    store), cache warm all along."""
    engine = open_engine(tmp_path, Clock(), retention_in_background=False)
    tools = ["read_file", "parse_csv"]
    for i in range(12):
        failed = {"parse_csv"} if i % 3 == 2 else None
        path = f"f{i % 2}.json"
        engine.record(
            "t", make_record(f"r{i}", f"parse csv report {i % 4}", tools, path=path, failed=failed)
        )
        for _ in range(2):  # read from the store, then from the cache
            for suggestion in engine.suggest("t", QUERY).suggestions:
                assert suggestion.pattern == engine.get_pattern("t", suggestion.pattern.id)
    assert _views(engine).hits > 0
    engine.close()


def _view(pattern_id: str, text: str = "x" * 100) -> PatternView:
    return PatternView(
        id=pattern_id,
        code_hash="h",
        template=text,
        original_code=text,
        language="javascript",
        tools_used=("a",),
        params=(),
        parameter_schema_json="{}",
        usage_count=1,
        success_count=1,
        failure_count=0,
        first_seen_ms=0,
        last_used_ms=0,
        mean_duration_ms=0.0,
        capability_id="c",
        intents=(IntentView("int_1", "words", 1, 0),),
    )


def test_a_fill_read_before_an_invalidation_is_refused() -> None:
    cache = ViewCache()
    token = cache.token()  # a reader starts reading the store
    cache.invalidate([("t", "p")])  # a writer's batch lands meanwhile
    assert not cache.fill("t", "p", _view("p"), token)
    assert cache.get("t", "p") is None
    # other patterns (and the same id of another tenant) may still be filled
    assert cache.fill("t", "q", _view("q"), token)
    assert cache.fill("u", "p", _view("p"), token)
    # read after the invalidation: kept
    assert cache.fill("t", "p", _view("p"), cache.token())
    assert cache.get("t", "p") == _view("p")
    cache.invalidate([("t", "p")])
    assert cache.get("t", "p") is None
    assert cache.get("u", "p") == _view("p")  # tenant isolation


def test_a_fill_older_than_what_the_cache_remembers_is_refused() -> None:
    cache = ViewCache()
    token = cache.token()
    cache.invalidate([("t", f"p{i}") for i in range(5000)])  # more than it remembers
    assert not cache.fill("t", "unrelated", _view("unrelated"), token)
    assert cache.fill("t", "unrelated", _view("unrelated"), cache.token())


def test_the_cache_stays_within_its_bytes() -> None:
    size = view_bytes(_view("p0"))
    cache = ViewCache(budget=10 * size, max_view=2 * size)
    for i in range(50):
        cache.fill("t", f"p{i}", _view(f"p{i}"), cache.token())
    assert len(cache) == 10
    assert cache.used_bytes <= 10 * size
    assert cache.get("t", "p49") is not None
    assert cache.get("t", "p0") is None
    assert not cache.fill("t", "big", _view("big", "y" * (3 * size)), cache.token())


def test_listing_is_not_affected(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, Clock(), retention_in_background=False)
    engine.record("t", make_record("a", "parse the csv report", ["read_file"]))
    engine.suggest("t", QUERY)
    listed = engine.list_patterns("t", PageRequest(page_size=10)).items
    assert listed[0] == engine.suggest("t", QUERY).suggestions[0].pattern
    engine.close()
