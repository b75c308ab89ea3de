"""Builders shared by the ranking and retention tests (no tests here)."""

from __future__ import annotations

from pml_server.domain.model import PatternView
from pml_server.ranking import DAY_MS, Candidate

NOW_MS = 1_800_000_000_000  # a fixed clock: the tests pass now_ms explicitly


def pattern(
    pattern_id: str,
    *,
    successes: int = 1,
    failures: int = 0,
    capability_id: str = "",
    tools: tuple[str, ...] = ("read_file",),
    days_unused: float = 0.0,
    flagged: bool = False,
    superseded_by: str = "",
    usage: int | None = None,
) -> PatternView:
    return PatternView(
        id=pattern_id,
        code_hash="sha256:" + pattern_id,
        template=f"// {pattern_id}",
        original_code=f"// {pattern_id}",
        language="typescript",
        tools_used=tools,
        params=(),
        parameter_schema_json="{}",
        usage_count=successes + failures if usage is None else usage,
        success_count=successes,
        failure_count=failures,
        first_seen_ms=NOW_MS - int(400 * DAY_MS),
        last_used_ms=NOW_MS - int(days_unused * DAY_MS),
        mean_duration_ms=1.0,
        capability_id=capability_id or "cap-" + pattern_id,
        flagged_for_removal=flagged,
        superseded_by=superseded_by,
    )


def candidate(
    p: PatternView, semantic: float, lexical: float = 0.0, tags: tuple[str, ...] = ()
) -> Candidate:
    return Candidate(p.capability_id, p, semantic, lexical, tags)
