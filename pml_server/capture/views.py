"""Stored records -> the domain views the API returns (PatternView, CapabilityView, ...)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pml_server.capture.steps import pattern_steps
from pml_server.domain import yielding
from pml_server.domain.model import CapabilityView, IntentView, ParamView, PatternView
from pml_server.domain.records import (
    CapabilityRecord,
    IntentRecord,
    PatternCounters,
    PatternRecord,
)

# What a Capability answers of its members (docs/api.md, Capabilities): at most this many intent
# texts and pattern names, read from at most this many intent rows.
MAX_CAPABILITY_INTENTS = 50
MAX_CAPABILITY_PATTERNS = 100
MAX_CAPABILITY_INTENT_READS = 10 * MAX_CAPABILITY_INTENTS


def pattern_view(
    record: PatternRecord,
    counters: PatternCounters,
    intents: Sequence[IntentRecord],
    *,
    with_params: bool = True,
    intent_count: int | None = None,
) -> PatternView:
    """The API's view of a pattern. Without params (and given no intents) it is the cheap view
    ranking needs, completed for the few patterns an answer shows; only the full view carries
    the steps (derived from the stored code, docs/normalization.md, Steps). `intent_count`:
    how many intents the pattern has when `intents` are only those shown (default: all)."""
    ordered = sorted(intents, key=lambda i: (-i.hit_count, i.id))
    return PatternView(
        id=record.id,
        code_hash=record.code_hash,
        template=record.template,
        original_code=record.original_code,
        language=record.language,
        tools_used=record.tools_used,
        params=_param_views(record, counters) if with_params else (),
        parameter_schema_json=record.parameter_schema_json,
        usage_count=counters.usage,
        success_count=counters.success,
        failure_count=counters.failure,
        first_seen_ms=record.first_seen_ms,
        last_used_ms=counters.last_used_ms,
        mean_duration_ms=counters.mean_duration_ms,
        capability_id=record.capability_id,
        intents=tuple(IntentView(i.str_id, i.text, i.hit_count, i.last_seen_ms) for i in ordered),
        flagged_for_removal=record.flagged_for_removal,
        superseded_by=record.superseded_by,
        tool_mismatch_count=counters.mismatch_count,
        steps=(
            pattern_steps(
                record.id,
                record.code_hash,
                record.original_code,
                record.language,
                record.steps_json,
            )
            if with_params
            else ()
        ),
        intent_count=len(intents) if intent_count is None else intent_count,
    )


def _param_views(record: PatternRecord, counters: PatternCounters) -> tuple[ParamView, ...]:
    views = []
    for p in record.params:
        yielding.checkpoint()  # up to 256 parameters a pattern: a long call's loop
        values = tuple(counters.recent_values.get(p.name, ()))
        views.append(ParamView(p.name, p.json_type, p.secret, values))
    return tuple(views)


def ranked_members(members: Sequence[tuple[str, PatternCounters]]) -> list[str]:
    """A capability's members (pattern id, counters), best first by their counters alone:
    smoothed success rate, then usage, then id (docs/api.md, Capabilities)."""

    def key(member: tuple[str, PatternCounters]) -> tuple[float, int, str]:
        pattern_id, c = member
        return ((c.success + 1) / (c.usage + 2), c.usage, pattern_id)

    return [pattern_id for pattern_id, _ in sorted(members, key=key, reverse=True)]


def capability_view(
    record: CapabilityRecord,
    members: Sequence[tuple[str, PatternCounters]],
    listed: Sequence[str],
    intents: Iterable[str],
) -> CapabilityView:
    """The API's view of a capability (docs/api.md, Capabilities): the sums over every member's
    counters, the `listed` pattern ids (its best first) and the first `MAX_CAPABILITY_INTENTS`
    distinct texts of `intents`, which is read no further."""
    # Kept in a dict (ordered, hashed): looked up in a list, each text would be compared with
    # every one before it, a time quadratic in the intents read.
    texts: dict[str, None] = {}
    for text in intents:
        texts.setdefault(text)
        if len(texts) == MAX_CAPABILITY_INTENTS:
            break
    return CapabilityView(
        id=record.id,
        tools=record.tools,
        pattern_ids=tuple(listed),
        pattern_count=len(members),
        best_pattern_id=listed[0] if listed else "",
        intents=tuple(texts),
        usage_count=sum(c.usage for _, c in members),
        success_count=sum(c.success for _, c in members),
        failure_count=sum(c.failure for _, c in members),
        last_used_ms=max((c.last_used_ms for _, c in members), default=0),
    )
