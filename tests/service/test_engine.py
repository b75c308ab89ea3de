"""The engine as a whole: reopening, exact counters under concurrency, tenants, suggest,
deletion, retention, model checks and the derived indexes."""

from __future__ import annotations

import dataclasses
import logging
import resource
import threading
from pathlib import Path

import pytest

from pml_server.config import EngineConfig
from pml_server.domain.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import (
    CaptureOutcome,
    ExecutionRecord,
    PageRequest,
    RetentionAction,
    SuggestQuery,
)
from pml_server.retention import RetentionConfig
from pml_server.service import Engine
from pml_server.storage.seam import StoreClosedError
from tests.support import Clock, eventually, files_holding, make_record, open_engine

JSON_TOOLS = ["read_file", "parse_json"]


def populate(engine: Engine) -> None:
    engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    engine.record("t", make_record("r2", "Parse JSON from disk", JSON_TOOLS, code="p()"))
    engine.record("t", make_record("r3", "Send an email", ["gmail_send"]))
    engine.record("t", make_record("r4", "Send an email", ["gmail_send"], failed={"gmail_send"}))
    engine.record("t", make_record("r5", "Delete a branch", ["git_branch"], failed={"git_branch"}))
    engine.record("u", make_record("r1", "Read JSON file", JSON_TOOLS))


def snapshot_state(engine: Engine) -> tuple[object, ...]:
    page = PageRequest(page_size=100)
    return (
        engine.list_patterns("t", page),
        engine.list_capabilities("t", page),
        engine.list_failures("t", page),
        engine.stats("t"),
        engine.stats("u"),
        engine.suggest("t", SuggestQuery("read a json file", k=5, min_match=0.0, min_success=0.0)),
    )


@pytest.mark.parametrize("durability", ["sync", "fast"])
def test_reopening_gives_identical_state(tmp_path: Path, durability: str) -> None:
    clock = Clock()
    engine = open_engine(tmp_path, clock, durability=durability)
    populate(engine)
    before = snapshot_state(engine)
    engine.close()
    reopened = open_engine(tmp_path, clock, durability=durability)
    assert snapshot_state(reopened) == before
    assert reopened.record("t", make_record("r1", "Read JSON file", JSON_TOOLS)).replayed
    reopened.close()


