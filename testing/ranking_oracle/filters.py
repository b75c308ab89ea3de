"""The named filter rules of Suggest. A candidate is removed by the first rule it fails, in the
order of `RULES`: hard context exclusions first, then the relevance and quality thresholds."""

from __future__ import annotations

from collections.abc import Callable

from pml_server import _core
from pml_server.domain.model import ScoreParts
from pml_server.ranking.settings import (
    AVAILABLE_TOOLS,
    BEYOND_K,
    FLAGGED_FOR_REMOVAL,
    MIN_MATCH,
    MIN_SUCCESS,
    SAME_CAPABILITY,
    TAGS,
    FilterSettings,
)
from testing.ranking_oracle.candidate import Candidate

__all__ = ["BEYOND_K", "RULES", "SAME_CAPABILITY", "FilterSettings", "first_failed_rule"]

Rule = Callable[[Candidate, ScoreParts, FilterSettings], str | None]


def _flagged(candidate: Candidate, _: ScoreParts, settings: FilterSettings) -> str | None:
    if candidate.pattern.flagged_for_removal and not settings.include_flagged:
        return "pattern is flagged for removal (include_flagged is off)"
    return None


def _available_tools(candidate: Candidate, _: ScoreParts, settings: FilterSettings) -> str | None:
    if settings.available_tools is None:
        return None
    available = settings.available_tools
    missing = sorted(
        t
        for t in set(candidate.pattern.tools_used)
        if t not in available and not any(_core.same_tool(t, a) for a in available)
    )
    if missing:
        return "needs tools the caller cannot reach: " + ", ".join(missing)
    return None


def _tags(candidate: Candidate, _: ScoreParts, settings: FilterSettings) -> str | None:
    missing = sorted(settings.tags - set(candidate.tags))
    if missing:
        return "lacks requested tags: " + ", ".join(missing)
    return None


def _min_match(_: Candidate, parts: ScoreParts, settings: FilterSettings) -> str | None:
    if parts.match < settings.min_match:
        return f"match {parts.match:.3f} < min_match {settings.min_match:.3f}"
    return None


def _min_success(candidate: Candidate, parts: ScoreParts, settings: FilterSettings) -> str | None:
    if parts.success_estimate < settings.min_success:
        p = candidate.pattern
        return (
            f"success estimate {parts.success_estimate:.3f} ({p.success_count} of "
            f"{p.success_count + p.failure_count} tries) < min_success {settings.min_success:.3f}"
        )
    return None


RULES: tuple[tuple[str, Rule], ...] = (
    (FLAGGED_FOR_REMOVAL, _flagged),
    (AVAILABLE_TOOLS, _available_tools),
    (TAGS, _tags),
    (MIN_MATCH, _min_match),
    (MIN_SUCCESS, _min_success),
)


def first_failed_rule(
    candidate: Candidate, parts: ScoreParts, settings: FilterSettings
) -> tuple[str, str] | None:
    """(rule name, detail) of the first rule the candidate fails, or None if it passes all."""
    for name, rule in RULES:
        detail = rule(candidate, parts, settings)
        if detail is not None:
            return name, detail
    return None
