"""Rule 5 (a near-duplicate intent bumps the existing mapping) as the engine decides it, from the
in-memory index's candidates, against the rule itself: the new intent's cosine to every intent
of the pattern, the closest (the oldest of equals) bumped if within the threshold. Captured one
at a time and in batches (whose index inserts come at the end of the batch), so intents not
yet in the vector index are candidates too."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pml_server.domain.model import ExecutionRecord, PageRequest
from pml_server.service import Engine
from tests.support import Clock, make_record, open_engine

TOOLS = ["read_file", "parse_json"]
# Few words, so that texts drawn from them are often near-duplicates under the hashing
# embedder (threshold 0.90) and often not.
WORDS = ["read", "json", "file", "parse", "disk", "config", "load", "settings"]

texts = st.lists(
    st.lists(st.sampled_from(WORDS), min_size=2, max_size=6).map(" ".join),
    min_size=1,
    max_size=40,
)


def _rule(engine: Engine, intents: list[str]) -> list[tuple[str, int]]:
    """The mappings rule 5 gives for `intents` captured in order: compare with all."""
    state = engine._state
    threshold = state.rules.thresholds.intent_duplicate
    kept: list[tuple[str, int]] = []
    vectors: list[np.ndarray] = []
    for text in intents:
        vector = state.embedder.embed([text])[0]
        if vectors:
            scores = np.stack(vectors) @ vector
            best = int(np.argmax(scores))
            if scores[best] >= threshold:
                kept[best] = (kept[best][0], kept[best][1] + 1)
                continue
        kept.append((text, 1))
        vectors.append(vector)
    return sorted(kept)


def _every_intent(engine: Engine, pattern_id: str) -> list[tuple[str, int]]:
    """(text, hit count) of every intent of the pattern (a listing shows 32: ListPatternIntents
    pages through them all)."""
    found: list[tuple[str, int]] = []
    cursor = ""
    while True:
        page = engine.pattern_intents("t", pattern_id, PageRequest(page_size=100, cursor=cursor))
        found += [(i.text, i.hit_count) for i in page.items]
        cursor = page.next_cursor
        if not cursor:
            return sorted(found)


def _mappings(engine: Engine) -> list[tuple[str, int]]:
    page = engine.list_patterns("t", PageRequest(page_size=10))
    assert len(page.items) == 1
    return _every_intent(engine, page.items[0].id)


def _records(intents: list[str]) -> list[ExecutionRecord]:
    return [make_record(f"r{n}", text, TOOLS) for n, text in enumerate(intents)]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(intents=texts, batch=st.integers(min_value=1, max_value=12))
def test_near_duplicates_are_decided_as_against_every_intent_of_the_pattern(
    tmp_path_factory: object, intents: list[str], batch: int
) -> None:
    root: Path = tmp_path_factory.mktemp("near")  # type: ignore[attr-defined]
    one = open_engine(root / "one", Clock())
    batched = open_engine(root / "batched", Clock())
    try:
        records = _records(intents)
        for record in records:
            one.record("t", record)
        for start in range(0, len(records), batch):
            outcomes = batched.record_many("t", records[start : start + batch])
            assert not [o for o in outcomes if isinstance(o, Exception)]
        expected = _rule(one, intents)
        assert _mappings(one) == expected
        assert _mappings(batched) == expected
    finally:
        one.close()
        batched.close()


def test_a_popular_patterns_capture_reads_only_its_near_intents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 300 distinct intents of one pattern, then a near-duplicate of one of them: the capture
    # reads the candidate the index names, not the pattern's 300 intents.
    engine = open_engine(tmp_path / "db", Clock())
    try:
        words = [f"w{n}" for n in range(40)]
        distinct = [" ".join(c) for c in itertools.islice(itertools.combinations(words, 4), 300)]
        for start in range(0, len(distinct), 50):
            engine.record_many("t", _records(distinct)[start : start + 50])
        store = engine._state.store
        read: list[int] = []
        scan, get_many = store.scan, store.get_many

        def counted_scan(*args: object, **kwargs: object) -> object:
            rows = scan(*args, **kwargs)  # type: ignore[arg-type]
            read.append(len(rows))
            return rows

        def counted_get_many(*args: object, **kwargs: object) -> object:
            rows = get_many(*args, **kwargs)  # type: ignore[arg-type]
            read.append(len(rows))
            return rows

        with monkeypatch.context() as patched:
            patched.setattr(store, "scan", counted_scan)
            patched.setattr(store, "get_many", counted_get_many)
            result = engine.record("t", make_record("again", distinct[7], TOOLS))
        assert result.pattern_id
        assert max(read) < 10  # before: one scan of all 300 intents
        hits = dict(_mappings(engine))
        assert hits[distinct[7]] == 2
        assert len(hits) == 300
    finally:
        engine.close()


def test_a_new_pattern_of_a_crowded_capability_reads_none_of_its_tied_intents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 200 patterns of one signature recorded with one request (code written anew each run):
    # their intents tie. The next one joins their capability without reading those intents.
    engine = open_engine(tmp_path / "db", Clock())
    try:

        def run(n: int) -> ExecutionRecord:
            return make_record(f"r{n}", "Read JSON file", TOOLS, code=f"f{n}()")

        for start in range(0, 200, 50):
            engine.record_many("t", [run(n) for n in range(start, start + 50)])
        store = engine._state.store
        read: list[int] = []
        get_many = store.get_many

        def counted_get_many(*args: object, **kwargs: object) -> object:
            rows = get_many(*args, **kwargs)  # type: ignore[arg-type]
            read.append(len(rows))
            return rows

        with monkeypatch.context() as patched:
            patched.setattr(store, "get_many", counted_get_many)
            result = engine.record("t", run(200))
        assert max(read, default=0) < 10  # before: the 200 tied intents, read at once
        page = engine.list_capabilities("t", PageRequest(page_size=10))
        assert [c.pattern_count for c in page.items] == [201]
        assert result.capability_id == page.items[0].id
    finally:
        engine.close()


records_of_one_signature = st.lists(
    st.tuples(
        st.lists(st.sampled_from(WORDS), min_size=2, max_size=6).map(" ".join),
        st.sampled_from(["a()", "b()", "c()", "d()", "e()", "f()"]),
    ),
    min_size=1,
    max_size=30,
)


def _capture_all(
    root: Path, records: list[ExecutionRecord], batch: int, read_all: bool
) -> list[object]:
    """Every outcome, the patterns and the capabilities of `records` captured in batches, with
    ids drawn from a fixed seed; `read_all`: the decisions read every intent (the index names
    no candidates), as before."""
    import random

    from pml_server.search import TenantSearchIndex
    from pml_server.service import _grouping, _writes

    engine = open_engine(root, Clock())
    saved_ids, saved_scores = _writes._ids, TenantSearchIndex.closest_candidates
    saved_decide = _grouping.decide_by_index
    _writes._ids = random.Random(7)  # type: ignore[assignment]
    if read_all:
        TenantSearchIndex.closest_candidates = lambda self, ids, query, t: None  # type: ignore[assignment,method-assign]
        _grouping.decide_by_index = lambda state, tenant, ids, v, t: (False, ids)  # type: ignore[assignment]
    try:
        outcomes: list[object] = []
        for start in range(0, len(records), batch):
            outcomes += engine.record_many("t", records[start : start + batch])
        page = engine.list_capabilities("t", PageRequest(page_size=100))
        capabilities = sorted((c.id, tuple(sorted(c.pattern_ids))) for c in page.items)
        return [outcomes, _mappings_by_pattern(engine), capabilities, engine.stats("t")]
    finally:
        _writes._ids = saved_ids
        TenantSearchIndex.closest_candidates = saved_scores  # type: ignore[method-assign]
        _grouping.decide_by_index = saved_decide  # type: ignore[assignment]
        engine.close()


def _mappings_by_pattern(engine: Engine) -> list[tuple[object, ...]]:
    page = engine.list_patterns("t", PageRequest(page_size=100))
    return sorted((p.id, p.capability_id, tuple(_every_intent(engine, p.id))) for p in page.items)


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=records_of_one_signature, batch=st.integers(min_value=1, max_value=8))
def test_grouping_and_near_duplicates_decide_as_when_reading_every_intent(
    tmp_path_factory: object, rows: list[tuple[str, str]], batch: int
) -> None:
    root: Path = tmp_path_factory.mktemp("groups")  # type: ignore[attr-defined]
    records = [make_record(f"r{n}", t, TOOLS, code=code) for n, (t, code) in enumerate(rows)]
    assert _capture_all(root / "new", records, batch, read_all=False) == _capture_all(
        root / "old", records, batch, read_all=True
    )
