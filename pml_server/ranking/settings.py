"""A Suggest request's filters: the rule names, and the request's thresholds resolved against
the server defaults (validated, naming every bad field). The rules themselves are applied in
the core (`pml_core_rs/src/ranking/query.rs`, docs/ranking.md, Filters)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pml_server.domain.errors import FieldViolation, InvalidArgumentError
from pml_server.domain.limits import LIMITS
from pml_server.domain.model import SuggestQuery
from pml_server.ranking.config import RankingConfig

# The filter rules, in the order they are applied (the first one a candidate fails names why
# it is left out), as `explain` names them.
FLAGGED_FOR_REMOVAL = "flagged_for_removal"
AVAILABLE_TOOLS = "available_tools"
TAGS = "tags"
MIN_MATCH = "min_match"
MIN_SUCCESS = "min_success"
# Not filters but reasons a candidate is absent from the answer, reported with `explain`.
SAME_CAPABILITY = "same_capability"
BEYOND_K = "beyond_k"
RULES: tuple[str, ...] = (FLAGGED_FOR_REMOVAL, AVAILABLE_TOOLS, TAGS, MIN_MATCH, MIN_SUCCESS)


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


def resolve_settings(query: SuggestQuery, config: RankingConfig) -> FilterSettings:
    """The request's thresholds with None replaced by the server defaults; raises
    InvalidArgumentError naming every bad field."""
    violations: list[FieldViolation] = []
    if not 1 <= query.k <= LIMITS.suggestions.bound:
        violations.append(FieldViolation("k", f"must be between 1 and {LIMITS.suggestions.bound}"))
    for name in ("min_match", "min_success"):
        value = getattr(query, name)
        if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
            violations.append(FieldViolation(name, "must be a number between 0 and 1"))
    if query.available_tools is not None and any(not t for t in query.available_tools):
        violations.append(FieldViolation("available_tools", "tool names must not be empty"))
    if any(not t for t in query.tags):
        violations.append(FieldViolation("tags", "tags must not be empty"))
    if violations:
        raise InvalidArgumentError(violations)
    return FilterSettings(
        min_match=config.min_match if query.min_match is None else query.min_match,
        min_success=config.min_success if query.min_success is None else query.min_success,
        include_flagged=query.include_flagged,
        available_tools=None if query.available_tools is None else frozenset(query.available_tools),
        tags=frozenset(query.tags),
        own_min_success=query.min_success is not None,
    )
