"""The free texts an older build stored, redacted again by today's rules once per store and
per `REDACTION_RULES` (docs/storage.md, Migrations; docs/capture.md, Secrets), while serving.
A capture redacts a record's free texts before anything is written (`capture/redact.py`); a
text stored before a rule existed keeps what that rule finds until this pass. The texts kept:
- a pattern's intents (`CF_INTENTS`) and the errors of its counters' failure signatures
  (`CF_COUNTERS`), rewritten together under the pattern's lock, audited (`free_text_redacted`)
  (the intents read first, then the counters for signatures left to redact);
- the failure log's entries (`CF_FAILURES`: error, intent, tool), under the tenant's lock (the
  one that trims the log), each rewritten only if still as read, one audit entry per tenant and
  page;
- the stored first answers (`CF_REQUESTS`: their tool errors), each rewritten only if still as
  read (`RequestRows.rewrite_request`), one audit entry per tenant and page.
Every row is read a page at a time, and only rows whose text changes are written. A close
before the end writes no marker: the next open runs the pass again, and a text redacted
already redacts to itself. The pass ends, on a store that held any such row, by rewriting the
store's files (`_erase_older_bytes`), so the older bytes leave the disk."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from pml_server.capture.redact import REDACTION_RULES, redacted_name, redacted_texts
from pml_server.capture.rules import error_signature
from pml_server.domain import json_form, shown_intents
from pml_server.domain.records import FailureSignature, IntentRecord, PatternCounters
from pml_server.service._older_builds import _erase_older_bytes, _every_row
from pml_server.service._state import EngineState
from pml_server.service._writes import Change, audit, await_durable, commit, compact_index, oplog
from pml_server.storage.codec import decode_intent_for_view
from pml_server.storage.keys import (
    CF_COUNTERS,
    CF_FAILURES,
    CF_INTENTS,
    CF_META,
    CF_REQUESTS,
    split_tenant,
)

# Rows redacted in one core call (and, for the logs, rewritten in one batch per tenant).
_PAGE = 256
_ACTION = "free_text_redacted"
# The `meta` row marking a store whose every stored free text is redacted under the rules
# `REDACTION_RULES` names (docs/storage.md, Keys of `meta`).
MARKER = b"free_text_redacted/" + str(REDACTION_RULES).encode()


def free_text_redacted(state: EngineState) -> bool:
    """Whether every stored free text is redacted under today's `REDACTION_RULES`."""
    return state.store.get(CF_META, MARKER) is not None


def redact_free_texts(state: EngineState, stop: threading.Event) -> int:
    """Redact every stored free text by today's rules; returns how many rows were rewritten
    (patterns, failure log entries, stored answers)."""
    if free_text_redacted(state):
        return 0
    read = rewritten = 0
    for owners in _intent_pages_by_pattern(state, stop):
        read += len(owners)
        rewritten += sum(_redact_pattern(state, *owner) for owner in owners)
    for page in _pages(state, CF_COUNTERS, stop):  # a pattern's signatures its intents' left
        read += len(page)
        for key, raw in page:
            if _signatures(PatternCounters.from_json(raw)) is not None:
                tenant, pattern_id = split_tenant(key)
                rewritten += _redact_pattern(state, tenant, pattern_id.decode())
    for page in _pages(state, CF_FAILURES, stop):
        read += len(page)
        rewritten += _redact_failures(state, page)
    for page in _pages(state, CF_REQUESTS, stop):
        read += len(page)
        rewritten += _redact_answers(state, page)
    if not stop.is_set():
        _erase_older_bytes(state, read)
        state.store.write([(CF_META, MARKER, b"1")])
    return rewritten


def _pages(
    state: EngineState, family: str, stop: threading.Event
) -> Iterator[list[tuple[bytes, bytes]]]:
    """Every row of `family`, every tenant's, `_PAGE` at a time, until `stop` is set."""
    rows = _every_row(state, family, stop)
    while page := list(itertools.islice(rows, _PAGE)):
        yield page


def _intent_pages_by_pattern(
    state: EngineState, stop: threading.Event
) -> Iterator[list[tuple[str, str]]]:
    """Every stored intent, a page at a time: the (tenant, pattern id) of those whose text
    today's rules change (a pattern's intents are contiguous: one spanning pages may be named
    on several, and is read again from the store each time)."""
    for page in _pages(state, CF_INTENTS, stop):
        intents = [(split_tenant(key)[0], decode_intent_for_view(raw)) for key, raw in page]
        redacted = redacted_texts([[i.text] for _, i in intents])
        owners = {
            (tenant, intent.pattern_id): None
            for (tenant, intent), (text,) in zip(intents, redacted, strict=True)
            if text != intent.text
        }
        yield list(owners)


