"""Curation: deleting patterns and capabilities, ungrouping a pattern, retention marks, and
applying the retention table. Every change is audited; each takes the pattern's lock, then its
capability's group lock (the capture lock order without the request id)."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable
from dataclasses import replace

from pml_server.domain.errors import NotFoundError
from pml_server.domain.model import RetentionAction, RetentionReport
from pml_server.domain.records import CapabilityRecord, PatternRecord
from pml_server.retention import evaluate, removal_holds, supersede_holds
from pml_server.service._arguments import check_tenant
from pml_server.service._idempotency import erase_answers, prune_request_ids
from pml_server.service._reads import views_by_capability
from pml_server.service._state import EngineState
from pml_server.service._writes import (
    Change,
    audit,
    await_durable,
    commit,
    compact_index,
    oplog,
)
from pml_server.storage.keys import CF_REQUESTS
from pml_server.storage.repo import Repository, tools_digest
from pml_server.storage.seam import StoreClosedError, WriteTicket

log = logging.getLogger(__name__)


def delete_pattern(
    state: EngineState,
    tenant: str,
    pattern_id: str,
    reason: str,
    still_wanted: Callable[[PatternRecord], bool] | None = None,
    tickets: list[WriteTicket] | None = None,
) -> bool:
    """Delete a pattern; with `still_wanted`, only if it answers True for the pattern as it is
    once its lock is held (a capture that changed it has committed by then, and no other can
    start). Returns whether it was deleted. With `tickets`, the write is not waited for: its
    ticket is added there (a retention page's, `run_retention`)."""
    return (
        _remove_pattern(state, tenant, pattern_id, reason, still_wanted, tickets=tickets)
        is not None
    )


def delete_pattern_from_disk(state: EngineState, tenant: str, pattern_id: str, reason: str) -> None:
    """A user's deletion: the pattern goes, and its rows' bytes leave the store's files before
    this returns (docs/storage.md, Data left on disk)."""
    deletion = secrets.token_hex(8).encode()
    _erase_deleted(
        state, _remove_pattern(state, tenant, pattern_id, reason, deletion=deletion), deletion
    )


def _erase_deleted(
    state: EngineState, deleted: list[tuple[str, bytes]] | None, deletion: bytes
) -> None:
    """Erase the bytes of a committed deletion's rows, then its erase-pending row. A store
    closed meanwhile (the server stopping) leaves the row: the deletion is committed and
    durable, so it is answered done, and the next open erases (docs/storage.md, Data left on
    disk); UNAVAILABLE would have a retry answered NOT_FOUND."""
    try:
        state.store.erase_overwritten(deleted)
        # Not waited for: lost, the next open only erases once more.
        state.store.submit(state.repo.meta.erased([deletion]))
    except StoreClosedError:
        log.warning("store closed during a deletion's erase: the next open erases its rows")


def erase_left_deletions(state: EngineState) -> None:
    """At open: erase the rows of deletions whose erase a close cut short (the whole store:
    their keys are not kept), then forget them."""
    left = state.repo.meta.erases_pending()
    if left:
        state.store.erase_overwritten()
        state.store.write(state.repo.meta.erased(left))
        log.info("erased the rows of %d deletions a close left on disk", len(left))


def _remove_pattern(
    state: EngineState,
    tenant: str,
    pattern_id: str,
    reason: str,
    still_wanted: Callable[[PatternRecord], bool] | None = None,
    deletion: bytes | None = None,
    tickets: list[WriteTicket] | None = None,
) -> list[tuple[str, bytes]] | None:
    """`delete_pattern`'s work; the (family, key) of every row it deleted or erased, None when
    it deleted nothing. `deletion`: a user's deletion, whose erase-pending row is committed
    with it (`_erase_deleted`), and which also erases the failure log's entries of the
    pattern's runs; retention's keeps them (docs/storage.md, Data left on disk)."""
    check_tenant(tenant)
    repo = state.repo
    with contextlib.ExitStack() as held:
        pattern = _locked_pattern(state, tenant, pattern_id, held)
        if pattern is None:
            raise NotFoundError(f"pattern {pattern_id!r} not found")
        if still_wanted is not None and not still_wanted(pattern):
            return None
        capability = repo.capabilities.capability(tenant, pattern.capability_id)
        if capability is not None:
            held.enter_context(state.locks.group.lock_for(tenant, tools_digest(capability.tools)))
            capability = repo.capabilities.capability(tenant, pattern.capability_id)
        change = pattern_removal(repo, tenant, pattern, capability)
        if deletion is not None:
            change.erase_failures_of = (pattern.id, pattern.code_hash)
            answers = erase_answers(state, tenant, pattern.id, pattern.code_hash)
            change.ops += answers
            change.erased += [(CF_REQUESTS, key) for _, key, _ in answers]
        change.ops.append(oplog(state, tenant, "remove", change.index_removes))
        entry = {"action": "deleted", "pattern_id": pattern_id, "reason": reason}
        audit(state, tenant, change, entry)
        if deletion is not None:
            change.ops.append(state.repo.meta.put_erase_pending(deletion))
        ticket = commit(state, tenant, change)
    compact_index(state, tenant)
    _settle(ticket, tickets)
    return [(cf, key) for cf, key, value in change.ops if value is None] + change.erased


def _settle(ticket: WriteTicket, tickets: list[WriteTicket] | None) -> None:
    """Wait for `ticket`, or add it to `tickets` (the caller waits for them all)."""
    if tickets is None:
        await_durable(ticket)
    else:
        tickets.append(ticket)


def _locked_pattern(
    state: EngineState, tenant: str, pattern_id: str, held: contextlib.ExitStack
) -> PatternRecord | None:
    """The pattern as it is once its lock is held (entered on `held`, until the caller's change
    has committed): a capture that changed it has committed by then, and no other can start.
    None when it was deleted meanwhile; NotFoundError when there was no such pattern."""
    found = state.repo.patterns.pattern(tenant, pattern_id)
    if found is None:
        raise NotFoundError(f"pattern {pattern_id!r} not found")
    held.enter_context(state.locks.pattern.lock_for(tenant, found.code_hash))
    return state.repo.patterns.pattern(tenant, pattern_id)


def delete_capability(state: EngineState, tenant: str, capability_id: str) -> None:
    """A user's deletion of a capability: each of its patterns, then their rows' bytes leave
    the store's files, in one rewrite (docs/storage.md, Data left on disk)."""
    check_tenant(tenant)
    capability = state.repo.capabilities.capability(tenant, capability_id)
    if capability is None:
        raise NotFoundError(f"capability {capability_id!r} not found")
    deleted: list[tuple[str, bytes]] = []
    reason = f"capability {capability_id} deleted"
    deletion = secrets.token_hex(8).encode()
    for pattern_id in capability.pattern_ids:
        with contextlib.suppress(NotFoundError):
            deleted += _remove_pattern(state, tenant, pattern_id, reason, deletion=deletion) or []
    if deleted:
        _erase_deleted(state, deleted, deletion)


def pattern_removal(
    repo: Repository,
    tenant: str,
    pattern: PatternRecord,
    capability: CapabilityRecord | None,
) -> Change:
    """What deleting one pattern writes (the caller holds the pattern's and its capability's
    locks, and logs `index_removes` for the next restore): the pattern's records and intents
    go (their vectors leave the index), the tenant's counts drop, and the capability loses
    the member, or goes too when the pattern was its last."""
    change = Change()
    # every intent goes with its pattern: all are read, a page at a time, none decoded
    # (docs/ranking.md, Retention)
    intent_ids = list(repo.intents.ids_of_pattern(tenant, pattern.id))
    change.ops += [
        repo.patterns.delete_pattern(tenant, pattern.id),
        repo.patterns.delete_hash(tenant, pattern.code_hash),
        repo.patterns.delete_counters(tenant, pattern.id),
        *(repo.intents.delete_intent(tenant, pattern.id, i) for i in intent_ids),
    ]
    change.index_removes = intent_ids
    change.rank_removes = [pattern.id]
    change.count("patterns", -1)
    change.count("intents", -len(intent_ids))
    if capability is not None:
        members = tuple(p for p in capability.pattern_ids if p != pattern.id)
        if members:
            change.ops += repo.capabilities.put_capability(
                tenant, replace(capability, pattern_ids=members)
            )
        else:
            change.ops += repo.capabilities.delete_capability(tenant, capability)
            change.count("capabilities", -1)
    return change


def ungroup_pattern(state: EngineState, tenant: str, pattern_id: str) -> str:
    """Undo a grouping: move the pattern out of its capability into a new one of its own
    (nothing is deleted). Returns the pattern's capability id afterwards."""
    check_tenant(tenant)
    repo = state.repo
    with contextlib.ExitStack() as held:
        pattern = _locked_pattern(state, tenant, pattern_id, held)
        capability = (
            repo.capabilities.capability(tenant, pattern.capability_id) if pattern else None
        )
        if pattern is None or capability is None:
            raise NotFoundError(f"pattern {pattern_id!r} not found")
        held.enter_context(state.locks.group.lock_for(tenant, tools_digest(capability.tools)))
        capability = repo.capabilities.capability(tenant, pattern.capability_id)
        if capability is None or capability.pattern_ids == (pattern_id,):
            return pattern.capability_id  # already alone
        now = state.clock()
        alone = CapabilityRecord(
            f"cap_{secrets.token_hex(8)}", capability.tools, (pattern_id,), now
        )
        rest = tuple(p for p in capability.pattern_ids if p != pattern_id)
        change = Change()
        change.ops += [
            *repo.capabilities.put_capability(tenant, replace(capability, pattern_ids=rest)),
            *repo.capabilities.put_capability(tenant, alone),
        ]
        moved = replace(pattern, capability_id=alone.id)
        change.put_pattern(repo.patterns.put_pattern(tenant, moved), moved)
        change.count("capabilities")
        entry = {"action": "ungrouped", "pattern_id": pattern_id, "from": capability.id}
        audit(state, tenant, change, {**entry, "to": alone.id})
        ticket = commit(state, tenant, change)
    await_durable(ticket)
    return alone.id


def set_marks(
    state: EngineState,
    tenant: str,
    pattern_id: str,
    flagged: bool,
    superseded_by: str,
    flag_holds: Callable[[PatternRecord], bool] | None = None,
    superseded_holds: Callable[[PatternRecord, str], bool] | None = None,
    tickets: list[WriteTicket] | None = None,
) -> bool:
    """Rewrite a pattern's retention marks; True when they changed. With `flag_holds`, a flag
    is set only if it answers True for the pattern as it is once its lock is held (as
    `delete_pattern`'s `still_wanted`); with `superseded_holds`, likewise the superseded mark
    (given the better pattern's id)."""
    repo = state.repo
    found = repo.patterns.pattern(tenant, pattern_id)
    if found is None:
        return False
    with state.locks.pattern.lock_for(tenant, found.code_hash):
        pattern = repo.patterns.pattern(tenant, pattern_id)
        if pattern is not None and flagged and flag_holds is not None:
            flagged = flag_holds(pattern)
        if pattern is not None and superseded_by and superseded_holds is not None:
            superseded_by = superseded_by if superseded_holds(pattern, superseded_by) else ""
        if pattern is None or (
            pattern.flagged_for_removal == flagged and pattern.superseded_by == superseded_by
        ):
            return False
        change = Change()
        marked = replace(pattern, flagged_for_removal=flagged, superseded_by=superseded_by)
        change.put_pattern(repo.patterns.put_pattern(tenant, marked), marked)
        entry = {"action": "marked", "pattern_id": pattern_id, "flagged": flagged}
        audit(state, tenant, change, {**entry, "superseded_by": superseded_by})
        ticket = commit(state, tenant, change)
    _settle(ticket, tickets)
    return True


def run_retention(state: EngineState, tenant: str, apply: bool) -> RetentionReport:
    """Evaluate the retention table; with `apply`, flag, mark superseded, remove (when
    auto-removal is on) and clear marks that no longer hold. Every change is audited."""
    check_tenant(tenant)
    now = state.clock()
    groups = views_by_capability(state.repo, tenant)
    entries = evaluate(groups, state.config.retention, now)
    if apply:
        flagged = {e.pattern_id for e in entries if e.action is RetentionAction.REMOVAL_CANDIDATE}
        removed = {e.pattern_id for e in entries if e.action is RetentionAction.REMOVED}
        superseded = {
            e.pattern_id: e.superseded_by for e in entries if e.action is RetentionAction.SUPERSEDED
        }
        prune_request_ids(state, tenant)
        config = state.config.retention

        def still_failing(pattern: PatternRecord) -> bool:
            # the counters now, under the pattern's lock: captures since the evaluation count
            counters = state.repo.patterns.counters(tenant, pattern.id)
            return counters is not None and removal_holds(
                counters.success, counters.failure, config
            )

        kept: set[str] = set()  # removals and flags no longer holding under the lock
        unmarked: set[str] = set()  # superseded marks no longer holding under the lock

        def flag_holds(pattern: PatternRecord) -> bool:
            # decided again as a removal is (docs/ranking.md, Retention): a flag hides the
            # pattern from Suggest until the next run
            if not still_failing(pattern):
                kept.add(pattern.id)
                return False
            return True

        def still_superseded(pattern: PatternRecord, best_id: str) -> bool:
            # decided again as a flag is (docs/ranking.md, Retention): the mark lowers the
            # pattern's score in every Suggest until the next run
            counters = state.repo.patterns.counters(tenant, pattern.id)
            best = state.repo.patterns.counters(tenant, best_id)
            if (
                counters is None
                or best is None
                or not supersede_holds(
                    (counters.success, counters.failure), (best.success, best.failure), config
                )
            ):
                unmarked.add(pattern.id)
                return False
            return True

        def apply_to(view_id: str, tickets: list[WriteTicket]) -> None:
            if view_id in removed:
                with contextlib.suppress(NotFoundError):
                    if not delete_pattern(
                        state, tenant, view_id, "retention", still_failing, tickets
                    ):
                        kept.add(view_id)
            else:
                marks = (view_id in flagged, superseded.get(view_id, ""))
                set_marks(state, tenant, view_id, *marks, flag_holds, still_superseded, tickets)

        # In pages of a capture batch's size: each pattern's change is committed under its
        # own locks, released at once, and a page's writes reach the disk together (one fsync
        # a page, not one a pattern; docs/ranking.md, Retention).
        page = state.rules.limits.fields.capture_batch.bound
        ids = [view.id for views in groups.values() for view in views]
        for at in range(0, len(ids), page):
            tickets: list[WriteTicket] = []
            try:
                with state.store.writes_held():
                    for view_id in ids[at : at + page]:
                        apply_to(view_id, tickets)
            finally:
                for ticket in tickets:
                    await_durable(ticket)
        # the report says what was done: a pattern kept is not removed nor flagged, one
        # unmarked not superseded
        undone = (RetentionAction.REMOVED, RetentionAction.REMOVAL_CANDIDATE)
        entries = [
            e
            for e in entries
            if not (e.pattern_id in kept and e.action in undone)
            and not (e.pattern_id in unmarked and e.action is RetentionAction.SUPERSEDED)
        ]
    return RetentionReport(dry_run=not apply, entries=tuple(entries), ran_at_ms=now)
