"""Counters an older build wrote lack the intent count and shown intents (domain/
shown_intents.py), so every view of such a pattern read all its intents until its next
capture: opening the store writes them once, for every pattern (docs/capture.md, The intents a
view shows), in bounded reads, on the embedded RocksDB store and on the shared PostgreSQL
store; a pass interrupted by a failure resumes at the next open."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from pml_server.config import EngineConfig
from pml_server.domain.errors import UnavailableError
from pml_server.domain.model import IntentView, PageRequest
from pml_server.domain.records import PatternCounters
from pml_server.domain.shown_intents import SHOWN_INTENTS
from pml_server.service import Engine, _older_builds
from pml_server.storage.keys import CF_COUNTERS, CF_META, tenant_key
from pml_server.storage.repo._intents import WHOLE_PATTERN_READ
from pml_server.storage.repo._meta import _INTENTS_SUMMARIZED_KEY as SUMMARIZED_KEY
from testing.store_reads import intents_read
from tests.support import Clock, code_for, make_record, open_engine

T = "t"
MANY = 300


def _word(n: int) -> str:
    """Distinct intents the hashing embedder keeps apart (no near-duplicates)."""
    return f"w{n}x{n * 7}q w{n}x{n * 7}qz w{n}x{n * 7}qy"


def _crowded(engine: Engine, tools: list[str], count: int) -> str:
    """A pattern of `count` distinct intents, later ones hit again; its id."""
    code = code_for(tools, f"{tools[0]}.json")
    saved = ""
    for n in range(count):
        record = make_record(f"{tools[0]}{n}", _word(n), tools, code=code)
        saved = engine.record(T, record).pattern_id
    for n in range(count - 1, 0, -7):
        record = make_record(f"{tools[0]}again{n}", _word(n), tools, code=code)
        engine.record(T, record)
    return saved


def _plant_older_counters(engine: Engine, pattern_ids: list[str]) -> None:
    """Rewrite the patterns' counters as an older build wrote them (no intent count, no
    shown intents), and no marker."""
    ops: list[Any] = [(CF_META, SUMMARIZED_KEY, None)]
    for pattern_id in pattern_ids:
        counters = engine._state.repo.patterns.counters(T, pattern_id)
        assert counters is not None
        assert counters.intent_count is not None
        raw = counters.to_json()
        older = raw.replace(b',"intent_count":', b',"x":').split(b',"x":')[0] + b"}"
        assert PatternCounters.from_json(older).intent_count is None
        ops.append((CF_COUNTERS, tenant_key(T, pattern_id), older))
    engine._state.store.write(ops)


def _shown_as_stored(engine: Engine, pattern_id: str) -> tuple[list[IntentView], int]:
    """(what a view must show, how many intents) from every stored intent of the pattern."""
    every = engine._state.repo.intents.of_pattern(T, pattern_id)
    every.sort(key=lambda i: (-i.hit_count, i.id))
    shown = [IntentView(i.str_id, i.text, i.hit_count, i.last_seen_ms) for i in every]
    return shown[:SHOWN_INTENTS], len(every)


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_an_older_builds_counters_are_summarized_once_at_open_and_resume_after_a_failure(
    store: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides: dict[str, Any] = {"retention_in_background": False}
    if store == "postgresql":
        overrides["store"] = request.getfixturevalue("postgres_dsn")
    engine = open_engine(tmp_path / "e", **overrides)
    assert engine.admin.wait_intents_summarized(60) == 0  # a new store: nothing to write
    crowded = [_crowded(engine, ["read_file"], MANY), _crowded(engine, ["list_dir"], 40)]
    _plant_older_counters(engine, crowded)
    engine.close()

    # A failure after the first rewrite: the pass stops, no marker is written.
    commit = _older_builds.commit
    commits = [0]

    def failing_after_one(*args: Any) -> Any:
        commits[0] += 1
        if commits[0] > 1:
            raise UnavailableError("the store went away")
        return commit(*args)

    monkeypatch.setattr(_older_builds, "commit", failing_after_one)
    engine = open_engine(tmp_path / "e", **overrides)
    try:
        with pytest.raises(UnavailableError):
            engine.admin.wait_intents_summarized(60)
        assert not engine._state.repo.meta.intents_summarized()
    finally:
        engine.close()
    monkeypatch.setattr(_older_builds, "commit", commit)

    engine = open_engine(tmp_path / "e", **overrides)  # resumes: the one left
    try:
        assert engine.admin.wait_intents_summarized(60) == 1
        assert engine._state.repo.meta.intents_summarized()
        read = intents_read(engine._state.store, monkeypatch)
        for pattern_id in crowded:
            read.clear()
            got = engine.get_pattern(T, pattern_id)
            assert sum(read) <= SHOWN_INTENTS  # every intent of the pattern before
            assert (list(got.intents), got.intent_count) == _shown_as_stored(engine, pattern_id)
        read.clear()
        listed = engine.list_patterns(T, PageRequest(page_size=10)).items
        assert sum(read) <= 2 * SHOWN_INTENTS
        assert sorted(p.intent_count for p in listed) == [40, MANY]
    finally:
        engine.close()

    engine = open_engine(tmp_path / "e", **overrides)  # the marker: nothing runs again
    try:
        assert engine.admin.wait_intents_summarized(60) == 0
        assert engine.admin.audit_log(T) == []  # what a pattern shows did not change
        # the pass reads a pattern's intents a page at a time (one read of MANY before)
        _plant_older_counters(engine, crowded)
        read = intents_read(engine._state.store, monkeypatch)
        assert _older_builds.summarize_intents(engine._state, threading.Event()) == 2
        assert sum(read) == MANY + 40
        assert max(read) <= WHOLE_PATTERN_READ
    finally:
        engine.close()


class IndexesUnreadableError(OSError):
    pass


def test_an_open_that_fails_before_its_passes_says_why_to_their_waiters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open whose index restore fails never runs the passes over an older build's rows:
    waiting for either raises what made the open fail (before: each wait ran out its timeout
    and said the pass was still running)."""
    broken = IndexesUnreadableError("the indexes could not be read")

    def fail(*_: Any, **__: Any) -> None:
        raise broken

    monkeypatch.setattr("pml_server.service._jobs.restore_indexes", fail)
    engine = Engine.open(EngineConfig(data_dir=tmp_path / "e", embedder="hashing"), Clock())
    try:
        with pytest.raises(IndexesUnreadableError):
            engine.admin.wait_ready(30)
        with pytest.raises(IndexesUnreadableError) as renaming:
            engine.admin.wait_placeholders_renamed(30)
        with pytest.raises(IndexesUnreadableError) as summarizing:
            engine.admin.wait_intents_summarized(30)
        assert renaming.value is broken
        assert summarizing.value is broken
    finally:
        engine.close()
