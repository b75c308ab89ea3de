"""GetCapability and ListCapabilities at a bounded cost (docs/api.md, Capabilities): a
capability of thousands of patterns (eager storage keeps each code variant as its own pattern)
answers its sums over every member, at most MAX_CAPABILITY_PATTERNS pattern names, its
`pattern_count`, and reads no member's intents or code beyond what the answer shows; ListPatterns
with a capability pages through every member."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from pml_server.capture.views import (
    MAX_CAPABILITY_INTENT_READS,
    MAX_CAPABILITY_INTENTS,
    MAX_CAPABILITY_PATTERNS,
)
from pml_server.domain.errors import NotFoundError
from pml_server.domain.model import PageRequest
from pml_server.service import Engine, _reads
from pml_server.storage.keys import CF_INTENTS, CF_PATTERNS
from testing.store_reads import rows_read
from tests.support import code_for, make_record, open_engine

TOOLS = ["read_file"]
MEMBERS = 3000
BATCH = 64
UP_A = "const r = await mcp.upload();\nconsole.log(r.a);"
UP_B = "const r = await mcp.upload();\nconsole.log(r.b);"


def _code(n: int) -> str:
    """A code variant of its own pattern (a property read normalizes to no placeholder)."""
    return code_for(TOOLS) + f"\nconsole.log(r0.f{n});"


def record_crowded_capability(engine: Engine, members: int = MEMBERS) -> tuple[str, str]:
    """One capability of `members` patterns, each with two intents; the last one also failed
    once. Its id and the failed pattern's."""
    records = [
        make_record(f"r{n}", f"Read file number {n}", TOOLS, code=_code(n)) for n in range(members)
    ]
    records += [
        make_record(f"s{n}", f"Open the file {n}", TOOLS, code=_code(n)) for n in range(members)
    ]
    records.append(
        make_record(
            "bad", "Read file number 0", TOOLS, code=_code(members - 1), failed={"read_file"}
        )
    )
    capabilities, failed = set(), ""
    for start in range(0, len(records), BATCH):
        for result in engine.record_many("t", records[start : start + BATCH]):
            assert not isinstance(result, Exception)
            capabilities.add(result.capability_id)
            failed = result.pattern_id
    assert len(capabilities) == 1
    return capabilities.pop(), failed


@pytest.fixture
def crowded(tmp_path: Path) -> Iterator[tuple[Engine, str, str]]:
    engine = open_engine(tmp_path)
    yield engine, *record_crowded_capability(engine)
    engine.close()


