"""Stored records -> the domain views the API returns (PatternView, CapabilityView, ...)."""

from __future__ import annotations

from collections.abc import Sequence

from pml_server.capture.steps import pattern_steps
from pml_server.domain import yielding
from pml_server.domain.model import CapabilityView, IntentView, ParamView, PatternView
from pml_server.domain.records import (
    CapabilityRecord,
    IntentRecord,
    PatternCounters,
    PatternRecord,
)

MAX_CAPABILITY_INTENTS = 50


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
            pattern_steps(record.id, record.code_hash, record.original_code, record.language)
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


def best_pattern(patterns: Sequence[PatternView]) -> PatternView:
    """The member a capability is represented by: best smoothed success rate, then usage.
    Patterns flagged for removal or superseded come last."""

    def key(p: PatternView) -> tuple[bool, float, int, str]:
        demoted = p.flagged_for_removal or bool(p.superseded_by)
        rate = (p.success_count + 1) / (p.usage_count + 2)
        return (not demoted, rate, p.usage_count, p.id)

    return max(patterns, key=key)


def capability_view(record: CapabilityRecord, members: Sequence[PatternView]) -> CapabilityView:
    # The first distinct texts in member order. Kept in a dict (ordered, hashed): looked up in
    # a list, each text would be compared with every one before it, and a capability of 12,000
    # intents would take a second of the server's CPU per GetCapability or listing page.
    texts: dict[str, None] = {}
    for member in members:
        for intent in member.intents:
            if len(texts) == MAX_CAPABILITY_INTENTS:
                break
            texts.setdefault(intent.text)
    return CapabilityView(
        id=record.id,
        tools=record.tools,
        pattern_ids=tuple(m.id for m in members),
        best_pattern_id=best_pattern(members).id if members else "",
        intents=tuple(texts),
        usage_count=sum(m.usage_count for m in members),
        success_count=sum(m.success_count for m in members),
        failure_count=sum(m.failure_count for m in members),
        last_used_ms=max((m.last_used_ms for m in members), default=0),
    )
