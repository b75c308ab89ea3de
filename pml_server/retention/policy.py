"""Evaluation of the retention policy over a tenant's patterns. Pure: the engine applies the
entries (flags, removals, superseded links) and writes them to the audit log."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from pml_server import _core
from pml_server.domain.model import RetentionAction, RetentionEntry
from pml_server.ranking import DAY_MS
from pml_server.retention.config import RetentionConfig


class Evaluated(Protocol):
    """What the policy reads of a pattern: a `RetentionRow` (what a run reads) or a
    `PatternView`."""

    @property
    def id(self) -> str: ...

    @property
    def success_count(self) -> int: ...

    @property
    def failure_count(self) -> int: ...

    @property
    def last_used_ms(self) -> int: ...


def _estimate(pattern: Evaluated, config: RetentionConfig) -> float:
    # The ranking's success estimate (same Beta posterior mean, the core's).
    return _core.beta_mean(
        pattern.success_count, pattern.failure_count, config.prior_successes, config.prior_failures
    )


def _tries(pattern: Evaluated) -> int:
    return max(pattern.success_count, 0) + max(pattern.failure_count, 0)


def removal_holds(successes: int, failures: int, config: RetentionConfig) -> bool:
    """The removal rule: at least `min_tries` tries and a success rate below
    `min_success_rate`. Retention applies it when it evaluates the tenant, and again to each
    pattern's current counters under the pattern's lock before deleting it (docs/ranking.md,
    Retention): a pattern that succeeded meanwhile is kept."""
    tries = max(successes, 0) + max(failures, 0)
    return tries >= config.min_tries and successes / tries < config.min_success_rate


def _removal(pattern: Evaluated, config: RetentionConfig) -> RetentionEntry | None:
    if not removal_holds(pattern.success_count, pattern.failure_count, config):
        return None
    tries = _tries(pattern)
    rate = pattern.success_count / tries
    action = RetentionAction.REMOVED if config.auto_remove else RetentionAction.REMOVAL_CANDIDATE
    reason = (
        f"success rate {rate:.0%} ({pattern.success_count} of {tries} tries) "
        f"< {config.min_success_rate:.0%} after >= {config.min_tries} tries"
    )
    return RetentionEntry(pattern.id, action, reason)


def _stale(pattern: Evaluated, config: RetentionConfig, now_ms: int) -> RetentionEntry | None:
    unused_days = (now_ms - pattern.last_used_ms) / DAY_MS
    if unused_days < config.stale_after_days:
        return None
    reason = f"unused for {unused_days:.0f} days (>= {config.stale_after_days:g})"
    return RetentionEntry(pattern.id, RetentionAction.STALE, reason)


def supersede_holds(
    counts: tuple[int, int], best_counts: tuple[int, int], config: RetentionConfig
) -> bool:
    """The superseded rule on (successes, failures): the better pattern has at least
    `superseded_min_tries` tries and a success estimate higher by at least `superseded_margin`.
    Retention applies it when it evaluates the tenant, and again to both patterns' current
    counters under the marked pattern's lock (docs/ranking.md, Retention)."""
    best_successes, best_failures = best_counts
    if max(best_successes, 0) + max(best_failures, 0) < config.superseded_min_tries:
        return False
    estimate = _core.beta_mean(*counts, config.prior_successes, config.prior_failures)
    best = _core.beta_mean(*best_counts, config.prior_successes, config.prior_failures)
    return bool(best - estimate >= config.superseded_margin)


def _counts(pattern: Evaluated) -> tuple[int, int]:
    return pattern.success_count, pattern.failure_count


def _superseded(
    patterns: Sequence[Evaluated], config: RetentionConfig
) -> dict[str, RetentionEntry]:
    """Within one capability, every pattern clearly beaten by the capability's best proven
    pattern. Comparing with the single best avoids chains (A by B by C)."""
    proven = [p for p in patterns if _tries(p) >= config.superseded_min_tries]
    if not proven:
        return {}
    best = min(proven, key=lambda p: (-_estimate(p, config), -_tries(p), p.id))
    best_estimate = _estimate(best, config)
    entries: dict[str, RetentionEntry] = {}
    for pattern in patterns:
        if pattern.id == best.id:
            continue
        estimate = _estimate(pattern, config)
        if supersede_holds(_counts(pattern), _counts(best), config):
            reason = (
                f"success estimate {estimate:.2f} vs {best_estimate:.2f} of pattern {best.id} "
                f"({_tries(best)} tries); margin >= {config.superseded_margin:.2f}"
            )
            entries[pattern.id] = RetentionEntry(
                pattern.id, RetentionAction.SUPERSEDED, reason, superseded_by=best.id
            )
    return entries


def evaluate(
    capabilities: Mapping[str, Sequence[Evaluated]],
    config: RetentionConfig,
    now_ms: int,
) -> list[RetentionEntry]:
    """Every retention finding, by capability id then pattern id; a pattern may have several
    (e.g. a stale removal candidate). Manual deletion is not a finding: the engine does it."""
    entries: list[RetentionEntry] = []
    for capability_id in sorted(capabilities):
        patterns = sorted(capabilities[capability_id], key=lambda p: p.id)
        superseded = _superseded(patterns, config)
        for pattern in patterns:
            for entry in (
                _removal(pattern, config),
                _stale(pattern, config, now_ms),
                superseded.get(pattern.id),
            ):
                if entry is not None:
                    entries.append(entry)
    return entries