@dataclass
class _Plan:
    """What today's rules change in one pattern's intents and counters."""

    # the intents whose text changes, with their redacted text
    changed: list[tuple[IntentRecord, str]] = field(default_factory=list)
    # the first unchanged intent holding each text a redaction writes (`[REDACTED]` in it)
    holders: dict[str, IntentRecord] = field(default_factory=dict)
    counters: PatternCounters | None = None  # rewritten, when its signatures change

    def __bool__(self) -> bool:
        return bool(self.changed) or self.counters is not None


def _redact_pattern(state: EngineState, tenant: str, pattern_id: str) -> int:
    """Rewrite the intents and failure signatures today's rules change of the pattern, under
    its lock; returns 1 when it was rewritten."""
    repo = state.repo
    while True:
        found = repo.patterns.pattern(tenant, pattern_id)
        if found is None:
            return 0  # deleted meanwhile (its intents with it)
        with state.locks.pattern.lock_for(tenant, found.code_hash):
            pattern = repo.patterns.pattern(tenant, pattern_id)
            if pattern is not None and pattern.code_hash != found.code_hash:
                continue  # moved to another hash meanwhile: its lock is another
            if pattern is None:
                return 0
            counters = repo.patterns.counters(tenant, pattern_id)
            plan = _planned(state, tenant, pattern_id, counters)
            if not plan:
                return 0
            removed = _rewrite(state, tenant, pattern.tools_used, pattern_id, counters, plan)
        if removed:
            compact_index(state, tenant)
        return 1


def _planned(
    state: EngineState, tenant: str, pattern_id: str, counters: PatternCounters | None
) -> _Plan:
    """The pattern's intents read `WHOLE_PATTERN_READ` at a time and redacted a page at a
    time: only those that change, and those a change may merge into, are kept."""
    plan = _Plan(counters=None if counters is None else _signatures(counters))
    intents = state.repo.intents.views_of_pattern(tenant, pattern_id)
    while page := list(itertools.islice(intents, _PAGE)):
        for intent, (text,) in zip(page, redacted_texts([[i.text] for i in page]), strict=True):
            if text != intent.text:
                plan.changed.append((intent, text))
            elif _REDACTED in text:
                plan.holders.setdefault(text, intent)
    return plan


_REDACTED = "[REDACTED]"


def _signatures(counters: PatternCounters) -> PatternCounters | None:
    """`counters` with its failure signatures' tools and errors redacted by today's rules (a
    signature changed is derived again from them, and one that then equals an earlier one
    merges into it: counts summed, the latest run's time and values), None when none
    changes."""
    signatures = counters.failure_signatures
    if not signatures:
        return None
    errors = redacted_texts([[s.error] for s in signatures])
    merged: dict[str, FailureSignature] = {}
    for old, (error,) in zip(signatures, errors, strict=True):
        tool = redacted_name(old.tool)
        now = old
        if (tool, error) != (old.tool, old.error):
            now = replace(old, tool=tool, error=error, signature=error_signature(tool, error))
        kept = merged.get(now.signature)
        if kept is None:
            merged[now.signature] = now
            continue
        latest = kept if kept.last_ms >= now.last_ms else now
        merged[now.signature] = replace(
            latest, count=kept.count + now.count, signature=kept.signature
        )
    redacted = list(merged.values())
    if redacted == signatures:
        return None
    return replace(counters, failure_signatures=redacted)


def _rewrite(
    state: EngineState,
    tenant: str,
    tools: tuple[str, ...],
    pattern_id: str,
    counters: PatternCounters | None,
    plan: _Plan,
) -> list[int]:
    """Write `plan` (the pattern's lock held), audited, and wait until durable; returns the
    intent ids removed. A changed intent goes and its redacted text comes back under a new id
    (as a merge moves one: the op log and every replica's indexes follow, the lexical index
    reads the new text) with the same vector, hit count and times; intents whose texts
    redact alike are one, their hits summed, the first unchanged one holding that text kept
    (docs/storage.md, Migrations)."""
    repo = state.repo
    change = Change()
    full = {
        i.id: i
        for i in repo.intents.intents_by_id(
            tenant,
            [(pattern_id, i.id) for i in [*(c for c, _ in plan.changed), *plan.holders.values()]],
        )
        if i is not None
    }
    by_text: dict[str, list[IntentRecord]] = {}
    for intent, text in plan.changed:
        if intent.id in full:
            by_text.setdefault(text, []).append(full[intent.id])
    removed: list[int] = []
    added: list[IntentRecord] = []
    kept: dict[int, IntentRecord] = {}
    for text, members in by_text.items():
        removed += [m.id for m in members]
        change.ops += [repo.intents.delete_intent(tenant, pattern_id, m.id) for m in members]
        hits = sum(m.hit_count for m in members)
        seen = max(m.last_seen_ms for m in members)
        holder = plan.holders.get(text)
        if holder is not None and holder.id in full:
            had = full[holder.id]
            kept[had.id] = replace(
                had, hit_count=had.hit_count + hits, last_seen_ms=max(had.last_seen_ms, seen)
            )
            change.ops.append(repo.intents.put_intent(tenant, kept[had.id]))
            change.count("intents", -len(members))
            continue
        first = members[0]  # the oldest: its vector stands for them all
        now = replace(
            first, id=state.ids.intent.next(), text=text, hit_count=hits, last_seen_ms=seen
        )
        change.ops.append(repo.intents.put_intent(tenant, now))
        added.append(now)
        if len(members) > 1:
            change.count("intents", 1 - len(members))
    new_counters = plan.counters or counters
    if new_counters is not None and (removed or plan.counters is not None):
        if removed:
            new_counters = shown_intents.summarized(
                new_counters, _intents_after(state, tenant, pattern_id, set(removed), kept, added)
            )
        change.put_counters(
            repo.patterns.put_counters(tenant, pattern_id, new_counters), pattern_id, new_counters
        )
    if removed:
        change.ops.append(oplog(state, tenant, "remove", removed))
        change.index_removes = removed
    if added:
        change.ops.append(oplog(state, tenant, "add", [i.id for i in added]))
        change.index_adds = [(i, tools) for i in added]
    audit(state, tenant, change, {"action": _ACTION, "pattern_id": pattern_id})
    await_durable(commit(state, tenant, change))
    return removed