def test_a_crowded_capability_answers_a_bounded_view_with_exact_sums(
    crowded: tuple[Engine, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """3,000 patterns of 2 intents each: GetCapability read every member's record, intents and
    code (steps) and named all 3,000 patterns. It now names 100 (the best first: every pattern
    ran once and succeeded but the last, which failed once), counts 3,000, sums every member's
    counters, and reads at most the intents its 50 texts need and few pattern records."""
    engine, capability_id, failed = crowded
    read = rows_read(engine._state.repo.store, monkeypatch)
    view = engine.get_capability("t", capability_id)
    assert read.get(CF_INTENTS, 0) <= MAX_CAPABILITY_INTENTS  # 6,000 before
    assert read.get(CF_PATTERNS, 0) <= 8  # 3,000 before
    assert len(view.pattern_ids) == MAX_CAPABILITY_PATTERNS  # 3,000 before
    assert len(set(view.pattern_ids)) == MAX_CAPABILITY_PATTERNS
    assert view.pattern_count == MEMBERS
    assert view.usage_count == 2 * MEMBERS + 1
    assert view.success_count == 2 * MEMBERS
    assert view.failure_count == 1
    assert len(view.intents) == MAX_CAPABILITY_INTENTS
    assert failed not in view.pattern_ids  # it ranks last
    assert engine.get_pattern("t", view.best_pattern_id).failure_count == 0


def test_list_patterns_of_a_capability_pages_through_every_member_reading_only_the_page(
    crowded: tuple[Engine, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every member of the 3,000 once, by id, each page reading only its own patterns' rows; an
    unknown capability is NOT_FOUND."""
    engine, capability_id, _ = crowded
    read = rows_read(engine._state.repo.store, monkeypatch)
    first = engine.list_patterns("t", PageRequest(page_size=500), capability_id)
    assert len(first.items) == 500
    assert read[CF_PATTERNS] == 500
    seen = [p.id for p in first.items]
    cursor = first.next_cursor
    while cursor:
        page = engine.list_patterns("t", PageRequest(page_size=500, cursor=cursor), capability_id)
        seen += [p.id for p in page.items]
        cursor = page.next_cursor
    assert seen == sorted(seen)
    assert len(set(seen)) == MEMBERS
    assert all(p.capability_id == capability_id for p in first.items)
    with pytest.raises(NotFoundError):
        engine.list_patterns("t", PageRequest(page_size=10), "cap_unknown")


def test_a_listing_page_of_crowded_capabilities_ends_early_past_its_member_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ListCapabilities reads every member's counters of each capability on its page: a page
    stops after the capability that takes it past CAPABILITY_PAGE_MEMBERS (the first always
    kept), and the next page goes on from there (AIP-158)."""
    monkeypatch.setattr(_reads, "CAPABILITY_PAGE_MEMBERS", 60)
    engine = open_engine(tmp_path)
    try:
        crowded, _ = record_crowded_capability(engine, members=100)
        engine.record("t", make_record("other", "Send an email", ["gmail_send"]))
        engine.record("t", make_record("third", "Delete a branch", ["git_branch"]))
        seen: list[str] = []
        cursor = ""
        while True:
            page = engine.list_capabilities("t", PageRequest(page_size=10, cursor=cursor))
            seen += [c.id for c in page.items]
            # past its first capability a page read at most 60 members (all 102 on one before)
            assert sum(c.pattern_count for c in page.items[1:]) <= 60
            if not (cursor := page.next_cursor):
                break
        assert len(seen) == len(set(seen)) == 3
        assert crowded in seen
    finally:
        engine.close()


def test_a_capability_of_repeated_intents_reads_a_bounded_number_of_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every member says the same two things: the view's distinct texts never reach 50, and
    GetCapability stops after MAX_CAPABILITY_INTENT_READS intents (every member's before)."""
    engine = open_engine(tmp_path)
    try:
        records = [
            make_record(f"r{n}-{t}", text, TOOLS, code=_code(n))
            for n in range(600)
            for t, text in enumerate(("Read the file", "Open the file"))
        ]
        for start in range(0, len(records), BATCH):
            engine.record_many("t", records[start : start + BATCH])
        capability_id = engine.get_pattern(
            "t", engine.record("t", records[0]).pattern_id
        ).capability_id
        read = rows_read(engine._state.repo.store, monkeypatch)
        view = engine.get_capability("t", capability_id)
        assert sorted(view.intents) == ["Open the file", "Read the file"]
        assert view.pattern_count == 600
        assert read[CF_INTENTS] <= MAX_CAPABILITY_INTENT_READS
    finally:
        engine.close()


def test_the_best_pattern_is_the_first_by_counters_not_flagged_for_removal(
    tmp_path: Path,
) -> None:
    """A pattern flagged for removal that then succeeds often ranks first by its counters, yet
    is not the capability's best pattern while flagged; it is still named (after the best)."""
    engine = open_engine(tmp_path)
    try:
        flaky = engine.record("t", make_record("a0", "Flaky upload", ["upload"], code=UP_A))
        for i in range(11):
            failed = make_record(f"a{i + 1}", "Flaky upload", ["upload"], failed={"upload"})
            engine.record("t", replace(failed, code=UP_A))
        engine.run_retention("t", apply=True)
        assert engine.get_pattern("t", flaky.pattern_id).flagged_for_removal
        steady = engine.record("t", make_record("b0", "Flaky upload", ["upload"], code=UP_B))
        assert steady.new_pattern
        assert steady.capability_id == flaky.capability_id
        for i in range(100):
            engine.record("t", make_record(f"c{i}", "Flaky upload", ["upload"], code=UP_A))
        flagged = engine.get_pattern("t", flaky.pattern_id)
        assert flagged.flagged_for_removal
        assert (flagged.success_count + 1) / (flagged.usage_count + 2) > 2 / 3  # steady's rate
        view = engine.get_capability("t", flaky.capability_id)
        assert view.best_pattern_id == steady.pattern_id
        assert view.pattern_ids == (steady.pattern_id, flaky.pattern_id)
    finally:
        engine.close()
