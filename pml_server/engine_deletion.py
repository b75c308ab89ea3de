"""What deleting one pattern writes (the caller holds the pattern's and its capability's locks)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pml_server.capture.records import CapabilityRecord, PatternRecord
from pml_server.engine_change import Change
from pml_server.storage.repo import Repository
from pml_server.storage.rocks import Op


def pattern_removal(
    repo: Repository,
    tenant: str,
    pattern: PatternRecord,
    capability: CapabilityRecord | None,
    log_removal: Callable[[list[int]], Op],
) -> Change:
    """The pattern's records and intents go (their vectors leave the index, logged by
    `log_removal` for the next restore), the tenant's counts drop, and the capability loses the
    member, or goes too when the pattern was its last."""
    change = Change()
    intents = repo.intents(tenant, pattern.id)
    change.ops += [
        repo.delete_pattern(tenant, pattern.id),
        repo.delete_hash(tenant, pattern.code_hash),
        repo.delete_counters(tenant, pattern.id),
        *(repo.delete_intent(tenant, i) for i in intents),
        log_removal([i.id for i in intents]),
    ]
    change.index_removes = [i.id for i in intents]
    change.rank_removes = [pattern.id]
    change.count("patterns", -1)
    change.count("intents", -len(intents))
    if capability is not None:
        members = tuple(p for p in capability.pattern_ids if p != pattern.id)
        if members:
            change.ops += repo.put_capability(tenant, replace(capability, pattern_ids=members))
        else:
            change.ops += repo.delete_capability(tenant, capability)
            change.count("capabilities", -1)
    return change
