"""The engine as a whole: reopening, exact counters under concurrency, tenants, suggest,
deletion, retention, model checks and the derived indexes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from pml_server.config import EngineConfig
from pml_server.domain.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError
from pml_server.domain.model import PageRequest, RetentionAction, SuggestQuery
from pml_server.engine import Engine
from pml_server.retention import RetentionConfig
from tests.engine_support import NORMALIZER, Clock, make_record, open_engine

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
    engine.snapshot_indexes()  # snapshot now, then change the store without another one
    gone = engine.record("t", make_record("r9", "Archive old logs", ["tar"]))
    engine.delete_pattern("t", gone.pattern_id)
    engine.record("t", make_record("r10", "Resize images", ["image_resize"]))
    before = snapshot_state(engine)
    engine._store.close()  # a crash: no closing snapshot
    reopened = open_engine(tmp_path)
    assert snapshot_state(reopened) == before
    hits = reopened.suggest("t", SuggestQuery("Archive old logs", min_match=0.0, min_success=0.0))
    assert gone.pattern_id not in {s.pattern.id for s in hits.suggestions}
    reopened.close()


@pytest.mark.slow
def test_concurrent_captures_of_one_pattern_count_exactly(tmp_path: Path) -> None:
    engine = open_engine(tmp_path, durability="sync")
    threads_n, per_thread = 8, 20_000
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
    [pattern] = engine.list_patterns("t", PageRequest()).items
    total = threads_n * per_thread
    assert (pattern.usage_count, pattern.success_count) == (total, total)
    assert pattern.intents[0].hit_count == total
    assert engine.stats("t").executions == total
    engine.close()
    reopened = open_engine(tmp_path)
    assert reopened.list_patterns("t", PageRequest()).items[0].usage_count == total
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
    assert engine.audit_log("t")[-1]["action"] == "deleted"
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
    assert engine.audit_log("t")[-1]["flagged"] is True
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


def test_store_of_another_model_is_refused(tmp_path: Path) -> None:
    open_engine(tmp_path, embedder="hashing").close()
    config = EngineConfig(data_dir=tmp_path, embedder="minilm", vector_index="exact")
    with pytest.raises(FailedPreconditionError, match="hashing"):
        Engine.open(config, Clock(), normalizer=NORMALIZER)
    open_engine(tmp_path, embedder="hashing").close()  # the refusal left the store usable
