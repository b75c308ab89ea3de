"""Capture: `record` and `record_many`, the eager-learning rules applied to the store.

Lock order: a capture holds the lock of its request id (idempotency, one lock per id in use),
then a striped one for its code hash (exact read-modify-write of the pattern's counters), then,
only when it creates a pattern, one for its tool signature (capability grouping), and last (in
`_writes.commit`) a per-tenant lock for the tenant's stats and failure log. A batch takes all
its request-id locks first, in one global order (sorted by key), so two batches, or a batch and
`record`, never wait on each other in a cycle.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace

from pml_server.capture.dedup import near_duplicate
from pml_server.capture.normalize import NormalizedCode, normalize, prepare_captures
from pml_server.capture.redact import record_texts, redacted_record
from pml_server.capture.rules import (
    check_pattern_size,
    count_failed_try,
    count_success,
    redacted_values,
    run_succeeded,
    tool_failures,
    tool_signature,
    tools_disagree,
    tools_used,
    validate_record,
)
from pml_server.capture.schema import redact_turned_secret, widened
from pml_server.capture.steps import stored_steps
from pml_server.domain import shown_intents
from pml_server.domain.errors import (
    AlreadyExistsError,
    FieldViolation,
    InvalidArgumentError,
    UnavailableError,
)
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import CaptureOutcome, CaptureResult, ExecutionRecord
from pml_server.domain.records import (
    CapabilityRecord,
    IntentRecord,
    ParamSpec,
    PatternCounters,
    PatternRecord,
)
from pml_server.domain.vectors import Vector, client_vector
from pml_server.embedding import CachedEmbedder
from pml_server.service import _sessions as sessions
from pml_server.service._arguments import check_tenant
from pml_server.service._grouping import capability_for_new_pattern
from pml_server.service._idempotency import (
    encode_result,
    record_digest,
    replay_answer,
    reused_id_error,
)
from pml_server.service._near import closest_candidates, index_is_current
from pml_server.service._state import EngineState, no_words_error, usable
from pml_server.service._writes import (
    Change,
    apply_staged_adds,
    await_durable,
    commit,
    failure_entries,
    new_intent,
    oplog,
    random_id,
)
from pml_server.storage.repo import tools_digest
from pml_server.storage.seam import RequestAlreadyAppliedError, WriteTicket, finished_ticket

Outcome = CaptureResult | Exception


def record(state: EngineState, tenant: str, execution: ExecutionRecord) -> CaptureResult:
    """One capture. On the embedded store, concurrent calls of one tenant are grouped
    (`EngineState.capture_groups`): a call alone is captured at once; calls that arrive while
    the capture slots are busy become one batch (`_capture_group`), whose outcomes are those
    of consecutive calls, sharing its embedding call, index insert and durability wait. A
    shared store commits every capture as a transaction of its own (its pattern locks are the
    transaction's), so a batch would only queue those round trips behind each other: there
    every call runs at once, as many in flight as callers."""
    supplied = _checked(state, tenant, execution)
    if state.store.shared:
        result = _record_checked(state, tenant, execution, supplied)
    else:
        result = state.batching.groups.call(
            tenant,
            (execution, supplied),
            run_one=lambda item: _record_checked(state, tenant, *item),
            run_many=lambda items: _capture_group(state, tenant, items),
        )
    if execution.session_id:
        sessions.sweep_if_due(state, tenant)
    return result


def _capture_group(
    state: EngineState, tenant: str, items: Sequence[tuple[ExecutionRecord, Vector | None]]
) -> list[Outcome]:
    """`record_many` of calls `_checked` already checked (each record is checked once)."""
    state.readiness.require()  # it may have turned while they queued
    records = [execution for execution, _ in items]
    # rule 1: a failed run is a failed try whatever the client sent, as in `record_many`
    vectors = [vector if run_succeeded(e) else None for e, vector in items]
    return _record_many_checked(state, tenant, records, [None] * len(items), vectors)


def _checked(state: EngineState, tenant: str, execution: ExecutionRecord) -> Vector | None:
    """`record`'s checks, in its order (a bad record is refused before readiness is): the
    client's vector, checked, if it sent one."""
    check_tenant(tenant)
    validate_record(execution, state.rules.limits)
    supplied = (
        client_vector(execution.intent_embedding, state.embedder.dim, "intent_embedding")
        if execution.intent_embedding is not None
        else None
    )
    state.readiness.require()
    return supplied


def _record_checked(
    state: EngineState, tenant: str, execution: ExecutionRecord, supplied: Vector | None
) -> CaptureResult:
    succeeded = run_succeeded(execution)
    with state.locks.request.lock_for(tenant, execution.request_id):
        # A shared store inserts the request id's row first in the capture's commit, which
        # refuses an id applied before (by any replica: `RequestAlreadyAppliedError`, answered
        # below as here): no read ahead of it, one database round trip less per capture.
        shared = state.store.shared
        prior = None if shared else state.repo.requests.request_result(tenant, execution.request_id)
        prepared = _prepare(state, [execution])[0]  # bad code is refused before embedding
        if isinstance(prepared, Exception):
            raise prepared
        if prior is not None:  # rule 6: the first answer, counted once (the same execution)
            return replay_answer(state, tenant, prior, execution, prepared[0])
        # rule 1: a failed run is a failed try whatever the client sent (no vector)
        vector = supplied if succeeded else None
        if vector is None and succeeded:
            vector = state.embed_one(execution.intent)
        result, ticket = _capture_one_locked(state, tenant, execution, *prepared, vector)
        await_durable(ticket)
    return result


def record_many(
    state: EngineState, tenant: str, records: Sequence[ExecutionRecord]
) -> list[Outcome]:
    """Capture `records` in order with the outcomes and counters of as many consecutive
    `record` calls (a code repeated in the batch counts against the pattern the earlier
    record saved, a repeated request id answers `replayed`), but embed the intents in one
    call, index the new intents in one call and wait for durability once. Each element is
    the record's result, or the error that refused that record alone.

    Every request id of the batch stays locked until the whole batch is durable, so no
    other call answers `replayed` for a write that could still be lost."""
    check_tenant(tenant)
    if (too_many := LIMITS.capture_batch.excess(records)) is not None:
        raise InvalidArgumentError(FieldViolation("records", too_many))
    state.readiness.require()
    outcomes: list[Outcome | None] = [None] * len(records)
    vectors: list[Vector | None] = [None] * len(records)
    for i, execution in enumerate(records):
        try:
            validate_record(execution, state.rules.limits)
            if execution.intent_embedding is not None:
                vector = client_vector(
                    execution.intent_embedding, state.embedder.dim, "intent_embedding"
                )
                # rule 1: a failed run is a failed try whatever the client sent
                vectors[i] = vector if run_succeeded(execution) else None
        except InvalidArgumentError as error:
            outcomes[i] = error
    results = _record_many_checked(state, tenant, records, outcomes, vectors)
    if any(r.session_id for r in records):
        sessions.sweep_if_due(state, tenant)
    return results


def _record_many_checked(
    state: EngineState,
    tenant: str,
    records: Sequence[ExecutionRecord],
    outcomes: list[Outcome | None],
    vectors: list[Vector | None],
) -> list[Outcome]:
    """`record_many` once each record is checked: `outcomes` holds the refusals so far, and
    `vectors` the client vectors kept (a failed run's dropped, rule 1)."""
    request_keys = [(tenant, r.request_id) for i, r in enumerate(records) if outcomes[i] is None]
    with state.locks.request.hold(request_keys):
        tickets = _capture_batch_locked(state, tenant, records, outcomes, vectors)
        for i, ticket in tickets:
            try:
                await_durable(ticket)
            except UnavailableError as error:
                outcomes[i] = error
    return [o if o is not None else UnavailableError("not captured") for o in outcomes]


def _capture_batch_locked(
    state: EngineState,
    tenant: str,
    records: Sequence[ExecutionRecord],
    outcomes: list[Outcome | None],
    vectors: list[Vector | None],
) -> list[tuple[int, WriteTicket]]:
    """The body of `record_many` while its request ids are locked; fills `outcomes` and
    returns the write tickets to wait for."""
    first_of: dict[str, int] = {}  # request id -> the record of the batch that applies it
    for i, execution in enumerate(records):
        if outcomes[i] is None and execution.request_id not in first_of:
            first_of[execution.request_id] = i
    # One multi-get for every request id of the batch (it releases the GIL).
    priors = state.repo.requests.request_results(tenant, list(first_of))
    needs_text_vector = []
    # One core call normalizes and redacts every record of the batch (a resent one too: its
    # digest is taken from the record as stored).
    firsts = list(first_of.values())
    prepared_of = dict(zip(firsts, _prepare(state, [records[i] for i in firsts]), strict=True))
    for prior, i in zip(priors, firsts, strict=True):
        if prior is not None:  # applied before this batch: its first answer, as `record`
            outcomes[i] = _replayed(state, tenant, prior, records[i], prepared_of[i])
        elif vectors[i] is None and run_succeeded(records[i]):
            needs_text_vector.append(i)
    _embed_batch(state, records, needs_text_vector, vectors, outcomes)
    tickets: list[tuple[int, WriteTicket]] = []
    ticket_of: dict[int, WriteTicket] = {}
    state.batching.staged_adds.adds = []
    try:
        # The batch's captures reach the disk together (one fsync), while the vector index
        # inserts them (`apply_staged_adds` releases the GIL).
        with state.store.writes_held():
            for i, execution in enumerate(records):
                if outcomes[i] is not None:
                    continue
                first = first_of[execution.request_id]
                if first != i:  # applied by an earlier record of this batch: its answer
                    if _digest_of(records[first], prepared_of[first]) != _digest_of(
                        execution, _prepare(state, [execution])[0]
                    ):
                        outcomes[i] = reused_id_error(execution.request_id)
                        continue
                    earlier = outcomes[first]
                    outcomes[i] = (
                        replace(earlier, replayed=True)
                        if isinstance(earlier, CaptureResult)
                        else earlier
                    )
                    if first in ticket_of:  # answered once the earlier write is durable
                        tickets.append((i, ticket_of[first]))
                    continue
                prepared = prepared_of[i]
                if isinstance(prepared, Exception):  # refuses this record alone, as `record` would
                    outcomes[i] = prepared
                    continue
                try:
                    outcomes[i], ticket = _capture_one_locked(
                        state, tenant, execution, *prepared, vectors[i]
                    )
                except Exception as error:  # refuses this record alone, as `record` would
                    outcomes[i] = error
                    continue
                ticket_of[i] = ticket
                tickets.append((i, ticket))
        apply_staged_adds(state, tenant)
    finally:
        state.batching.staged_adds.adds = None
    return tickets


def embed_ahead(state: EngineState, tenant: str, records: Sequence[ExecutionRecord]) -> None:
    """Fill the embedding cache with the intents `record_many` would embed for `records`
    (successful runs without a client vector whose request id was not applied already: a
    resent stream costs the model nothing): its own embedding call then finds them, or waits
    for them if the model is still at it. A failure is left for that call to meet."""
    embedder = state.embedder
    if not isinstance(embedder, CachedEmbedder):
        return  # nowhere to keep the vectors until the capture asks: it would embed twice
    wanted = [
        r for r in records if r.intent_embedding is None and r.intent.strip() and run_succeeded(r)
    ]
    if not wanted:
        return
    with contextlib.suppress(Exception):
        check_tenant(tenant)
        applied = state.repo.requests.request_results(tenant, [r.request_id for r in wanted])
        texts = [r.intent for r, prior in zip(wanted, applied, strict=True) if prior is None]
        if texts and embedder.holds(texts):  # else evicted before the capture asks for them
            embedder.embed(texts)


def _embed_batch(
    state: EngineState,
    records: Sequence[ExecutionRecord],
    wanted: list[int],
    vectors: list[Vector | None],
    outcomes: list[Outcome | None],
) -> None:
    """Embed the intents of the `wanted` records in one embedder call; a text the model
    finds no word in is refused like `EngineState.embed_one` refuses it."""
    if not wanted:
        return
    embedded = state.embedder.embed([records[i].intent for i in wanted])
    for i, vector in zip(wanted, embedded, strict=True):
        if usable(vector):
            vectors[i] = vector
        else:
            outcomes[i] = no_words_error()


def _digest_of(
    execution: ExecutionRecord, prepared: tuple[ExecutionRecord, NormalizedCode] | Exception
) -> str:
    """The idempotency digest of `execution` as it would be stored; a record its code refused
    is digested as sent (it can only match another refused one, never a stored answer)."""
    return record_digest(prepared[0] if not isinstance(prepared, Exception) else execution)


def _replayed(
    state: EngineState,
    tenant: str,
    prior: bytes,
    execution: ExecutionRecord,
    prepared: tuple[ExecutionRecord, NormalizedCode] | Exception,
) -> Outcome:
    """The outcome of a batch record whose request id was applied before the batch."""
    if isinstance(prepared, Exception):
        return prepared
    try:
        return replay_answer(state, tenant, prior, execution, prepared[0])
    except AlreadyExistsError as error:
        return error


def _prepare(
    state: EngineState, records: Sequence[ExecutionRecord]
) -> list[tuple[ExecutionRecord, NormalizedCode] | Exception]:
    """Each record as it may be stored (rule 7b: redacted, before anything is written) with
    its code normalized, or the error that refuses it (bad code or language, a pattern too
    large), from one core call for all of them. The core's errors are already
    InvalidArgumentErrors naming the field (its arguments are the record's `code` and
    `language`). An injected normalizer (`Engine.open(normalizer=...)`) decides the pattern;
    the texts are still redacted with what the core's normalizer flagged."""
    cores = prepare_captures([(r.code, r.language, record_texts(r)) for r in records])
    out: list[tuple[ExecutionRecord, NormalizedCode] | Exception] = []
    for execution, core in zip(records, cores, strict=True):
        if isinstance(core, Exception):
            out.append(core)
            continue
        normalized, texts = core
        try:
            if state.rules.normalizer is not normalize:
                normalized = state.rules.normalizer(execution.code, execution.language)
            check_pattern_size(normalized, state.rules.limits)
        except InvalidArgumentError as error:
            out.append(error)
            continue
        out.append((redacted_record(execution, normalized, texts), normalized))
    return out


def _capture_one_locked(
    state: EngineState,
    tenant: str,
    sent: ExecutionRecord,
    execution: ExecutionRecord,
    normalized: NormalizedCode,
    vector: Vector | None,
) -> tuple[CaptureResult, WriteTicket]:
    """`record` after validation, embedding and the replay check, its request id locked;
    `execution` is `sent` redacted and its code normalized (`_prepare`)."""
    with contextlib.ExitStack() as held:
        held.enter_context(state.locks.pattern.lock_for(tenant, normalized.code_hash))
        change = Change()
        result = _capture_locked(state, tenant, execution, normalized, vector, change, held)
        # a successful run of a session: what follows what (docs/ranking.md, Sessions)
        if execution.session_id and vector is not None and result.capability_id:
            now = state.clock()
            sessions.follow(
                state, tenant, execution.session_id, result.capability_id, change, held, now
            )
        digest = record_digest(execution)
        answer = encode_result(result, state.clock(), digest)
        change.ops.append(
            state.repo.requests.put_request_result(tenant, execution.request_id, answer)
        )
        try:
            return result, commit(state, tenant, change)
        except RequestAlreadyAppliedError as applied:  # before, or by another replica meanwhile
            replayed = replay_answer(state, tenant, applied.result, sent, execution)
            return replayed, finished_ticket()


def _capture_locked(
    state: EngineState,
    tenant: str,
    execution: ExecutionRecord,
    normalized: NormalizedCode,
    vector: Vector | None,
    change: Change,
    held: contextlib.ExitStack,
) -> CaptureResult:
    now = state.clock()
    repo = state.repo
    pattern, counters = repo.patterns.pattern_for_hash(tenant, normalized.code_hash)
    failures = tool_failures(execution)
    if pattern is None or counters is None:
        if vector is None:  # rule 1: a new pattern with a failure is not saved
            change.count("rejected")
            change.failures = failure_entries(execution, normalized.code_hash, "", now)
            return CaptureResult(CaptureOutcome.REJECTED, tool_failures=failures)
        return _insert_pattern(state, tenant, execution, normalized, vector, change, held, now)
    change.count("executions")
    values = redacted_values(normalized.params)
    used = tools_used(execution)
    if vector is None:  # rule 2: a failed try of a known pattern; rule 7: its values, error
        counted = count_failed_try(counters, execution, values, now, state.rules.limits)
        change.failures = failure_entries(execution, normalized.code_hash, pattern.id, now)
        change.put_counters(
            repo.patterns.put_counters(tenant, pattern.id, counted), pattern.id, counted
        )
        return CaptureResult(
            CaptureOutcome.COUNTED,
            pattern_id=pattern.id,
            capability_id=pattern.capability_id,
            tool_failures=failures,
        )
    mismatch = tools_disagree(normalized.tool_calls, used, normalized.parse_ok)
    counted = count_success(counters, execution, values, mismatch, now, state.rules.limits)
    # the parameters and schema as every successful run showed them (docs/normalization.md,
    # Schema)
    wider = widened(pattern, normalized)
    if wider is not None:
        counted = redact_turned_secret(pattern, wider, counted)
        change.put_pattern(repo.patterns.put_pattern(tenant, wider), wider)
    if shown_intents.shown_ids(counted) is None:  # written by an older build
        counted = shown_intents.summarized(
            counted, repo.intents.views_of_pattern(tenant, pattern.id)
        )
    old = _near_duplicate_intent(state, tenant, pattern.id, vector)
    if old is not None:  # rule 5: bump the existing mapping, no new vector
        bumped = replace(old, hit_count=old.hit_count + 1, last_seen_ms=now)
        change.ops.append(repo.intents.put_intent(tenant, bumped))
        counted = shown_intents.counted(counted, bumped.id, bumped.hit_count, added=False)
    else:
        intent = new_intent(state, pattern.id, execution.intent, vector, now)
        change.ops += [
            repo.intents.put_intent(tenant, intent),
            oplog(state, tenant, "add", [intent.id]),
        ]
        change.index_adds.append((intent, pattern.tools_used))
        change.count("intents")
        counted = shown_intents.counted(counted, intent.id, intent.hit_count, added=True)
    change.put_counters(
        repo.patterns.put_counters(tenant, pattern.id, counted), pattern.id, counted
    )
    return CaptureResult(
        CaptureOutcome.COUNTED,
        pattern_id=pattern.id,
        capability_id=pattern.capability_id,
        tool_mismatch=mismatch,
    )


def _near_duplicate_intent(
    state: EngineState, tenant: str, pattern_id: str, vector: Vector
) -> IntentRecord | None:
    """Rule 5: the pattern's intent closest to `vector` (the oldest of equals) if within the
    near-duplicate threshold (`_near`: read from the few candidates, not all its intents; on
    a shared store once the tenant's index is brought up to date, unless the pattern's few
    intents came with its record: docs/capture.md, "Rule 5 on a shared store")."""
    threshold = state.rules.thresholds.intent_duplicate
    intents = state.repo.intents.of_pattern_if_few(tenant, pattern_id)
    if intents is None:
        current = index_is_current(state, tenant)
        intents = closest_candidates(state, tenant, [pattern_id], vector, threshold, current)
    found = near_duplicate([i.vector for i in intents], vector, threshold)
    return None if found is None else intents[found]


def _insert_pattern(
    state: EngineState,
    tenant: str,
    execution: ExecutionRecord,
    normalized: NormalizedCode,
    vector: Vector,
    change: Change,
    held: contextlib.ExitStack,
    now: int,
) -> CaptureResult:
    """Rule 3: a new successful pattern, usage=1 success=1, grouped into a capability."""
    repo = state.repo
    used = tools_used(execution)
    signature = tool_signature(used)
    # read once, here, so that no view reads them again from the code; before the group lock,
    # which other new patterns of the signature wait for (docs/normalization.md, Steps)
    steps = stored_steps(execution.code, normalized.language)
    # Held until the batch is submitted, so two new patterns of one signature never both
    # create a capability.
    held.enter_context(state.locks.group.lock_for(tenant, tools_digest(signature)))
    chosen = capability_for_new_pattern(state, tenant, signature, vector)
    pattern_id = random_id("pat")
    existing = repo.capabilities.capability(tenant, chosen) if chosen else None
    if existing is not None:
        capability = replace(existing, pattern_ids=(*existing.pattern_ids, pattern_id))
    else:
        capability = CapabilityRecord(random_id("cap"), signature, (pattern_id,), now)
        change.count("capabilities")
    mismatch = tools_disagree(normalized.tool_calls, used, normalized.parse_ok)
    pattern = PatternRecord(
        id=pattern_id,
        code_hash=normalized.code_hash,
        template=normalized.template,
        original_code=execution.code,
        language=normalized.language,
        tools_used=used,
        params=tuple(ParamSpec(p.name, p.json_type, p.secret) for p in normalized.params),
        parameter_schema_json=normalized.schema_json,
        capability_id=capability.id,
        first_seen_ms=now,
        code_tools=normalized.tool_calls,
        parse_ok=normalized.parse_ok,
        steps_json=steps,
    )
    values = redacted_values(normalized.params)
    counters = count_success(
        PatternCounters(), execution, values, mismatch, now, state.rules.limits
    )
    intent = new_intent(state, pattern_id, execution.intent, vector, now)
    counters = shown_intents.summarized(counters, [intent])
    change.put_pattern(repo.patterns.put_pattern(tenant, pattern), pattern)
    change.put_counters(
        repo.patterns.put_counters(tenant, pattern_id, counters), pattern_id, counters
    )
    change.ops += [
        repo.patterns.put_hash(tenant, pattern.code_hash, pattern_id),
        repo.intents.put_intent(tenant, intent),
        *repo.capabilities.put_capability(tenant, capability),
        oplog(state, tenant, "add", [intent.id]),
    ]
    change.index_adds.append((intent, used))
    for name in ("patterns", "intents", "executions"):
        change.count(name)
    return CaptureResult(
        CaptureOutcome.SAVED,
        pattern_id=pattern_id,
        capability_id=capability.id,
        new_pattern=True,
        tool_mismatch=mismatch,
    )
