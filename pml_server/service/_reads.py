"""Reads: patterns, capabilities, the failure and audit logs, stats, and the read views they
are built of (a pattern whose counters are gone, i.e. deleted meanwhile, has no view)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pml_server.capture.views import (
    MAX_CAPABILITY_INTENT_READS,
    MAX_CAPABILITY_INTENTS,
    MAX_CAPABILITY_PATTERNS,
    capability_view,
    pattern_view,
    ranked_members,
)
from pml_server.domain import yielding
from pml_server.domain.errors import FieldViolation, InvalidArgumentError, NotFoundError
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import (
    CapabilityView,
    FailureEntry,
    IntentView,
    Page,
    PageRequest,
    PatternView,
    RetentionRow,
    Stats,
)
from pml_server.domain.records import CapabilityRecord, PatternRecord
from pml_server.service._arguments import check_page, check_tenant
from pml_server.storage.repo import Repository


def get_pattern(repo: Repository, tenant: str, pattern_id: str) -> PatternView:
    """The pattern with the intents a view shows and how many it has (domain/shown_intents.py;
    ListPatternIntents pages through all of them), read from the store now."""
    check_tenant(tenant)
    [found] = repo.views.read_shown_views(tenant, [pattern_id])
    if found is None:
        raise NotFoundError(f"pattern {pattern_id!r} not found")
    return pattern_view(
        found.record, found.counters, found.intents, intent_count=found.intent_count
    )


def pattern_intents(
    repo: Repository, tenant: str, pattern_id: str, page: PageRequest
) -> Page[IntentView]:
    """A page of the pattern's intents in id order (oldest first) after the intent id
    `page.cursor` ("" first): one range scan of at most `page_size + 1` rows, whatever the
    pattern holds. The cursor is the last intent's id when more follow."""
    check_tenant(tenant)
    check_page(page)
    after = _intent_cursor(page.cursor)
    if repo.patterns.counters(tenant, pattern_id) is None:
        raise NotFoundError(f"pattern {pattern_id!r} not found")
    rows = repo.views.intents_page(tenant, pattern_id, after, page.page_size + 1)
    shown = tuple(
        IntentView(i.str_id, i.text, i.hit_count, i.last_seen_ms) for i in rows[: page.page_size]
    )
    return Page(shown, shown[-1].id if len(rows) > page.page_size else "")


def _intent_cursor(cursor: str) -> int | None:
    """The intent id a ListPatternIntents cursor names ("int_" and 16 hex digits), None for
    the first page."""
    if not cursor:
        return None
    digits = cursor.removeprefix("int_")
    if len(digits) != 16 or not all(c in "0123456789abcdef" for c in digits):
        raise InvalidArgumentError(FieldViolation("page_token", "not a cursor this server issued"))
    return int(digits, 16)


def get_capability(repo: Repository, tenant: str, capability_id: str) -> CapabilityView:
    check_tenant(tenant)
    record = repo.capabilities.capability(tenant, capability_id)
    if record is None:
        raise NotFoundError(f"capability {capability_id!r} not found")
    return capability_summary(repo, tenant, record)


def list_patterns(
    repo: Repository, tenant: str, page: PageRequest, capability_id: str = ""
) -> Page[PatternView]:
    """The tenant's patterns by id, or only those of `capability_id` (docs/api.md,
    Capabilities): then only the page's members are read, and NotFoundError without it."""
    check_tenant(tenant)
    check_page(page)
    if capability_id:
        records, cursor = _members_page(repo, tenant, capability_id, page)
    else:
        records, cursor = repo.patterns.patterns_page(tenant, page.cursor, page.page_size)
    # Each view's steps are read from its code (docs/normalization.md, Steps): a page reads
    # at most an answer's bytes of code past its first pattern, then ends early (AIP-158).
    code_chars = 0
    for n, record in enumerate(records):
        code_chars += len(record.original_code)
        if n and code_chars > LIMITS.answer.bound:
            records, cursor = records[:n], records[n - 1].id
            break
    return Page(tuple(stored_pattern_views(repo, tenant, records)), cursor)