def _intents_after(
    state: EngineState,
    tenant: str,
    pattern_id: str,
    removed: set[int],
    kept: dict[int, IntentRecord],
    added: list[IntentRecord],
) -> Iterator[IntentRecord]:
    """The pattern's intents once the rewrite is written, streamed (its summary's input)."""
    for intent in state.repo.intents.views_of_pattern(tenant, pattern_id):
        if intent.id not in removed:
            yield kept.get(intent.id, intent)
    yield from added


def _redact_failures(state: EngineState, page: list[tuple[bytes, bytes]]) -> int:
    """The failure log entries of `page` today's rules change, rewritten per tenant under its
    lock (a trim or an erasure takes it), each only if it still holds what was read."""
    entries = [(key, raw, json_form.loads(raw)) for key, raw in page]
    texts = redacted_texts(
        [[str(e.get("error", "")), str(e.get("intent", ""))] for *_, e in entries]
    )
    by_tenant: dict[str, dict[bytes, tuple[bytes, dict[str, Any]]]] = {}
    for (key, raw, entry), (error, intent) in zip(entries, texts, strict=True):
        if entry.get("erased"):
            continue
        now = {**entry, **{k: v for k, v in (("error", error), ("intent", intent)) if k in entry}}
        if "tool" in entry:
            now["tool"] = redacted_name(str(entry["tool"]))
        if now != entry:
            by_tenant.setdefault(split_tenant(key)[0], {})[key] = (raw, now)
    return sum(_rewrite_failures(state, tenant, wanted) for tenant, wanted in by_tenant.items())


def _rewrite_failures(
    state: EngineState, tenant: str, wanted: dict[bytes, tuple[bytes, dict[str, Any]]]
) -> int:
    """Rewrite the tenant's entries at `wanted`'s keys as redacted, each only if it still
    holds what was read, under the tenant's lock, as `_writes.commit` writes the log (on a
    shared store it locks other replicas out until the batch commits)."""
    logs = state.repo.logs
    change = Change()
    with state.locks.tenant.lock_for(tenant):
        still = state.store.get_many(CF_FAILURES, list(wanted))
        for (key, (raw, now)), current in zip(wanted.items(), still, strict=True):
            if current == raw:  # not trimmed, erased nor rewritten meanwhile
                change.ops.append(logs.rewrite_failure(key, now))
        rewritten = len(change.ops)
        if not rewritten:
            return 0
        audit(state, tenant, change, {"action": _ACTION, "failures": rewritten})
        ticket = state.store.submit(change.ops)
    await_durable(ticket)
    return rewritten


def _redact_answers(state: EngineState, page: list[tuple[bytes, bytes]]) -> int:
    """The stored answers of `page` whose tool errors today's rules change, each rewritten
    only if it still holds what was read (an answer expiring meanwhile is not put back)."""
    answers = [(key, raw, json_form.loads(raw)) for key, raw in page]
    failures = [[str(e) for _, e in data.get("tool_failures", [])] for *_, data in answers]
    by_tenant: dict[str, list[tuple[bytes, bytes, bytes]]] = {}
    for (key, raw, data), errors in zip(answers, redacted_texts(failures), strict=True):
        now = [
            [redacted_name(str(t)), e]
            for (t, _), e in zip(data.get("tool_failures", []), errors, strict=True)
        ]
        if now != data.get("tool_failures", []):
            rewrite = (key, raw, json_form.dumps({**data, "tool_failures": now}))
            by_tenant.setdefault(split_tenant(key)[0], []).append(rewrite)
    requests = state.repo.requests
    for tenant, rewrites in by_tenant.items():
        change = Change()
        change.ops += [requests.rewrite_request(*r) for r in rewrites]
        audit(state, tenant, change, {"action": _ACTION, "answers": len(rewrites)})
        await_durable(state.store.submit(change.ops))
    return sum(len(r) for r in by_tenant.values())
