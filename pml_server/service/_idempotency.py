"""Idempotency: the stored answer to a capture request id, replayed when the same request comes
again (rule 6: the first answer, nothing counted twice), and forgetting answers past their TTL.
The request id's striped lock is taken first by every capture (see `service/_capture.py`)."""

from __future__ import annotations

from dataclasses import replace

from pml_server.domain import json_form
from pml_server.domain.model import CaptureOutcome, CaptureResult, ToolFailure
from pml_server.service._state import EngineState

# Request ids forgotten per write batch when pruning.
PRUNE_BATCH = 1000


def encode_result(result: CaptureResult, now_ms: int) -> bytes:
    data = {
        "time_ms": now_ms,
        "outcome": result.outcome.value,
        "pattern_id": result.pattern_id,
        "capability_id": result.capability_id,
        "new_pattern": result.new_pattern,
        "tool_failures": [[f.tool, f.error] for f in result.tool_failures],
        "tool_mismatch": result.tool_mismatch,
    }
    return json_form.dumps(data)


def decode_result(raw: bytes) -> CaptureResult:
    data = json_form.loads(raw)
    return CaptureResult(
        outcome=CaptureOutcome(data["outcome"]),
        pattern_id=data["pattern_id"],
        capability_id=data["capability_id"],
        new_pattern=data["new_pattern"],
        tool_failures=tuple(ToolFailure(t, e) for t, e in data["tool_failures"]),
        tool_mismatch=data["tool_mismatch"],
        replayed=True,
    )


def replay_answer(state: EngineState, tenant: str, raw: bytes) -> CaptureResult:
    """The stored first answer of a resent request id, told honestly: when its pattern has
    since been deleted, the answer names no pattern (nor capability) instead of a gone one."""
    result = decode_result(raw)
    if result.pattern_id and state.repo.pattern(tenant, result.pattern_id) is None:
        return replace(result, pattern_id="", capability_id="", new_pattern=False)
    return result


def prune_request_ids(state: EngineState, tenant: str) -> int:
    """Forget idempotency answers older than `request_id_ttl_days`; returns how many."""
    horizon = state.clock() - int(state.config.request_id_ttl_days * 86_400_000)
    repo = state.repo
    stale = [
        key
        for key, raw in repo.request_rows(tenant)
        if json_form.loads(raw).get("time_ms", 0) < horizon
    ]
    for start in range(0, len(stale), PRUNE_BATCH):
        state.store.write([repo.delete_request(key) for key in stale[start : start + PRUNE_BATCH]])
    return len(stale)