def _members_page(
    repo: Repository, tenant: str, capability_id: str, page: PageRequest
) -> tuple[list[PatternRecord], str]:
    """The records of a capability's members after the cursor, by id, at most a page; and the
    cursor after the last one when more follow ("" at the end)."""
    capability = repo.capabilities.capability(tenant, capability_id)
    if capability is None:
        raise NotFoundError(f"capability {capability_id!r} not found")
    after = sorted(p for p in capability.pattern_ids if p > page.cursor)
    wanted = after[: page.page_size]
    records = [r for r in repo.patterns.patterns_by_id(tenant, wanted) if r is not None]
    return records, (wanted[-1] if len(after) > page.page_size else "")


def list_capabilities(repo: Repository, tenant: str, page: PageRequest) -> Page[CapabilityView]:
    check_tenant(tenant)
    check_page(page)
    records, cursor = repo.capabilities.capabilities_page(tenant, page.cursor, page.page_size)
    views: list[CapabilityView] = []
    members = 0
    for n, record in enumerate(records):
        yielding.checkpoint()
        # Each capability reads every member's counters (docs/api.md, Capabilities): a page
        # reads at most CAPABILITY_PAGE_MEMBERS past its first capability, then ends early
        # (AIP-158).
        members += len(record.pattern_ids)
        if n and members > CAPABILITY_PAGE_MEMBERS:
            return Page(tuple(views), records[n - 1].id)
        views.append(capability_summary(repo, tenant, record))
    return Page(tuple(views), cursor)


def list_failures(repo: Repository, tenant: str, page: PageRequest) -> Page[FailureEntry]:
    check_tenant(tenant)
    check_page(page)
    before: int | None = None
    if page.cursor:
        try:
            before = int(page.cursor)
        except ValueError:
            raise InvalidArgumentError(
                FieldViolation("page_token", "not a cursor this server issued")
            ) from None
    rows, last = repo.logs.failures_page(tenant, before, page.page_size)
    entries: list[FailureEntry] = []
    answer_bytes = 0
    for n, (_, entry) in enumerate(rows):
        # An entry holds up to 16 KiB of error and 4 KiB of intent: a page of 1000 could take
        # 20 MB, past the 4 MiB any default gRPC client receives (grpcurl, Go, Node answered
        # RESOURCE_EXHAUSTED for the whole listing). It ends early instead (AIP-158), as
        # ListPatterns does, the first entry always kept.
        answer_bytes += _failure_answer_bytes(entry)
        if n and answer_bytes > LIMITS.answer.bound:
            return Page(tuple(entries), str(rows[n - 1][0]))
        entries.append(FailureEntry(**entry))
    return Page(tuple(entries), "" if last is None else str(last))


# A Failure message's bytes beyond its texts' (field tags, lengths, the timestamp, its own
# framing in the answer): about 45, rounded up.
_FAILURE_FRAMING_BYTES = 64


def _failure_answer_bytes(entry: dict[str, Any]) -> int:
    """At most what `entry` takes in a ListFailures answer (its pattern as `patterns/{id}`)."""
    texts = ("request_id", "tool", "error", "intent", "code_hash", "pattern_id")
    text_bytes = sum(len(str(entry[k]).encode()) for k in texts)
    return _FAILURE_FRAMING_BYTES + len("patterns/") + text_bytes


def stats(repo: Repository, tenant: str) -> Stats:
    check_tenant(tenant)
    s = repo.meta.stats(tenant)
    return Stats(
        patterns=s.patterns,
        capabilities=s.capabilities,
        intents=s.intents,
        executions=s.executions,
        rejected=s.rejected,
        failures_logged=s.failures_logged,
    )


