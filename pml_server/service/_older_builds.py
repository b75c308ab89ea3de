"""What an older build left in a store, brought to today's once per store (docs/storage.md,
Migrations), each pattern rewritten under its lock, then a meta row marking the store done (a
close or failure before the end writes no marker; the next open resumes, and every rewrite is
idempotent). Two passes over what its normalizer left, each rewrite audited:
- `rekey_tool_names`, before the server is ready: the builds of normalizer version 1 keyed
  every pattern by a hash today's normalizer never gives (docs/normalization.md, Versioning
  and vectors); an older build read the tool named in an
  argument (`session.call_tool("get_weather", ...)`, `client.callTool({name: ...})`) as a
  parameter, so such code hashed alike for two tools (docs/normalization.md, Tool calls), and
  an f-string without a field (`f"a.json"`) and a password given to a command's short flag
  (`mysql -pSECRET`, `sshpass -p SECRET`) as code. A
  pattern whose stored (redacted) code now gives another template moves to today's hash, so
  the next run of its code finds it.
- `rename_placeholders`, while serving: an older build named a placeholder after a credential
  in an object key (docs/normalization.md, Placeholder names). A pattern whose template,
  parameters or schema differ from what today's normalizer derives is rewritten.
Both derive the template, parameters, schema and counters' value names again with
`capture.placeholders.renamed`, and end, on a store that held any pattern, by rewriting the
store's files (`erase_overwritten`), so that an older build's secret does not stay on disk.
And one over its counters, not audited (what a pattern shows does not change):
- `summarize_intents`, while serving: an older build's counters lack the intent count and
  shown intents (domain/shown_intents.py), so every view of such a pattern read all its
  intents until its next capture. Their summary is written from the pattern's intents, read
  `WHOLE_PATTERN_READ` at a time; the counters are scanned a page at a time.
And one over the patterns' steps, not audited (they are what a view reads from the code):
- `read_steps_again`, while serving, once per `STEPS_RULES`: a pattern stored without steps or
  under other rules had them read from its code at every first view after a start
  (docs/normalization.md, Steps). They are stored again, each under the pattern's lock (the
  one a capture takes); the patterns are scanned a page at a time."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import replace

from pml_server.capture.normalize import NormalizedCode
from pml_server.capture.placeholders import renamed
from pml_server.capture.redact import redacted_name
from pml_server.capture.rules import REDACTED, merged_counters
from pml_server.capture.schema import without_values_of
from pml_server.capture.steps import STEPS_RULES, stored_steps, stored_under_today
from pml_server.domain import json_form, shown_intents
from pml_server.domain.errors import InvalidArgumentError
from pml_server.domain.records import IntentRecord, PatternCounters, PatternRecord
from pml_server.service._idempotency import moved_answers
from pml_server.service._state import EngineState
from pml_server.service._writes import (
    Change,
    audit,
    await_durable,
    commit,
    compact_index,
    oplog,
)
from pml_server.storage.keys import CF_COUNTERS, CF_PATTERNS, CF_SESSIONS, split_tenant
from pml_server.storage.repo import tools_digest
from pml_server.storage.seam import Op

_PAGE = 1_000
# What stands for a redacted credential in a stored code, quoted or inside a string or a
# template: a stored code without it is the code as run.
_REDACTED = REDACTED.strip('"')


def rekey_tool_names(state: EngineState, stop: threading.Event) -> int:
    """Move every pattern whose stored code today's normalizer hashes otherwise (an older
    normalizer version, or a rule read since: a tool named in an argument...) to today's
    hash; returns how many moved."""
    if state.repo.meta.tool_names_read():
        return 0
    read = moved = 0
    failures = _FailureKeys(state)
    for tenant, found in _every_pattern(state, stop):
        read += 1
        moved += _rekey_one(state, tenant, found, failures)
    if not stop.is_set():
        _erase_older_bytes(state, read)
        state.store.write([state.repo.meta.put_tool_names_read()])
    return moved


class _FailureKeys:
    """The failure log's entry keys a rekey or merge moves (`Change.failures_moved`), from one
    read of a tenant's log on its first move in a pass (`LogRows.keys_by_owner`), not one per
    pattern moved: a pattern's failed runs (by its id) and its code's rejected first tries (by
    the hash the older build gave it). Only the current tenant's are held (the pass reads the
    patterns in key order, a tenant's together). An entry logged after the read names
    today's hash (a capture finds no pattern under the older one), so none is missed; each
    key is read again under the tenant lock before it is rewritten (`_writes._move_failures`)."""

    def __init__(self, state: EngineState) -> None:
        self._logs = state.repo.logs
        self._tenant: str | None = None
        self._keys: tuple[dict[str, list[bytes]], dict[str, list[bytes]]] = ({}, {})

    def of(self, tenant: str, pattern: PatternRecord) -> list[bytes]:
        if tenant != self._tenant:
            self._keys = self._logs.keys_by_owner(tenant)
            self._tenant = tenant
        by_pattern, by_hash = self._keys
        return [*by_pattern.pop(pattern.id, ()), *by_hash.pop(pattern.code_hash, ())]


def rename_placeholders(state: EngineState, stop: threading.Event) -> int:
    """Rewrite every pattern whose placeholder names are stale; returns how many."""
    if state.repo.meta.placeholders_renamed():
        return 0
    read = rewritten = 0
    for tenant, found in _every_pattern(state, stop):
        read += 1
        rewritten += _rename_one(state, tenant, found)
    if not stop.is_set():
        _erase_older_bytes(state, read)
        state.store.write([state.repo.meta.put_placeholders_renamed()])
    return rewritten


def _erase_older_bytes(state: EngineState, patterns_read: int) -> None:
    """A pass that may have rewritten an older build's secret ends by rewriting the store's
    files, so that the secret's old bytes do not stay on disk (docs/storage.md, Migrations).
    Whenever the pass read a pattern, not only when this run rewrote one: a run stopped between
    its rewrites and its marker rewrites nothing the next time, but the bytes are still there."""
    if patterns_read:
        state.store.erase_overwritten()


def summarize_intents(state: EngineState, stop: threading.Event) -> int:
    """Write the shown intents' summary into every pattern's counters lacking it; returns
    how many."""
    if state.repo.meta.intents_summarized():
        return 0
    written = sum(
        _summarize_one(state, tenant, pattern_id)
        for tenant, pattern_id in _unsummarized(state, stop)
    )
    if not stop.is_set():
        state.store.write([state.repo.meta.put_intents_summarized()])
    return written


def read_steps_again(state: EngineState, stop: threading.Event) -> int:
    """Store again the steps of every pattern stored without them or under other
    `STEPS_RULES`; returns how many."""
    if state.repo.meta.steps_read(STEPS_RULES):
        return 0
    rewritten = sum(
        _read_steps_of(state, tenant, found) for tenant, found in _every_pattern(state, stop)
    )
    if not stop.is_set():
        state.store.write([state.repo.meta.put_steps_read(STEPS_RULES)])
    return rewritten


def _read_steps_of(state: EngineState, tenant: str, found: PatternRecord) -> int:
    if stored_under_today(found.steps_json):
        return 0
    steps = stored_steps(found.original_code, found.language)  # outside the lock: a parse
    if not steps:
        return 0  # the stored code no longer normalizes (a smaller limit): left as it is
    repo = state.repo
    with state.locks.pattern.lock_for(tenant, found.code_hash):
        pattern = repo.patterns.pattern(tenant, found.id)
        if pattern is None or pattern.code_hash != found.code_hash:
            return 0  # deleted or moved meanwhile
        if stored_under_today(pattern.steps_json):
            return 0
        if (pattern.original_code, pattern.language) != (found.original_code, found.language):
            steps = stored_steps(pattern.original_code, pattern.language)  # rewritten meanwhile
        record = replace(pattern, steps_json=steps)
        change = Change()
        change.put_pattern(repo.patterns.put_pattern(tenant, record), record)
        await_durable(commit(state, tenant, change))
    return 1


def _unsummarized(state: EngineState, stop: threading.Event) -> Iterator[tuple[str, str]]:
    """(tenant, pattern id) of every stored counters row without the summary, until `stop`
    is set."""
    for key, raw in _every_row(state, CF_COUNTERS, stop):
        if shown_intents.shown_ids(PatternCounters.from_json(raw)) is None:
            tenant, pattern_id = split_tenant(key)
            yield tenant, pattern_id.decode()


def _summarize_one(state: EngineState, tenant: str, pattern_id: str) -> int:
    repo = state.repo
    while True:
        found = repo.patterns.pattern(tenant, pattern_id)
        if found is None:
            return 0  # deleted meanwhile
        with state.locks.pattern.lock_for(tenant, found.code_hash):
            pattern = repo.patterns.pattern(tenant, pattern_id)
            if pattern is not None and pattern.code_hash != found.code_hash:
                continue  # moved to another hash meanwhile: its lock is another
            counters = repo.patterns.counters(tenant, pattern_id)
            if pattern is None or counters is None or shown_intents.shown_ids(counters) is not None:
                return 0  # deleted, or captured meanwhile (the capture summarized it)
            every = repo.intents.views_of_pattern(tenant, pattern_id)
            summarized = shown_intents.summarized(counters, every)
            change = Change()
            op = repo.patterns.put_counters(tenant, pattern_id, summarized)
            change.put_counters(op, pattern_id, summarized)
            await_durable(commit(state, tenant, change))
            return 1


def _every_pattern(
    state: EngineState, stop: threading.Event
) -> Iterator[tuple[str, PatternRecord]]:
    """Every stored pattern of every tenant, until `stop` is set."""
    for key, raw in _every_row(state, CF_PATTERNS, stop):
        yield split_tenant(key)[0], PatternRecord.from_json(raw)


def _every_row(
    state: EngineState, family: str, stop: threading.Event
) -> Iterator[tuple[bytes, bytes]]:
    """Every row of a key-value family, every tenant's, a page at a time, until `stop` is
    set."""
    start: bytes | None = None
    while True:
        rows = state.store.scan(family, b"", start=start, limit=_PAGE)
        for row in rows:
            if stop.is_set():
                return
            yield row
        if len(rows) < _PAGE:
            return
        start = rows[-1][0] + b"\x00"


def _normalized_again(state: EngineState, found: PatternRecord) -> NormalizedCode | None:
    try:
        return state.rules.normalizer(found.original_code, found.language)
    except InvalidArgumentError:
        return None  # the stored code no longer normalizes (a smaller limit): left as it is


def _rekey_one(
    state: EngineState, tenant: str, found: PatternRecord, failures: _FailureKeys
) -> int:
    # Every pattern is normalized again, whatever its code holds: the builds of normalizer
    # version 1 (before 2026-12-01) keyed every code by a hash today's never gives
    # (docs/normalization.md, Versioning and vectors), not only the code of a rule read since.
    normalized = _normalized_again(state, found)
    if normalized is None or normalized.code_hash == found.code_hash:
        return 0
    # A stored code with nothing redacted is the code as run: today's hash of it is what its
    # runs hash to now, so a hash that differs moves it even when the template does not (an
    # older build's rename pass wrote today's template under the former hash). A redacted
    # code's hash may differ from its runs' (a credential read as code is a literal now): it
    # moves only when today's rules give another template.
    if normalized.template == found.template and _REDACTED in found.original_code:
        return 0
    repo = state.repo
    with state.locks.pattern.lock_for(tenant, found.code_hash):
        pattern = repo.patterns.pattern(tenant, found.id)
        if pattern is None or pattern.code_hash != found.code_hash:
            return 0
        holder = repo.patterns.pattern_id_for_hash(tenant, normalized.code_hash)
        if holder is not None:  # the pattern runs find now: this one merges into it
            return _merge_into(state, tenant, pattern, holder, normalized, failures)
        counters = repo.patterns.counters(tenant, pattern.id)
        record, new_counters = renamed(pattern, counters, normalized) or (pattern, None)
        record = replace(record, code_hash=normalized.code_hash)
        keys = [
            repo.patterns.delete_hash(tenant, found.code_hash),
            repo.patterns.put_hash(tenant, record.code_hash, record.id),
        ]
        entry = {"action": "rekeyed", "code_hash": record.code_hash}
        # its failure log entries follow it, a rejected first try's by its hash
        moved = (failures.of(tenant, pattern), pattern, record)
        entry = {**entry, "former": found.code_hash}
        _rewrite(state, tenant, record, new_counters, keys, entry, failures_moved=moved)
    return 1


def _merge_into(
    state: EngineState,
    tenant: str,
    duplicate: PatternRecord,
    survivor_id: str,
    normalized: NormalizedCode,
    failures: _FailureKeys,
) -> int:
    """Merge `duplicate` (its lock held) into the pattern holding today's hash of its code
    (docs/storage.md, Migrations): counters summed (`rules.merged_counters`), its intents
    moved (new ids; one of the same text adds its hits to the survivor's), and its
    capability left (deleted when it was the last member), the stored answers and failure log
    entries naming it (or, a rejected first try, its hash) name the survivor; then it goes,
    audited (`merged`). Returns 1 when merged."""
    repo = state.repo
    with contextlib.ExitStack() as held:
        held.enter_context(state.locks.pattern.lock_for(tenant, normalized.code_hash))
        survivor = repo.patterns.pattern(tenant, survivor_id)
        kept = repo.patterns.counters(tenant, survivor_id)
        if survivor is None or kept is None or survivor.code_hash != normalized.code_hash:
            return 0
        counters = repo.patterns.counters(tenant, duplicate.id) or PatternCounters()
        renamed_now = renamed(duplicate, counters, normalized)
        if renamed_now is not None and renamed_now[1] is not None:
            counters = renamed_now[1]  # its values under today's placeholder names
        change = Change()
        theirs = {i.text: i for i in repo.intents.of_pattern(tenant, survivor_id)}
        added: list[IntentRecord] = []
        removed: list[int] = []
        for intent in repo.intents.of_pattern(tenant, duplicate.id):
            change.ops.append(repo.intents.delete_intent(tenant, duplicate.id, intent.id))
            removed.append(intent.id)
            same = theirs.get(intent.text)
            if same is not None:
                theirs[intent.text] = replace(
                    same,
                    hit_count=same.hit_count + intent.hit_count,
                    last_seen_ms=max(same.last_seen_ms, intent.last_seen_ms),
                )
                change.ops.append(repo.intents.put_intent(tenant, theirs[intent.text]))
                change.count("intents", -1)
            else:
                moved = replace(intent, id=state.ids.intent.next(), pattern_id=survivor_id)
                change.ops.append(repo.intents.put_intent(tenant, moved))
                added.append(moved)
        merged = shown_intents.summarized(
            merged_counters(kept, counters, state.rules.limits), [*theirs.values(), *added]
        )
        change.put_counters(
            repo.patterns.put_counters(tenant, survivor_id, merged), survivor_id, merged
        )
        first_seen = min(survivor.first_seen_ms, duplicate.first_seen_ms)
        if first_seen != survivor.first_seen_ms:
            older = replace(survivor, first_seen_ms=first_seen)
            change.put_pattern(repo.patterns.put_pattern(tenant, older), older)
        change.ops += [
            repo.patterns.delete_pattern(tenant, duplicate.id),
            repo.patterns.delete_counters(tenant, duplicate.id),
            repo.patterns.delete_hash(tenant, duplicate.code_hash),
        ]
        change.rank_removes.append(duplicate.id)
        change.count("patterns", -1)
        gone = _leave_capability(state, tenant, duplicate, change, held)
        if gone is not None and gone != survivor.capability_id:
            _repoint_plans(state, tenant, gone, survivor.capability_id, change, held)
        change.ops += moved_answers(
            state, tenant, duplicate.id, survivor_id, survivor.capability_id
        )
        change.failures_moved = (failures.of(tenant, duplicate), duplicate, survivor)
        if removed:
            change.ops.append(oplog(state, tenant, "remove", removed))
            change.index_removes = removed
        if added:
            change.ops.append(oplog(state, tenant, "add", [i.id for i in added]))
            change.index_adds = [(i, survivor.tools_used) for i in added]
        entry = {"action": "merged", "pattern_id": duplicate.id, "into": survivor_id}
        audit(state, tenant, change, {**entry, "former": duplicate.code_hash})
        ticket = commit(state, tenant, change)
    if removed:
        compact_index(state, tenant)
    await_durable(ticket)
    return 1


def _leave_capability(
    state: EngineState,
    tenant: str,
    pattern: PatternRecord,
    change: Change,
    held: contextlib.ExitStack,
) -> str | None:
    """`pattern` leaves its capability, which goes when it was its last member (its id is
    returned then); its group lock is entered on `held` (until the caller's change has
    committed)."""
    repo = state.repo
    capability = repo.capabilities.capability(tenant, pattern.capability_id)
    if capability is None:
        return None
    held.enter_context(state.locks.group.lock_for(tenant, tools_digest(capability.tools)))
    capability = repo.capabilities.capability(tenant, pattern.capability_id)
    if capability is None:
        return None
    members = tuple(p for p in capability.pattern_ids if p != pattern.id)
    if members:
        change.ops += repo.capabilities.put_capability(
            tenant, replace(capability, pattern_ids=members)
        )
        return None
    change.ops += repo.capabilities.delete_capability(tenant, capability)
    change.count("capabilities", -1)
    return capability.id


def _repoint_plans(
    state: EngineState,
    tenant: str,
    gone: str,
    to: str,
    change: Change,
    held: contextlib.ExitStack,
) -> None:
    """The sessions' last steps and the transitions naming capability `gone` name `to`
    instead (a transition's count added to one `to` already has), under their locks, entered
    on `held` in the capture's order (sessions, then transitions). Reads the tenant's
    sessions and transitions once (a merge is a one-time pass of an upgrade)."""
    sessions = state.repo.sessions
    for key, _, raw in sessions.session_rows(tenant):
        step = json_form.loads(raw)
        if step.get("capability") == gone:
            held.enter_context(state.locks.session.lock_for(tenant, key.hex()))
            change.ops.append((CF_SESSIONS, key, json_form.dumps({**step, "capability": to})))
    moved: dict[tuple[str, str], tuple[int, int]] = {}
    for previous, following, count, ms in sessions.transitions_naming(tenant, gone):
        held.enter_context(state.locks.transition.lock_for(tenant, previous, following))
        change.ops.append(sessions.delete_transition(tenant, previous, following))
        pair = (to if previous == gone else previous, to if following == gone else following)
        had = moved.get(pair, (0, 0))
        moved[pair] = (had[0] + count, max(had[1], ms))
    for pair, (count, ms) in moved.items():  # a pair names `to`: none is one of those deleted
        held.enter_context(state.locks.transition.lock_for(tenant, *pair))
        kept = sessions.transition(tenant, *pair)
        if kept is not None:
            count, ms = count + kept[0], max(ms, kept[1])
        change.ops.append(sessions.put_transition(tenant, *pair, count, ms))


def _rename_one(state: EngineState, tenant: str, found: PatternRecord) -> int:
    normalized = _normalized_again(state, found)
    if normalized is None or _today(found, None, normalized) is None:
        return 0
    repo = state.repo
    with state.locks.pattern.lock_for(tenant, found.code_hash):
        pattern = repo.patterns.pattern(tenant, found.id)
        if pattern is None:
            return 0
        counters = repo.patterns.counters(tenant, pattern.id)
        now = _today(pattern, counters, normalized)
        if now is None:
            return 0
        record, new_counters = now
        _rewrite(state, tenant, record, new_counters, [], {"action": "placeholders_renamed"})
    return 1


def _today(
    pattern: PatternRecord, counters: PatternCounters | None, normalized: NormalizedCode
) -> tuple[PatternRecord, PatternCounters | None] | None:
    """`pattern` and `counters` as today's normalizer writes them, None when nothing differs:
    the placeholder names (`renamed`), the stored code redacted by today's rules (a URL query's
    `access_token=` value was kept before), the tools the code calls without a URL's
    credentials (docs/normalization.md, Tool calls), and no value kept of a parameter now
    secret."""
    now = renamed(pattern, counters, normalized)
    code = normalized.redacted_code or pattern.original_code
    tools = tuple(redacted_name(tool) for tool in pattern.code_tools)
    if now is None and code == pattern.original_code and tools == pattern.code_tools:
        return None
    record, new_counters = now or (pattern, counters)
    record = replace(record, original_code=code, code_tools=tools)
    if new_counters is not None:
        new_counters = without_values_of(new_counters, {p.name for p in record.params if p.secret})
    return record, new_counters


def _rewrite(
    state: EngineState,
    tenant: str,
    record: PatternRecord,
    counters: PatternCounters | None,
    ops: list[Op],
    entry: dict[str, str],
    failures_moved: tuple[list[bytes], PatternRecord, PatternRecord] | None = None,
) -> None:
    """Write `record` (and `counters`, when given) with `ops`, audited, and wait until durable;
    the caller holds the pattern's lock."""
    repo = state.repo
    record = replace(record, steps_json=stored_steps(record.original_code, record.language))
    change = Change(failures_moved=failures_moved)
    change.put_pattern(repo.patterns.put_pattern(tenant, record), record)
    if counters is not None:
        change.put_counters(
            repo.patterns.put_counters(tenant, record.id, counters), record.id, counters
        )
    change.ops += ops
    audit(state, tenant, change, {**entry, "pattern_id": record.id})
    await_durable(commit(state, tenant, change))