def test_index_is_restored_from_snapshot_plus_op_log(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    populate(engine)
    engine.admin.snapshot_indexes()  # snapshot now, then change the store without another one
    gone = engine.record("t", make_record("r9", "Archive old logs", ["tar"]))
    engine.delete_pattern("t", gone.pattern_id)
    engine.record("t", make_record("r10", "Resize images", ["image_resize"]))
    before = snapshot_state(engine)
    engine._state.store.close()  # a crash: no closing snapshot
    reopened = open_engine(tmp_path)
    assert snapshot_state(reopened) == before
    hits = reopened.suggest("t", SuggestQuery("Archive old logs", min_match=0.0, min_success=0.0))
    assert gone.pattern_id not in {s.pattern.id for s in hits.suggestions}
    reopened.close()


def test_a_rebuilt_lexical_index_answers_as_the_live_one(tmp_path: Path) -> None:
    """At open the lexical documents come by pattern id (random) and are renumbered in capture
    order; the live index numbered them as they came. Both answer every search alike."""
    engine = open_engine(tmp_path)
    words = ["read", "json", "file", "send", "mail", "resize", "image", "archive", "logs"]
    for i in range(60):
        intent = " ".join(words[(i * k) % len(words)] for k in (1, 2, 5)) + f" job{i % 7}"
        tools = [f"tool_{i % 5}", f"step_{i % 3}"]
        engine.record("t", make_record(f"r{i}", intent, tools, code=f"c{i}()"))
    queries = ["read json file", "send mail job3", "resize image logs", "tool_2 step_1", "job5"]

    def hits(opened: Engine) -> list[list[tuple[str, float]]]:
        index = opened._state.indexes.for_tenant("t")
        return [index.lexical_hits(q, 40) for q in queries]

    live = hits(engine)
    engine.close()
    reopened = open_engine(tmp_path)
    assert hits(reopened) == live
    assert all(live)  # every query finds documents
    reopened.close()


@pytest.fixture
def snapshot_writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tenants whose vector index snapshot is written, in order, during the test."""
    from pml_server.storage.repo import MetaRows

    written: list[str] = []
    original = MetaRows.put_snapshot

    def put_snapshot(self: MetaRows, tenant: str, seq: int, data: bytes) -> object:
        written.append(tenant)
        return original(self, tenant, seq, data)

    monkeypatch.setattr(MetaRows, "put_snapshot", put_snapshot)
    return written


def test_only_changed_indexes_are_snapshotted_again(
    tmp_path: Path, snapshot_writes: list[str]
) -> None:
    written = snapshot_writes
    engine = open_engine(tmp_path)
    populate(engine)
    engine.admin.snapshot_indexes()
    assert sorted(written) == ["t", "u"]
    written.clear()
    engine.admin.snapshot_indexes()  # nothing changed: nothing written
    engine.record("u", make_record("r1", "Read JSON file", JSON_TOOLS))  # a replay adds nothing
    engine.admin.snapshot_indexes()
    assert written == []
    saved = engine.record("t", make_record("r7", "Compress the logs", ["gzip"]))
    engine.admin.snapshot_indexes()
    assert written == ["t"]
    engine.delete_pattern("t", saved.pattern_id)
    engine.admin.snapshot_indexes()
    assert written == ["t", "t"]
    before = snapshot_state(engine)
    engine.close()
    written.clear()
    # restored from snapshots that hold every change: opening and closing write none again
    reopened = open_engine(tmp_path)
    assert snapshot_state(reopened) == before
    reopened.close()
    assert written == []


def test_a_restored_index_with_replayed_changes_is_snapshotted_at_open(
    tmp_path: Path, snapshot_writes: list[str]
) -> None:
    written = snapshot_writes
    engine = open_engine(tmp_path)
    populate(engine)
    engine.record("v", make_record("r9", "Archive old logs", ["tar"]))
    engine.admin.snapshot_indexes()
    # after the snapshot, "t" loses a vector it holds and "u" gains one; "v" gains one and
    # loses it again, so its stored snapshot is still exact
    in_snapshot = engine.record("t", make_record("r3", "Send an email", ["gmail_send"]))
    engine.delete_pattern("t", in_snapshot.pattern_id)
    engine.record("u", make_record("r8", "Resize images", ["image_resize"]))
    transient = engine.record("v", make_record("r10", "Resize images", ["image_resize"]))
    engine.delete_pattern("v", transient.pattern_id)
    before = snapshot_state(engine)
    engine._state.store.close()  # a crash: no closing snapshot
    written.clear()
    reopened = open_engine(tmp_path)
    assert sorted(written) == ["t", "u"]
    assert snapshot_state(reopened) == before
    reopened.close()


def hammer(engine: Engine, threads_n: int, per_thread: int) -> None:
    """`threads_n` threads each capturing the same pattern `per_thread` times."""
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(per_thread):
                engine.record("t", make_record(f"{n}-{i}", "Read JSON file", JSON_TOOLS))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def assert_counted(engine: Engine, total: int) -> None:
    [pattern] = engine.list_patterns("t", PageRequest()).items
    assert (pattern.usage_count, pattern.success_count) == (total, total)
    assert pattern.intents[0].hit_count == total
    assert engine.stats("t").executions == total


@pytest.mark.slow
def test_8_threads_x_20k_captures_of_one_pattern_count_exactly(tmp_path: Path) -> None:
    # `fast` durability: this checks the locking, not the disk (with `sync` every capture
    # waits for an fsync, at most 8 captures share one, and this disk takes 5 to 10 ms a sync).
    engine = open_engine(tmp_path, durability="fast")
    hammer(engine, 8, 20_000)
    assert_counted(engine, 160_000)
    engine.close()
    reopened = open_engine(tmp_path, durability="fast")
    assert_counted(reopened, 160_000)
    reopened.close()


def test_group_committed_captures_count_exactly(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, durability="sync")
    hammer(engine, 8, 150)
    assert_counted(engine, 1200)
    engine.close()
    reopened = open_engine(tmp_path, durability="sync")
    assert_counted(reopened, 1200)
    reopened.close()


def test_tenants_never_see_each_other(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    mine = engine.record("alice", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert engine.list_patterns("bob", PageRequest()).items == ()
    assert engine.suggest("bob", SuggestQuery("Read JSON file")).suggestions == ()
    with pytest.raises(NotFoundError):
        engine.get_pattern("bob", mine.pattern_id)
    with pytest.raises(NotFoundError):
        engine.delete_capability("bob", mine.capability_id)
    # a tenant whose name is a prefix of another's
    engine.record("ali", make_record("r1", "Read JSON file", JSON_TOOLS))
    assert len(engine.list_patterns("alice", PageRequest()).items) == 1
    engine.close()


def test_suggest_finds_the_capability_and_validates(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    populate(engine)
    result = engine.suggest("t", SuggestQuery("read json file", k=3))
    assert result.suggestions[0].pattern.tools_used == tuple(JSON_TOOLS)
    capability_ids = [s.capability_id for s in result.suggestions]
    assert len(capability_ids) == len(set(capability_ids))  # one entry per capability
    for query, field in [
        (SuggestQuery(""), "intent"),
        (SuggestQuery("x", k=0), "k"),
        (SuggestQuery("x", min_success=2.0), "min_success"),
        (SuggestQuery("x", intent_embedding=(1.0,)), "intent_embedding"),
    ]:
        with pytest.raises(InvalidArgumentError) as caught:
            engine.suggest("t", query)
        assert caught.value.violations[0].field == field
    engine.close()


def test_deleted_pattern_never_resurfaces_until_captured_afresh(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    saved = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    engine.delete_pattern("t", saved.pattern_id)
    query = SuggestQuery("Read JSON file", min_match=0.0, min_success=0.0)
    assert engine.suggest("t", query).suggestions == ()
    with pytest.raises(NotFoundError):
        engine.get_pattern("t", saved.pattern_id)
    with pytest.raises(NotFoundError):
        engine.get_capability("t", saved.capability_id)
    assert engine.stats("t").patterns == 0
    assert engine.admin.audit_log("t")[-1]["action"] == "deleted"
    engine.close()
    reopened = open_engine(tmp_path)
    assert reopened.suggest("t", query).suggestions == ()
    again = reopened.record("t", make_record("r2", "Read JSON file", JSON_TOOLS))
    assert again.new_pattern
    assert again.pattern_id != saved.pattern_id
    assert reopened.get_pattern("t", again.pattern_id).usage_count == 1
    reopened.close()


def test_delete_capability_removes_all_its_patterns(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    a = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS, code="a()"))
    b = engine.record("t", make_record("r2", "Read JSON files", JSON_TOOLS, code="b()"))
    assert a.capability_id == b.capability_id
    engine.delete_capability("t", a.capability_id)
    assert engine.list_patterns("t", PageRequest()).items == ()
    assert engine.stats("t").capabilities == 0
    engine.close()


def test_retention_flags_low_success_and_applies_only_when_asked(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    saved = engine.record("t", make_record("r0", "Flaky upload", ["upload"]))
    for i in range(11):
        engine.record("t", make_record(f"f{i}", "Flaky upload", ["upload"], failed={"upload"}))
    report = engine.run_retention("t", apply=False)
    assert report.dry_run
    assert [(e.pattern_id, e.action) for e in report.entries] == [
        (saved.pattern_id, RetentionAction.REMOVAL_CANDIDATE)
    ]
    assert not engine.get_pattern("t", saved.pattern_id).flagged_for_removal
    engine.run_retention("t", apply=True)
    assert engine.get_pattern("t", saved.pattern_id).flagged_for_removal
    assert engine.admin.audit_log("t")[-1]["flagged"] is True
    engine.close()


def test_retention_auto_remove_deletes(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, retention=RetentionConfig(auto_remove=True))
    saved = engine.record("t", make_record("r0", "Flaky upload", ["upload"]))
    for i in range(11):
        engine.record("t", make_record(f"f{i}", "Flaky upload", ["upload"], failed={"upload"}))
    report = engine.run_retention("t", apply=True)
    assert report.entries[0].action is RetentionAction.REMOVED
    with pytest.raises(NotFoundError):
        engine.get_pattern("t", saved.pattern_id)
    engine.close()


@pytest.mark.model
def test_store_of_another_model_is_refused(tmp_path: Path) -> None:
    open_engine(tmp_path, embedder="hashing").close()
    config = EngineConfig(data_dir=tmp_path, embedder="minilm", vector_index="exact")
    with pytest.raises(FailedPreconditionError, match="hashing"):
        Engine.open(config, Clock())
    open_engine(tmp_path, embedder="hashing").close()  # the refusal left the store usable


def test_not_ready_until_the_index_is_loaded(tmp_path: Path) -> None:
    from pml_server.domain.errors import UnavailableError
    from pml_server.embedding import make_embedder
    from pml_server.storage import Store

    config = EngineConfig(data_dir=tmp_path, embedder="hashing")
    store = Store(tmp_path, "fast")
    engine = Engine(config, store, make_embedder("hashing"), Clock())
    assert not engine.is_ready()
    with pytest.raises(UnavailableError):
        engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
    with pytest.raises(UnavailableError):
        engine.suggest("t", SuggestQuery("Read JSON file"))
    engine.start()
    assert engine.admin.wait_ready(30)
    assert engine.is_ready()
    assert engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS)).new_pattern
    engine.close()


def test_a_page_of_large_patterns_reads_a_bounded_amount_of_code(tmp_path: Path) -> None:
    """Each listed pattern's steps are read from its code: a page of 1000 asked over patterns of
    250 KB of code each ends once an answer's bytes of code are read, and the pages still hold
    every pattern once."""
    engine = open_engine(tmp_path)
    size = 250 * 1024
    for i in range(20):
        code = f"// {'x' * size}\nconst r = await mcp.tool{i}({{n: {i}}});\n"
        engine.record("t", make_record(f"r{i}", f"task {i}", [f"tool{i}"], code=code))
    seen, cursor, pages = [], "", 0
    while True:
        page = engine.list_patterns("t", PageRequest(page_size=1000, cursor=cursor))
        pages += 1
        codes = sum(len(p.original_code) for p in page.items[1:])
        assert codes <= LIMITS.answer.bound
        assert all(p.steps and p.steps[0].tool.startswith("tool") for p in page.items)
        seen += [p.id for p in page.items]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == 20
    assert pages > 1


def test_listings_page_through_everything_once(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    tasks = ["Read JSON", "Send mail", "Resize image", "Query users", "Fetch page"]
    for i, intent in enumerate(tasks):
        engine.record("t", make_record(f"r{i}", intent, [f"tool{i}"], code=f"c{i}()"))
    seen, cursor = [], ""
    while True:
        page = engine.list_patterns("t", PageRequest(page_size=2, cursor=cursor))
        seen += [p.id for p in page.items]
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    assert len(seen) == len(set(seen)) == 5
    capabilities = engine.list_capabilities("t", PageRequest(page_size=3))
    rest = engine.list_capabilities("t", PageRequest(page_size=3, cursor=capabilities.next_cursor))
    assert len(capabilities.items) + len(rest.items) == 5
    with pytest.raises(InvalidArgumentError, match="page_size"):
        engine.list_patterns("t", PageRequest(page_size=0))
    engine.close()


def test_superseded_pattern_is_marked_and_cleared(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    good = engine.record("t", make_record("g0", "Read JSON file", JSON_TOOLS, code="good()"))
    weak = engine.record("t", make_record("w0", "Read JSON files", JSON_TOOLS, code="weak()"))
    assert good.capability_id == weak.capability_id
    for i in range(20):
        engine.record("t", make_record(f"g{i + 1}", "Read JSON file", JSON_TOOLS, code="good()"))
    for i in range(6):
        failed = {"parse_json"} if i % 2 else None
        record = make_record(
            f"w{i + 1}", "Read JSON files", JSON_TOOLS, code="weak()", failed=failed
        )
        engine.record("t", record)
    report = engine.run_retention("t", apply=True)
    superseded = [e for e in report.entries if e.action is RetentionAction.SUPERSEDED]
    assert [(e.pattern_id, e.superseded_by) for e in superseded] == [
        (weak.pattern_id, good.pattern_id)
    ]
    assert engine.get_pattern("t", weak.pattern_id).superseded_by == good.pattern_id
    assert engine.get_capability("t", good.capability_id).best_pattern_id == good.pattern_id
    engine.delete_pattern("t", good.pattern_id)
    engine.run_retention("t", apply=True)  # nothing beats it any more: the mark goes
    assert engine.get_pattern("t", weak.pattern_id).superseded_by == ""
    actions = [entry["action"] for entry in engine.admin.audit_log("t")]
    assert actions == ["marked", "deleted", "marked"]
    engine.close()


def test_background_retention_applies_on_its_interval(tmp_path: Path) -> None:
    retention = RetentionConfig(interval_seconds=0.05)
    engine = open_engine(tmp_path, retention=retention, retention_in_background=True)
    saved = engine.record("t", make_record("r0", "Flaky upload", ["upload"]))
    for i in range(11):
        engine.record("t", make_record(f"f{i}", "Flaky upload", ["upload"], failed={"upload"}))
    for _ in range(200):
        if engine.get_pattern("t", saved.pattern_id).flagged_for_removal:
            break
        threading.Event().wait(0.05)
    assert engine.get_pattern("t", saved.pattern_id).flagged_for_removal
    engine.close()


def _capture_until_refused(engine: Engine) -> None:
    padding = "x" * 3000
    for i in range(2000):
        code = f"await mcp.tool_{i}({{note: '{padding}'}})"
        engine.record("t", make_record(f"r{i}", f"task {i} {padding}", ["t"], code=code))


def test_background_retention_that_fails_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store stops taking writes (a full disk; here this process's file size limit fails
    the WAL append), then request ids pass their TTL: each background run fails writing the
    pruning. Before: the loop swallowed the error, nothing logged, retention silently off."""
    clock = Clock()
    retention = RetentionConfig(interval_seconds=0.05)
    engine = open_engine(
        tmp_path, clock, retention=retention, retention_in_background=True, request_id_ttl_days=1
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, hard))
    try:
        with pytest.raises(UnavailableError):
            _capture_until_refused(engine)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    clock.advance_days(2)  # every request id is stale: the next run deletes them, or tries to
    with caplog.at_level(logging.ERROR, logger="pml_server.service._jobs"):
        assert eventually(lambda: "retention of tenant 't' failed" in caplog.text), caplog.text
    assert "store refused writes after an I/O error" in caplog.text
    engine.close()