def audit_log(repo: Repository, tenant: str) -> list[dict[str, Any]]:
    """Every retention action and deletion of the tenant, oldest first."""
    check_tenant(tenant)
    return repo.logs.audit_log(tenant)


def stored_pattern_views(
    repo: Repository, tenant: str, records: Sequence[PatternRecord]
) -> list[PatternView]:
    """The views of these patterns as GetPattern shows them (their shown intents and how many
    they have, domain/shown_intents.py), in order, but for those deleted meanwhile: one
    multi-get of their counters and one of the intents those name, never all their intents."""
    views = []
    for shown in repo.views.views_of_records(tenant, records):
        yielding.checkpoint()
        if shown is not None:
            views.append(
                pattern_view(
                    shown.record, shown.counters, shown.intents, intent_count=shown.intent_count
                )
            )
    return views


# The member patterns a ListCapabilities page reads past its first capability (docs/api.md,
# Capabilities): a page of 1000 capabilities of thousands of patterns each would read millions.
CAPABILITY_PAGE_MEMBERS = 20_000

# Pattern records read at a time while looking for the best member not flagged or superseded.
_BEST_READ_CHUNK = 8


def capability_summary(repo: Repository, tenant: str, record: CapabilityRecord) -> CapabilityView:
    """A capability's view at a bounded cost (docs/api.md, Capabilities): every member's
    counters (small rows, one multi-get), the records of its members best first by counters
    until one is neither flagged for removal nor superseded, and the first intents of its
    listed patterns, read only until the view has its MAX_CAPABILITY_INTENTS texts (at most
    MAX_CAPABILITY_INTENT_READS rows)."""
    ids = record.pattern_ids
    counters = repo.patterns.counters_by_id(tenant, ids)
    # a pattern whose counters are gone was deleted meanwhile: not a member
    members = [(p, c) for p, c in zip(ids, counters, strict=True) if c is not None]
    ranked = ranked_members(members)
    best = _best_member(repo, tenant, ranked)
    listed = [best, *(p for p in ranked if p != best)] if best else []
    listed = listed[:MAX_CAPABILITY_PATTERNS]
    return capability_view(record, members, listed, _intent_texts(repo, tenant, listed))


def _best_member(repo: Repository, tenant: str, ranked: list[str]) -> str:
    """The first of `ranked` (best first by counters) neither flagged for removal nor
    superseded, else the first of them all ("" when none is stored)."""
    first = ""
    for start in range(0, len(ranked), _BEST_READ_CHUNK):
        yielding.checkpoint()
        chunk = ranked[start : start + _BEST_READ_CHUNK]
        for pattern in repo.patterns.patterns_by_id(tenant, chunk):
            if pattern is None:
                continue
            if not (pattern.flagged_for_removal or pattern.superseded_by):
                return pattern.id
            first = first or pattern.id
    return first


def _intent_texts(repo: Repository, tenant: str, listed: list[str]) -> Iterator[str]:
    """The texts of the listed patterns' intents, each pattern's oldest first (at most
    MAX_CAPABILITY_INTENTS of each), at most MAX_CAPABILITY_INTENT_READS rows in all, read as
    the view asks (`IntentRows.first_of_patterns`)."""
    intents = repo.intents.first_of_patterns(
        tenant, listed, MAX_CAPABILITY_INTENTS, MAX_CAPABILITY_INTENT_READS
    )
    for intent in intents:
        yielding.checkpoint()
        yield intent.text


def views_by_capability(repo: Repository, tenant: str) -> dict[str, list[RetentionRow]]:
    """What retention evaluates: each pattern's `RetentionRow` (ids and counters, no code, no
    intent), grouped by capability, in pattern id order (docs/ranking.md, Retention)."""
    groups: dict[str, list[RetentionRow]] = {}
    for row in repo.patterns.retention_rows(tenant):
        yielding.checkpoint()
        groups.setdefault(row.capability_id, []).append(row)
    return groups
