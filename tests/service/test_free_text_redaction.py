"""A store written before a redaction rule existed keeps, in its free texts (intents, the
failure log, failure signatures, stored answers), what that rule finds: opening it redacts
every stored free text by today's rules once per `REDACTION_RULES` (docs/storage.md,
Migrations; docs/capture.md, Secrets), on the embedded RocksDB store and on the shared
PostgreSQL store."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from pml_server.capture.rules import error_signature
from pml_server.domain import json_form
from pml_server.domain.model import PageRequest, SuggestQuery
from pml_server.domain.records import FailureSignature, decode_intent
from pml_server.service import Engine
from pml_server.service._free_text import MARKER, free_text_redacted, redact_free_texts
from pml_server.storage.keys import CF_FAILURES, CF_INTENTS, CF_META, CF_REQUESTS
from tests.service.test_placeholder_names import _stored_rows_holding
from tests.support import files_holding, make_record, open_engine

T = "t"
SECRET = "Hunter22x"
OTHER = "Qwerty77z"
# Texts an older build stored as given: the rule for a password written in prose came later.
OLD_INTENT = f"log in, my password is {SECRET}"
OTHER_INTENT = f"log in, my password is {OTHER}"
OLD_ERROR = f"login refused: my password is {SECRET}"
REDACTED_INTENT = "log in, my password is [REDACTED]"
REDACTED_ERROR = "login refused: my password is [REDACTED]"
KEPT_INTENT = "rotate the staging api credentials"


def _capture_and_plant(engine: Engine) -> str:
    """Four runs of one pattern (three intents, one failed run), then their rows rewritten
    as the older build stored them: two intents (redacting alike) and every text of the
    failed run holding a password in prose, and no marker. Returns the pattern id."""
    records = [
        make_record("r1", "sign in to the billing portal", ["login"]),
        make_record("r2", "export the quarterly invoices as csv", ["login"], failed={"login"}),
        make_record("r3", "export the quarterly invoices as csv", ["login"]),
        make_record("r4", KEPT_INTENT, ["login"]),
    ]
    pattern_id = {engine.record(T, r).pattern_id for r in records}.pop()
    state = engine._state
    repo, store = state.repo, state.store
    intents = [decode_intent(raw) for _, raw in store.scan(CF_INTENTS, b"")]
    assert [i.text for i in intents][2] == KEPT_INTENT
    ops = [
        repo.intents.put_intent(T, replace(intents[0], text=OLD_INTENT, hit_count=3)),
        repo.intents.put_intent(T, replace(intents[1], text=OTHER_INTENT)),
    ]
    [(key, raw)] = store.scan(CF_FAILURES, b"")
    entry = {**json_form.loads(raw), "error": OLD_ERROR, "intent": OLD_INTENT}
    ops.append(repo.logs.rewrite_failure(key, entry))
    counters = repo.patterns.counters(T, pattern_id)
    assert counters is not None
    signature = FailureSignature(error_signature("login", OLD_ERROR), "login", OLD_ERROR, 1, 1)
    ops.append(
        repo.patterns.put_counters(T, pattern_id, replace(counters, failure_signatures=[signature]))
    )
    for key, raw in store.scan(CF_REQUESTS, b""):
        answer = json_form.loads(raw)
        if answer["tool_failures"]:
            answer["tool_failures"] = [["login", OLD_ERROR]]
            ops.append(repo.requests.rewrite_request(key, raw, json_form.dumps(answer)))
    ops.append((CF_META, MARKER, None))  # the older build wrote no marker
    store.write(ops)
    return pattern_id


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_an_older_builds_free_texts_are_redacted_once_at_open(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    dsn = request.getfixturevalue("postgres_dsn") if store == "postgresql" else None
    overrides = {"store": dsn} if dsn else {}
    engine = open_engine(tmp_path / "e", **overrides)
    assert engine.admin.wait_free_text_redacted(60) == 0  # a new store: nothing to redact
    pattern_id = _capture_and_plant(engine)
    assert _stored_rows_holding(engine, SECRET.upper(), dsn)  # the older build's store
    engine.close()

    engine = open_engine(tmp_path / "e", **overrides)
    try:
        # one pattern (intents and signature), one failure log entry, one stored answer
        assert engine.admin.wait_free_text_redacted(60) == 3
        for secret in (SECRET, OTHER):
            assert _stored_rows_holding(engine, secret.upper(), dsn) == []
        # the two intents that redact alike are one, their hits summed exactly
        listed = engine.pattern_intents(T, pattern_id, PageRequest(page_size=10)).items
        assert [(i.text, i.hit_count) for i in listed] == [(KEPT_INTENT, 1), (REDACTED_INTENT, 4)]
        view = engine.get_pattern(T, pattern_id)
        assert view.intent_count == 2
        assert sorted((i.text, i.hit_count) for i in view.intents) == [
            (REDACTED_INTENT, 4),
            (KEPT_INTENT, 1),
        ]
        assert engine.stats(T).intents == 2
        [failure] = engine.list_failures(T, PageRequest()).items
        assert (failure.error, failure.intent) == (REDACTED_ERROR, REDACTED_INTENT)
        counters = engine._state.repo.patterns.counters(T, pattern_id)
        assert counters is not None
        [signature] = counters.failure_signatures
        assert signature.error == REDACTED_ERROR
        assert signature.signature == error_signature("login", REDACTED_ERROR)
        replayed = engine.record(
            T,
            make_record("r2", "export the quarterly invoices as csv", ["login"], failed={"login"}),
        )
        assert replayed.replayed
        assert [f.error for f in replayed.tool_failures] == [REDACTED_ERROR]
        # the lexical index reads the redacted text: the password finds nothing
        lexical = engine._state.indexes.for_tenant(T).lexical
        assert lexical.search(SECRET.lower(), 5) == []
        assert [d for d, _ in lexical.search("password", 5)] == [pattern_id]
        found = engine.suggest(T, SuggestQuery(intent=KEPT_INTENT))
        assert [s.pattern.id for s in found.suggestions] == [pattern_id]
        audit = [e for e in engine.admin.audit_log(T) if e["action"] == "free_text_redacted"]
        assert sorted(str(sorted(e.keys() - {"action", "time_ms"})) for e in audit) == [
            "['answers']",
            "['failures']",
            "['pattern_id']",
        ]
    finally:
        engine.close()

    engine = open_engine(tmp_path / "e", **overrides)  # the marker: nothing runs again
    try:
        assert engine.admin.wait_free_text_redacted(60) == 0
        assert free_text_redacted(engine._state)
        audit = engine.admin.audit_log(T)
        assert sum(e["action"] == "free_text_redacted" for e in audit) == 3
    finally:
        engine.close()


def test_an_older_builds_free_text_secret_leaves_the_embedded_stores_files(
    tmp_path: Path,
) -> None:
    """The pass ends by rewriting the store's files: the older text's bytes leave the disk
    while serving, not only what a read returns."""
    engine = open_engine(tmp_path / "e")
    assert engine.admin.wait_free_text_redacted(60) == 0
    _capture_and_plant(engine)
    engine.close()
    assert files_holding(tmp_path / "e", SECRET)  # the older build's store, on disk

    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_free_text_redacted(60) == 3
        assert files_holding(tmp_path / "e", SECRET) == []
        assert files_holding(tmp_path / "e", OTHER) == []
    finally:
        engine.close()


def test_a_stopped_pass_writes_no_marker_and_texts_redacting_alike_merge_into_a_kept_one(
    tmp_path: Path,
) -> None:
    """A pass stopped before its end (a close) writes nothing more and no marker; the next
    run redacts everything, and a text redacted already redacts to itself (a run again
    rewrites nothing). Changed intents whose text an unchanged intent holds already merge
    into it: its id stays, the hits are summed."""
    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_free_text_redacted(60) == 0
        pattern_id = _capture_and_plant(engine)
        state = engine._state
        repo = state.repo
        *_, kept = repo.intents.of_pattern(T, pattern_id)
        state.store.write([repo.intents.put_intent(T, replace(kept, text=REDACTED_INTENT))])

        stopped = threading.Event()
        stopped.set()
        assert redact_free_texts(state, stopped) == 0
        assert not free_text_redacted(state)
        assert _stored_rows_holding(engine, SECRET.upper(), None)  # nothing written

        assert redact_free_texts(state, threading.Event()) == 3
        listed = engine.pattern_intents(T, pattern_id, PageRequest(page_size=10)).items
        assert [(i.id, i.text, i.hit_count) for i in listed] == [
            (kept.str_id, REDACTED_INTENT, 3 + 1 + 1)
        ]
        assert engine.get_pattern(T, pattern_id).intent_count == 1
        assert engine.stats(T).intents == 1
        assert _stored_rows_holding(engine, SECRET.upper(), None) == []

        state.store.write([(CF_META, MARKER, None)])
        assert redact_free_texts(state, threading.Event()) == 0  # nothing left to redact
        assert free_text_redacted(state)
    finally:
        engine.close()


def test_a_failure_signature_is_redacted_when_its_patterns_intents_are_clean(
    tmp_path: Path,
) -> None:
    engine = open_engine(tmp_path / "e")
    try:
        assert engine.admin.wait_free_text_redacted(60) == 0
        state = engine._state
        repo = state.repo
        record = make_record("r1", "export the quarterly invoices", ["login"], failed={"login"})
        engine.record(T, make_record("r0", "export the quarterly invoices", ["login"]))
        pattern_id = engine.record(T, record).pattern_id
        counters = repo.patterns.counters(T, pattern_id)
        assert counters is not None
        [signature] = counters.failure_signatures
        old = replace(signature, error=OLD_ERROR, signature=error_signature("login", OLD_ERROR))
        state.store.write(
            [
                repo.patterns.put_counters(
                    T, pattern_id, replace(counters, failure_signatures=[old])
                ),
                (CF_META, MARKER, None),
            ]
        )
        assert redact_free_texts(state, threading.Event()) == 1
        counters = repo.patterns.counters(T, pattern_id)
        assert counters is not None
        assert [s.error for s in counters.failure_signatures] == [REDACTED_ERROR]
        assert _stored_rows_holding(engine, SECRET.upper(), None) == []
    finally:
        engine.close()
