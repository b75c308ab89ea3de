"""Renaming the placeholders an older build named after a credential (docs/normalization.md,
Placeholder names), once per store: every stored pattern whose template, parameters or schema
differ from what today's normalizer derives from its stored (redacted) code is rewritten, with
its counters, under its lock; then a meta row records that the store is done."""

from __future__ import annotations

import threading

from pml_server.capture.placeholders import renamed
from pml_server.domain.errors import InvalidArgumentError
from pml_server.domain.records import PatternRecord
from pml_server.service._state import EngineState
from pml_server.service._writes import Change, audit, await_durable, commit
from pml_server.storage.keys import CF_PATTERNS, split_tenant

_PAGE = 1_000


def rename_placeholders(state: EngineState, stop: threading.Event) -> int:
    """Rewrite every stale pattern of every tenant; returns how many. Stopped early (the server
    closes), the marker is not written and the next open resumes (a rewrite is idempotent)."""
    if state.repo.meta.placeholders_renamed():
        return 0
    rewritten = 0
    start: bytes | None = None
    while True:
        rows = state.store.scan(CF_PATTERNS, b"", start=start, limit=_PAGE)
        for key, raw in rows:
            if stop.is_set():
                return rewritten
            tenant = split_tenant(key)[0]
            rewritten += _rename_one(state, tenant, PatternRecord.from_json(raw))
        if len(rows) < _PAGE:
            break
        start = rows[-1][0] + b"\x00"
    state.store.write([state.repo.meta.put_placeholders_renamed()])
    return rewritten


def _rename_one(state: EngineState, tenant: str, found: PatternRecord) -> int:
    try:
        normalized = state.rules.normalizer(found.original_code, found.language)
    except InvalidArgumentError:
        return 0  # the stored code no longer normalizes (a smaller limit): left as it is
    if renamed(found, None, normalized) is None:
        return 0
    repo = state.repo
    with state.locks.pattern.lock_for(tenant, found.code_hash):
        pattern = repo.patterns.pattern(tenant, found.id)
        if pattern is None:
            return 0
        counters = repo.patterns.counters(tenant, pattern.id)
        now = renamed(pattern, counters, normalized)
        if now is None:
            return 0
        record, new_counters = now
        change = Change()
        change.put_pattern(repo.patterns.put_pattern(tenant, record), record)
        if new_counters is not None:
            change.put_counters(
                repo.patterns.put_counters(tenant, record.id, new_counters),
                record.id,
                new_counters,
            )
        audit(state, tenant, change, {"action": "placeholders_renamed", "pattern_id": record.id})
        ticket = commit(state, tenant, change)
    await_durable(ticket)
    return 1
