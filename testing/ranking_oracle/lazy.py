"""Rank without loading every candidate: the answer of `rank`, reading only the patterns that
can still make the top k.

A candidate's total is its match (known from the retrieval scores alone) times factors that
depend on its counters; none exceeds 1 (reliability is 1 at most, reached without failures),
and the usage factor grows with the count, so `score_ceiling` of the tenant's highest usage
count bounds their product for every pattern. Candidates are loaded in decreasing match order;
once k capabilities pass the filters and the next match times the ceiling is below the k-th
best total, no candidate left can enter the answer or change the representative of one in it
(its total is lower still).
With `explain` every candidate is loaded, since the answer lists all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from pml_server.domain.model import ScoreParts, SuggestQuery, SuggestResult
from pml_server.ranking.config import RankingConfig
from testing.ranking_oracle.candidate import Candidate
from testing.ranking_oracle.filters import first_failed_rule
from testing.ranking_oracle.ordering import rank_scored, resolve_settings
from testing.ranking_oracle.scoring import match_array, relevance, score
from testing.ranking_oracle.signals import usage_factor


class Retrieval(NamedTuple):
    """What the indexes know about a pattern before it is read: its two relevance signals,
    with the meaning of `Candidate.semantic` and `Candidate.lexical`. (A named tuple: Suggest
    makes one per retrieved pattern, and a frozen dataclass costs several times more to build.)"""

    pattern_id: str
    semantic: float
    lexical: float
    # the step factor (docs/ranking.md, Steps), at most 1, so the match stays a bound
    steps: float = 1.0


def match_bound(retrieval: Retrieval, config: RankingConfig) -> float:
    """The match `score` will give the candidate, an upper bound of its total."""
    return relevance(retrieval.semantic, retrieval.lexical, config)[2]


def score_ceiling(max_successes: int, max_usage: int, config: RankingConfig) -> float:
    """An upper bound of reliability * usage * recency * superseded_penalty for any pattern with
    at most `max_usage` uses (reliability, recency and the penalty are at most 1; the usage
    factor grows with use). `max_successes` bounds nothing since reliability stopped growing
    with successes (kept: the repository's counter ceilings give both). A hair above the exact
    product, so float rounding of the total, multiplied in another order, can never exceed it."""
    del max_successes
    return min(1.0, usage_factor(max(max_usage, 0), config) * (1.0 + 1e-9))


def _best_first(item: tuple[float, Retrieval]) -> tuple[float, str]:
    return -item[0], item[1].pattern_id


Loader = Callable[[Sequence[Retrieval]], list[Candidate]]


def rank_lazily(
    query: SuggestQuery,
    retrieved: Sequence[Retrieval],
    load: Loader,
    config: RankingConfig,
    now_ms: int,
    ceiling: float = 1.0,
    batch: int = 8,
    transitions: Mapping[str, float] | None = None,
) -> SuggestResult:
    """`rank(query, load(retrieved), config, now_ms)` for retrievals of distinct patterns,
    calling `load` on as few retrievals as the proof above allows, in batches of at least
    `batch`. `ceiling` is a `score_ceiling` that holds for every retrieved pattern (1.0 always
    does). `load` returns the candidates of the patterns that still exist (a deleted one is
    skipped). `transitions`: the session signal's factor by capability (docs/ranking.md,
    Sessions); the ceiling is raised by the largest."""
    settings = resolve_settings(query, config)
    factor = transitions or {}
    if factor:
        ceiling *= max(1.0, *factor.values())
    # every bound at once: the same float operations as `match_bound`, one numpy pass
    bounds = match_array(
        np.fromiter((r.semantic for r in retrieved), np.float64, len(retrieved)),
        np.fromiter((r.lexical for r in retrieved), np.float64, len(retrieved)),
        config,
    ).tolist()
    ordered = sorted(zip(bounds, retrieved, strict=True), key=_best_first)
    step = max(batch, 2 * query.k)
    loaded: dict[str, tuple[Candidate, ScoreParts]] = {}
    best_total: dict[str, float] = {}  # capability -> best total among its passing candidates
    position = 0
    while position < len(ordered):
        if not query.explain and len(best_total) >= query.k:
            kth = sorted(best_total.values(), reverse=True)[query.k - 1]
            if ordered[position][0] * ceiling < kth:
                break
        chunk = [r for _, r in ordered[position : position + step]]
        position += step
        for cand in load(chunk):
            parts = score(cand, config, now_ms, factor.get(cand.capability_id, 1.0))
            loaded[cand.pattern.id] = (cand, parts)
            if first_failed_rule(cand, parts, settings) is None:
                known = best_total.get(cand.capability_id, -1.0)
                best_total[cand.capability_id] = max(known, parts.total)
    return rank_scored(query, settings, list(loaded.values()))
