"""domain/shown_intents.py on a real engine over RocksDB: a pattern of many intents costs Suggest
and GetPattern the same few intent reads as one of a handful (before: every intent of the
pattern, on every call), and what they show is exact: the intents of most hits (the oldest
first among equals), at most `SHOWN_INTENTS`, and how many it has, as every stored intent
says; ListPatternIntents' pages read only their own rows. Counters an older build wrote (no
summary) are still answered right, and their pattern's next capture writes the summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from pml_server.domain.model import (
    IntentView,
    PageRequest,
    PatternView,
    RetentionAction,
    SuggestQuery,
)
from pml_server.domain.records import PatternCounters
from pml_server.domain.shown_intents import SHOWN_INTENTS
from pml_server.retention import RetentionConfig
from pml_server.service import Engine
from pml_server.storage.keys import CF_COUNTERS, CF_INTENTS, tenant_key
from pml_server.storage.repo._intents import WHOLE_PATTERN_READ
from testing.store_reads import intents_read
from tests.support import Clock, code_for, make_record, open_engine

TOOLS = ["read_file", "parse_csv"]
MANY = 300


def _word(n: int) -> str:
    """Distinct intents the hashing embedder keeps apart (no near-duplicates)."""
    return f"w{n}x{n * 7}q w{n}x{n * 7}qz w{n}x{n * 7}qy"


def _fill(engine: Engine, count: int) -> str:
    """One pattern of `count` distinct intents, some of them hit again (a few times each, in
    an order that is not their ids' order); its id."""
    saved = ""
    for n in range(count):
        saved = engine.record("t", make_record(f"r{n}", _word(n), TOOLS)).pattern_id
    for n in range(count - 1, 0, -7):  # later intents gain more hits
        for again in range(1 + n % 3):
            engine.record("t", make_record(f"again{n}-{again}", _word(n), TOOLS))
    return saved


def _every_intent(engine: Engine, pattern_id: str) -> list[IntentView]:
    """Every intent of the pattern, paged through in id order (ListPatternIntents)."""
    listed: list[IntentView] = []
    cursor = ""
    while True:
        page = engine.pattern_intents("t", pattern_id, PageRequest(page_size=40, cursor=cursor))
        listed += page.items
        cursor = page.next_cursor
        if not cursor:
            return listed


def _shown_as_stored(engine: Engine, pattern_id: str) -> tuple[list[IntentView], int]:
    """(what a view must show, how many intents) from every stored intent of the pattern."""
    every = engine._state.repo.intents.of_pattern("t", pattern_id)
    every.sort(key=lambda i: (-i.hit_count, i.id))
    shown = [IntentView(i.str_id, i.text, i.hit_count, i.last_seen_ms) for i in every]
    return shown[:SHOWN_INTENTS], len(every)


def _suggested(engine: Engine, pattern_id: str) -> PatternView:
    [suggestion] = engine.suggest("t", SuggestQuery(_word(5), k=1)).suggestions
    assert suggestion.pattern.id == pattern_id
    return suggestion.pattern


def test_suggest_and_get_pattern_read_few_intents_of_a_pattern_of_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = open_engine(tmp_path, Clock(), retention_in_background=False)
    pattern_id = _fill(engine, MANY)
    shown, count = _shown_as_stored(engine, pattern_id)
    assert count == MANY
    assert shown[0].hit_count > 1  # hits decide the order, not ids

    read = intents_read(engine._state.store, monkeypatch)
    got = engine.get_pattern("t", pattern_id)
    assert sum(read) <= SHOWN_INTENTS  # MANY before
    assert (list(got.intents), got.intent_count) == (shown, MANY)

    read.clear()
    suggested = _suggested(engine, pattern_id)
    assert sum(read) <= SHOWN_INTENTS  # MANY before
    assert suggested == got

    read.clear()
    page = engine.pattern_intents("t", pattern_id, PageRequest(page_size=10))
    assert sum(read) <= 11  # the page and whether more follow
    assert len(page.items) == 10
    listed = _every_intent(engine, pattern_id)
    assert [i.id for i in listed] == sorted({i.id for i in listed})
    assert len(listed) == MANY
    assert {i.id for i in shown} <= {i.id for i in listed}
    engine.close()


def test_the_shown_intents_follow_each_capture_exactly(tmp_path: Path) -> None:
    """Hits raised one at a time move an intent into the shown ones and others out of them,
    exactly as every stored intent says, and a pattern of few shows all of them."""
    engine = open_engine(tmp_path, Clock(), retention_in_background=False)
    pattern_id = _fill(engine, SHOWN_INTENTS + 8)
    for n in (0, 1, 0, 2, 0, 1, SHOWN_INTENTS + 7, 0):
        engine.record("t", make_record(f"more{n}-{engine.stats('t').executions}", _word(n), TOOLS))
        shown, count = _shown_as_stored(engine, pattern_id)
        got = engine.get_pattern("t", pattern_id)
        assert (list(got.intents), got.intent_count) == (shown, count)
        assert _suggested(engine, pattern_id) == got
    few = engine.record("t", make_record("few", "count the lines", ["wc"])).pattern_id
    got = engine.get_pattern("t", few)
    assert ([i.text for i in got.intents], got.intent_count) == (["count the lines"], 1)
    engine.close()


def test_counters_of_an_older_build_are_answered_and_then_summarized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counters written without the summary (an older build) are answered from every intent,
    and the pattern's next capture writes the summary: later reads are few again."""
    engine = open_engine(tmp_path, Clock(), retention_in_background=False)
    pattern_id = _fill(engine, 60)
    store = engine._state.store
    key = tenant_key("t", pattern_id)
    raw = store.get(CF_COUNTERS, key)
    assert raw is not None
    older = PatternCounters.from_json(raw)
    stripped = older.to_json().replace(b',"intent_count":', b',"x":').split(b',"x":')[0] + b"}"
    assert PatternCounters.from_json(stripped).intent_count is None
    store.write([(CF_COUNTERS, key, stripped)])
    engine._state.views.invalidate([("t", pattern_id)])  # type: ignore[union-attr]

    shown, count = _shown_as_stored(engine, pattern_id)
    got = engine.get_pattern("t", pattern_id)
    assert (list(got.intents), got.intent_count) == (shown, count) == (shown, 60)
    assert _suggested(engine, pattern_id) == got

    engine.record("t", make_record("next", _word(59), TOOLS))  # a bump
    read = intents_read(engine._state.store, monkeypatch)
    got = engine.get_pattern("t", pattern_id)
    assert sum(read) <= SHOWN_INTENTS
    assert (list(got.intents), got.intent_count) == _shown_as_stored(engine, pattern_id)
    engine.close()


def test_list_patterns_reads_few_intents_of_patterns_of_many(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ListPatterns page shows each pattern as GetPattern does (its shown intents and how
    many it has), reading only the shown intents: a page of two patterns of MANY intents read
    2 * MANY intent rows before."""
    engine = open_engine(tmp_path, Clock(), retention_in_background=False)
    crowded = {_fill(engine, MANY)}
    for n in range(MANY):
        record = make_record(f"other{n}", _word(n), ["wc"], code=code_for(["wc"], "b.txt"))
        crowded.add(engine.record("t", record).pattern_id)
    assert len(crowded) == 2

    read = intents_read(engine._state.store, monkeypatch)
    page = engine.list_patterns("t", PageRequest(page_size=10))
    assert sum(read) <= 2 * SHOWN_INTENTS  # 2 * MANY before
    read.clear()
    got = [engine.get_pattern("t", p) for p in sorted(crowded)]
    assert list(page.items) == got
    assert [p.intent_count for p in page.items] == [MANY, MANY]
    engine.close()


def test_retention_evaluates_without_intents_and_deletes_them_in_bounded_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention decides from counters alone: evaluating a tenant reads no intent (every
    intent of every pattern before). Removing a pattern of MANY intents must delete each one,
    so it reads them all, in range scans of at most `WHOLE_PATTERN_READ` rows (one scan of MANY
    before); afterwards none is stored, counted or found by Suggest."""
    config = RetentionConfig(min_tries=1, min_success_rate=1.0, auto_remove=True)
    engine = open_engine(tmp_path, Clock(), retention_in_background=False, retention=config)
    pattern_id = _fill(engine, MANY)
    failed = make_record("failed", _word(3), TOOLS, failed={TOOLS[0]})
    assert engine.record("t", failed).pattern_id == pattern_id

    read = intents_read(engine._state.store, monkeypatch)
    report = engine.run_retention("t", apply=False)
    assert [e.action for e in report.entries] == [RetentionAction.REMOVED]
    assert read == []  # [MANY] before

    report = engine.run_retention("t", apply=True)
    assert [e.pattern_id for e in report.entries] == [pattern_id]
    assert sum(read) == MANY
    assert max(read) <= WHOLE_PATTERN_READ  # [MANY] before
    assert engine._state.store.scan(CF_INTENTS, b"") == []
    assert engine.stats("t").intents == 0
    assert not engine.suggest("t", SuggestQuery(_word(5), k=1)).suggestions
    engine.close()