def test_background_snapshots_that_fail_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store stops taking writes (as above) while its index holds captures no snapshot
    has: each background snapshot fails writing. Before: swallowed, nothing logged."""
    engine = open_engine(tmp_path, Clock(), snapshot_interval_seconds=0.05)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024 * 1024, hard))
    try:
        with pytest.raises(UnavailableError):
            _capture_until_refused(engine)
        with caplog.at_level(logging.ERROR, logger="pml_server.service._jobs"):
            assert eventually(lambda: "writing the index snapshots failed" in caplog.text)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    engine.close()


def test_suggest_accepts_a_client_vector(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    populate(engine)
    vector = tuple(float(x) for x in engine._state.embedder.embed(["Read JSON file"])[0])
    query = SuggestQuery("something else entirely", intent_embedding=vector, min_match=0.0)
    result = engine.suggest("t", query)
    assert result.suggestions[0].pattern.tools_used == tuple(JSON_TOOLS)
    assert result.suggestions[0].score.semantic == pytest.approx(1.0, abs=1e-4)
    engine.close()


def test_grouping_with_many_capabilities_of_one_signature_uses_the_index(tmp_path: Path) -> None:
    from pml_server.service import _grouping as engine_module

    engine = open_engine(tmp_path)
    topics = [
        "Download unpaid invoices",
        "Check weather forecast",
        "Find dinner recipes",
        "Latest football scores",
        "Random poetry",
        "Tax deadlines",
        "Gardening tips",
    ]
    for i, topic in enumerate(topics):
        engine.record("t", make_record(f"r{i}", topic, ["http_get"], code=f"c{i}()"))
    assert engine.stats("t").capabilities == len(topics)
    original = engine_module.MAX_GROUP_CANDIDATES
    engine_module.MAX_GROUP_CANDIDATES = 2  # force the vector index path
    try:
        joined = engine.record("t", make_record("x", "weather forecast", ["http_get"], code="x()"))
        alone = engine.record("t", make_record("y", "weather forecast", ["ftp_get"], code="y()"))
    finally:
        engine_module.MAX_GROUP_CANDIDATES = original
    weather = engine.get_pattern("t", joined.pattern_id).capability_id
    members = engine.get_capability("t", weather).intents
    assert set(members) == {"Check weather forecast", "weather forecast"}
    assert len(engine.get_capability("t", weather).pattern_ids) == 2
    assert alone.capability_id != weather
    engine.close()


def test_grouping_is_a_link_that_can_be_undone(tmp_path: Path) -> None:
    engine = open_engine(tmp_path)
    a = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS, code="a()"))
    b = engine.record("t", make_record("r2", "Read JSON files", JSON_TOOLS, code="b()"))
    assert a.capability_id == b.capability_id
    moved_to = engine.admin.ungroup_pattern("t", b.pattern_id)
    assert moved_to != a.capability_id
    assert engine.get_capability("t", a.capability_id).pattern_ids == (a.pattern_id,)
    assert engine.get_capability("t", moved_to).pattern_ids == (b.pattern_id,)
    assert engine.get_pattern("t", b.pattern_id).capability_id == moved_to
    assert engine.get_pattern("t", b.pattern_id).usage_count == 1  # nothing lost
    assert engine.admin.ungroup_pattern("t", b.pattern_id) == moved_to  # already alone
    assert engine.stats("t").capabilities == 2
    assert engine.admin.audit_log("t")[-1]["action"] == "ungrouped"
    engine.close()


@pytest.mark.model
def test_minilm_suggest_finds_a_paraphrase(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, embedder="minilm")
    json_cap = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS)).capability_id
    engine.record("t", make_record("r2", "Send an email to my boss", ["gmail_send"]))
    engine.record("t", make_record("r3", "Resize vacation photos", ["image_resize"]))
    result = engine.suggest("t", SuggestQuery("Load JSON data from disk", k=3))
    assert result.suggestions[0].capability_id == json_cap
    assert result.suggestions[0].score.semantic > 0.6
    engine.close()


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.005, 0.02])
def test_a_deletion_racing_close_is_done_and_its_bytes_leave_the_disk_by_the_next_open(
    tmp_path: Path, delay: float
) -> None:
    """A close while a DeletePattern erased its rows' bytes (a server stopping): closing the
    store's families under the running compaction failed ("Already borrowed"), leaving the
    store open and locked; an erase begun after the close answered UNAVAILABLE for a deletion
    already committed (a retry: NOT_FOUND). The close now waits for an erase begun; one cut
    short is answered done, and the next open erases what it left. UNAVAILABLE is left for a
    close before the deletion committed."""
    data = tmp_path / "data"
    secret = "qzv_deleted_path_racing_close"
    engine = open_engine(data)
    doomed = engine.record(
        "t", make_record("r0", "Read JSON file", ["fs.read"], path=f"{secret}.json")
    ).pattern_id
    for i in range(1, 40):
        engine.record("t", make_record(f"r{i}", f"Send mail {i}", [f"mail.send{i}"]))
    engine.close()  # the pattern's rows in a table file, where only a compaction erases them
    engine = open_engine(data)
    failed: list[BaseException] = []

    def delete() -> None:
        try:
            engine.delete_pattern("t", doomed)
        except BaseException as err:
            failed.append(err)

    deleting = threading.Thread(target=delete)
    deleting.start()
    threading.Event().wait(delay)
    engine.close()
    deleting.join()
    reopened = open_engine(data)  # the close released the store
    try:
        if failed:  # closed before the deletion committed: UNAVAILABLE, and nothing deleted
            assert [type(err) for err in failed] == [StoreClosedError]
            assert reopened.get_pattern("t", doomed).id == doomed
            return
        with pytest.raises(NotFoundError):
            reopened.get_pattern("t", doomed)
    finally:
        reopened.close()  # after its open's erase (the loader thread is joined)
    assert files_holding(data, secret) == []


def test_a_deletion_erased_before_close_leaves_no_erase_for_the_next_open(tmp_path: Path) -> None:
    """The erase-pending row a deletion commits goes once its rows are erased: an open that
    found it would rewrite the whole store again."""
    engine = open_engine(tmp_path / "data")
    saved = engine.record("t", make_record("r0", "Read JSON file", ["fs.read"]))
    engine.delete_pattern("t", saved.pattern_id)
    engine.close()
    engine = open_engine(tmp_path / "data")
    try:
        assert engine._state.repo.meta.erases_pending() == []
    finally:
        engine.close()


def _failing(
    request_id: str, path: str, error: str, tools: list[str] = JSON_TOOLS
) -> ExecutionRecord:
    """A failed run of `tools` on `path` whose last tool answered `error`."""
    record = make_record(request_id, "Read JSON file", tools, path=path, failed={tools[-1]})
    calls = tuple(c if c.ok else dataclasses.replace(c, error=error) for c in record.tool_calls)
    return dataclasses.replace(record, tool_calls=calls)


def test_a_users_deletion_erases_the_tool_errors_its_runs_stored_answers_hold(
    tmp_path: Path,
) -> None:
    """docs/storage.md, Data left on disk: the stored idempotency answers of a deleted
    pattern's failed runs, and of its code's rejected first try, held their tool errors until
    they expired (a week by default). The deletion rewrites them: no file of the data
    directory holds the errors once it answers; a resent id is still answered `replayed`
    (without pattern nor tool errors), and refused for another execution."""
    data = tmp_path / "data"
    engine = open_engine(data)
    try:
        code = "a.json"
        rejected = engine.record("t", _failing("r0", code, "qzv_first_try_error"))
        assert rejected.outcome is CaptureOutcome.REJECTED
        saved = engine.record("t", make_record("r1", "Read JSON file", JSON_TOOLS))
        failed = engine.record("t", _failing("r2", code, "qzv_failed_run_error"))
        assert failed.pattern_id == saved.pattern_id
        assert failed.tool_failures
        other = engine.record("t", _failing("r3", "b.json", "qzv_other_error", ["send_mail"]))
        engine.close()  # the answers in a table file, where only a compaction erases them
        engine = open_engine(data)
        engine.delete_pattern("t", saved.pattern_id)
        assert files_holding(data, "qzv_failed_run_error") == []
        assert files_holding(data, "qzv_first_try_error") == []
        for request_id, execution in [
            ("r0", _failing("r0", code, "qzv_first_try_error")),
            ("r2", _failing("r2", code, "qzv_failed_run_error")),
        ]:
            again = engine.record("t", execution)
            assert (again.replayed, again.pattern_id, again.tool_failures) == (True, "", ())
            with pytest.raises(AlreadyExistsError, match="request_id"):
                engine.record("t", make_record(request_id, "Send mail", ["mail.send"]))
        kept = engine.record("t", _failing("r3", "b.json", "qzv_other_error", ["send_mail"]))
        assert kept.replayed
        assert kept.tool_failures == other.tool_failures
    finally:
        engine.close()
