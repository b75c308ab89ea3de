"""A capture's stored answer keeps a digest of the record as stored, that is as redacted
(docs/capture.md, Idempotency). An older build whose redaction missed a secret that today's
catches digested the record with that secret in it: after an upgrade, the same execution sent
again (a client's retry across the restart, a re-import of the same file) must still be
answered `replayed`, not refused as another execution under the same request id. Real engine,
on the embedded RocksDB store and on the shared PostgreSQL store (whose unary capture meets the
stored answer in its commit, not in a read ahead of it)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pml_server.domain.errors import AlreadyExistsError
from pml_server.domain.model import CaptureResult, PageRequest
from pml_server.service._idempotency import record_digest
from pml_server.storage.keys import CF_REQUESTS, tenant_key
from tests.support import make_record, open_engine

T = "t"
# An encryption key given by name: redacted today, kept by the builds up to 2026-12-06 (the
# dev set's 23 such records were refused after an upgrade).
CODE = 'await mcp.encrypt_data({data: "Very important data", encryption_key: "ABC123"})'


@pytest.mark.parametrize(
    "store", ["rocksdb", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_an_execution_an_older_build_answered_unredacted_is_replayed_after_an_upgrade(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    overrides: dict[str, Any] = {}
    if store == "postgresql":
        overrides["store"] = request.getfixturevalue("postgres_dsn")
    engine = open_engine(tmp_path / "db", **overrides)
    try:
        record = make_record("old-id", "Encrypt the data", ["encrypt_data"], code=CODE)
        first = engine.record(T, record)
        stored = engine.get_pattern(T, first.pattern_id)
        assert "ABC123" not in stored.original_code  # today's redaction takes the key
        # The answer as the older build stored it: its digest over the record it stored,
        # which held the key as sent.
        key = tenant_key(T, "old-id")
        raw = engine._state.store.get(CF_REQUESTS, key)
        assert raw is not None
        older = json.loads(raw)
        assert older["digest"] != record_digest(record)
        older["digest"] = record_digest(record)
        requests = engine._state.repo.requests
        engine._state.store.write([requests.rewrite_request(key, raw, json.dumps(older).encode())])

        again = engine.record(T, record)
        assert again.replayed
        assert (again.pattern_id, again.outcome) == (first.pattern_id, first.outcome)
        batch = engine.record_many(T, [record])[0]
        assert isinstance(batch, CaptureResult)
        assert batch.replayed
        # counted once
        assert engine.get_pattern(T, first.pattern_id).usage_count == 1
        assert engine.stats(T).executions == 1
        # another execution under the id is still refused, never replayed and dropped
        for other in (replace(record, intent="Decrypt the data"), replace(record, code="x()")):
            with pytest.raises(AlreadyExistsError, match="request_id 'old-id' was already used"):
                engine.record(T, other)
            assert isinstance(engine.record_many(T, [other])[0], AlreadyExistsError)
        assert len(engine.list_patterns(T, PageRequest()).items) == 1
    finally:
        engine.close()
