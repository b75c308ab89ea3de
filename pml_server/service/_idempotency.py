"""Idempotency: the stored answer to a capture request id, replayed when the same request comes
again (rule 6: the first answer, nothing counted twice), and forgetting answers past their TTL.
The request id's striped lock is taken first by every capture (see `service/_capture.py`).

The answer keeps a digest of the execution it answered (docs/capture.md, Idempotency): the same
request id sent again with another execution is refused (ALREADY_EXISTS), never answered
`replayed` while its record is dropped. The digest is taken over the record as stored
(redacted), so it holds nothing derived from a secret. An answer stored before digests were
kept has none and replays as before; one an older build stored over a record its redaction
left whole is replayed to that record as sent (`same_execution`)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from pml_server.domain import json_form
from pml_server.domain.errors import AlreadyExistsError
from pml_server.domain.model import CaptureOutcome, CaptureResult, ExecutionRecord, ToolFailure
from pml_server.service._state import EngineState
from pml_server.storage.keys import CF_REQUESTS
from pml_server.storage.seam import Op

# Request ids read, and forgotten in one write batch, at a time when pruning.
PRUNE_BATCH = 1000


def record_digest(record: ExecutionRecord) -> str:
    """What makes two records the same execution for a resent request id: intent, code,
    language, tool calls (tool, arguments, outcome, error), status and tags, of the record as
    stored (`capture/redact.py`). Timings, the trace and a client vector are left out: a
    retrying client may recompute them."""
    calls = [[c.tool, c.arguments_json, c.ok, c.error] for c in record.tool_calls]
    body = [record.intent, record.code, record.language, calls, record.status.value]
    body.append(sorted(record.tags))
    return hashlib.sha256(json_form.dumps(body)).hexdigest()[:32]


def encode_result(result: CaptureResult, now_ms: int, digest: str) -> bytes:
    data = {
        "time_ms": now_ms,
        "digest": digest,
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


def same_execution(stored_digest: str | None, sent: ExecutionRecord, kept: ExecutionRecord) -> bool:
    """Whether a stored answer's digest is of the execution `sent` (`kept`: it as this build
    stores it, redacted). An answer stored before digests were kept has none: it is. An older
    build whose redaction missed a secret that today's catches (docs/capture.md, Secrets)
    digested the record with that secret in it, so the record as sent is its match when
    today's redaction is the only change: the same execution sent again after an upgrade is
    replayed, not refused (docs/capture.md, Idempotency). Only compared, never stored: no
    digest this build writes derives from a secret."""
    if stored_digest is None or stored_digest == record_digest(kept):
        return True
    return stored_digest == record_digest(sent)


def replay_answer(
    state: EngineState, tenant: str, raw: bytes, sent: ExecutionRecord, kept: ExecutionRecord
) -> CaptureResult:
    """The stored first answer of a resent request id (`sent`, stored as `kept`), told
    honestly: when its pattern has since been deleted, the answer names no pattern (nor
    capability) instead of a gone one. Raises AlreadyExistsError when the id was applied to
    another execution (`same_execution`)."""
    if not same_execution(json_form.loads(raw).get("digest"), sent, kept):
        raise reused_id_error(sent.request_id)
    return _told(state, tenant, raw)


def captured_answer(state: EngineState, tenant: str, request_id: str) -> CaptureResult | None:
    """The stored first answer to `request_id` as a replay (`replay_answer`, whatever execution
    asks), or None when no capture of it is remembered (never applied, or forgotten past
    `request_id_ttl_days`). OTLP reads it for a run whose root was captured before while only
    calls that ended after the root are left to map it with (docs/capture.md, "Spans arriving
    after their run was mapped")."""
    raw = state.repo.requests.request_result(tenant, request_id)
    return None if raw is None else _told(state, tenant, raw)


def _told(state: EngineState, tenant: str, raw: bytes) -> CaptureResult:
    """A stored answer as replayed: when its pattern has since been deleted, naming no pattern
    (nor capability) instead of a gone one."""
    result = decode_result(raw)
    if result.pattern_id and state.repo.patterns.pattern(tenant, result.pattern_id) is None:
        return replace(result, pattern_id="", capability_id="", new_pattern=False)
    return result


def erased_answer(raw: bytes) -> bytes:
    """A stored answer once the user deleted the pattern it named (or whose code it
    rejected): no pattern, capability nor tool error; its time, digest and outcome stay, so
    the request id is still answered `replayed` (and refused for another execution) until it
    expires (docs/storage.md, Data left on disk)."""
    data = json_form.loads(raw)
    data.update(pattern_id="", capability_id="", new_pattern=False, tool_failures=[])
    return json_form.dumps(data)


def erase_answers(state: EngineState, tenant: str, pattern_id: str, code_hash: str) -> list[Op]:
    """The rewrites erasing the stored answers of a deleted pattern's runs and of its code's
    rejected first tries (those the failure log still names). The caller holds the pattern's
    lock: every capture of the pattern (they take it too) has stored its answer, and none can
    start."""
    requests, logs = state.repo.requests, state.repo.logs
    found = requests.answers_of(
        tenant, pattern_id, lambda: logs.rejected_request_ids(tenant, code_hash)
    )
    return [requests.rewrite_request(key, raw, erased_answer(raw)) for key, raw in found]


def moved_answers(
    state: EngineState, tenant: str, former_id: str, pattern_id: str, capability_id: str
) -> list[Op]:
    """The rewrites of the stored answers naming pattern `former_id`, merged into `pattern_id`
    (of capability `capability_id`), so that a resent request id is answered with the pattern
    that holds its run (docs/storage.md, Migrations). The caller holds both patterns' locks."""
    requests = state.repo.requests
    rewrites = []
    for key, raw in requests.answers_of(tenant, former_id, set):
        data = json_form.loads(raw)
        data.update(pattern_id=pattern_id, capability_id=capability_id)
        rewrites.append(requests.rewrite_request(key, raw, json_form.dumps(data)))
    return rewrites


def reused_id_error(request_id: str) -> AlreadyExistsError:
    return AlreadyExistsError(
        f"request_id {request_id!r} was already used for another execution (its intent, code, "
        "tool calls or outcome differ), so this one was not captured: give each execution its "
        "own request_id (on StreamTraces, an unset request_id is the execution_id)"
    )


def prune_request_ids(state: EngineState, tenant: str) -> int:
    """Forget idempotency answers older than `request_id_ttl_days`; returns how many. The
    tenant's answers are read `PRUNE_BATCH` at a time, so the memory a run takes is bounded
    whatever their number (a week of captures at the default TTL). Each is deleted only if
    still as read (`delete_unchanged`): another prune (another replica's retention) may have
    forgotten it meanwhile and a new capture under its id stored a new answer, which stays
    (docs/capture.md, Idempotency)."""
    horizon = state.clock() - int(state.config.request_id_ttl_days * 86_400_000)
    repo = state.repo
    pruned = 0
    start: bytes | None = None
    while True:
        page = repo.requests.request_rows(tenant, start=start, limit=PRUNE_BATCH)
        stale = [
            (key, raw) for key, raw in page if json_form.loads(raw).get("time_ms", 0) < horizon
        ]
        if stale:
            pruned += state.store.delete_unchanged(CF_REQUESTS, stale)
        if len(page) < PRUNE_BATCH:
            return pruned
        start = page[-1][0] + b"\x00"  # the next key after the page's last
