"""The named filter rules of Suggest. A candidate is removed by the first rule it fails, in the
order of `RULES`: hard context exclusions first, then the relevance and quality thresholds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pml_server.domain.model import ScoreParts
from pml_server.ranking.candidate import Candidate

FLAGGED_FOR_REMOVAL = "flagged_for_removal"
AVAILABLE_TOOLS = "available_tools"
TAGS = "tags"
MIN_MATCH = "min_match"
MIN_SUCCESS = "min_success"
# Not filters but reasons a candidate is absent from the answer, reported with `explain`.
SAME_CAPABILITY = "same_capability"
BEYOND_K = "beyond_k"


@dataclass(frozen=True)
class FilterSettings:
    """The thresholds of one request, request values resolved against the server defaults."""

    min_match: float
    min_success: float
    include_flagged: bool
    available_tools: frozenset[str] | None
    tags: frozenset[str]
    # The request named its own min_success: with available_tools or tags, it restricts
    # retrieval itself (docs/ranking.md, Context filters).
    own_min_success: bool = False

    def restricts_retrieval(self) -> bool:
        """Whether retrieval runs among the permitted patterns alone (an allow-list)."""
        return self.available_tools is not None or bool(self.tags) or self.own_min_success


Rule = Callable[[Candidate, ScoreParts, FilterSettings], str | None]


def _flagged(candidate: Candidate, _: ScoreParts, settings: FilterSettings) -> str | None:
    if candidate.pattern.flagged_for_removal and not settings.include_flagged:
        return "pattern is flagged for removal (include_flagged is off)"
    return None


def _available_tools(candidate: Candidate, _: ScoreParts, settings: FilterSettings) -> str | None:
    if settings.available_tools is None:
        return None
    missing = sorted(set(candidate.pattern.tools_used) - settings.available_tools)
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
