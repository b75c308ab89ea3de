"""The session signal (docs/ranking.md, Sessions): which capability usually follows the agent's
previous step, learned from the transitions successful captures of a session recorded and
from the stored workflows that ran its last tool (docs/ranking.md, Sessions, "Workflows").

Pure: the counts come in (capability id, count, last seen in ms), the clock is an argument.
A transition's count ages like a pattern's use: weighed by the ranking's recency factor of its
last occurrence (full for `recency_full_days`, then halving every `recency_half_life_days`,
never below `recency_floor`).

    w(c)       = aged(c) / (max over c' of aged(c') + transition_smoothing)      in [0, 1)
    transition = 1 + transition_weight * w(c)                                     in [1, 1 + tw)

w is the likelihood of c next relative to the most likely next step, shrunk towards 0 while
the evidence is a few counts (one occurrence: 1/3, seven: 7/9 at smoothing 2). The factor
multiplies the total, so a candidate whose total without it is more than (1 + tw) times
another's still ranks above it whatever the transitions (the bound the property tests pin).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pml_server import _core
from pml_server.ranking.config import RankingConfig
from pml_server.ranking.table import Taught, core_params

Transition = tuple[str, int, int]  # (next capability id, count, last seen ms)


def transition_weights(
    transitions: Iterable[Transition],
    config: RankingConfig,
    now_ms: int,
    taught: Iterable[Taught] = (),
) -> dict[str, float]:
    """w(c) of every capability that followed the previous step (summed over repeated ids:
    a previous step standing for several capabilities), and of those stored workflows
    `taught` (`RankTable.followers`: each workflow counts for every capability of its set,
    as a transition to each would)."""
    aged: dict[str, float] = {}
    params = core_params(config)
    for capability_id, count, last_ms in transitions:
        if count > 0:
            # the formula's recency factor, the core's (docs/ranking.md, Sessions)
            weight = count * _core.recency_factor(last_ms, now_ms, params)
            aged[capability_id] = aged.get(capability_id, 0.0) + weight
    for capabilities, workflows in taught:
        weight = sum(
            count * _core.recency_factor(last_ms, now_ms, params)
            for count, last_ms in workflows
            if count > 0
        )
        if weight > 0:
            for capability_id in capabilities:
                aged[capability_id] = aged.get(capability_id, 0.0) + weight
    if not aged:
        return {}
    scale = max(aged.values()) + config.transition_smoothing
    return {capability_id: value / scale for capability_id, value in aged.items()}


def transition_factor(weight: float, config: RankingConfig) -> float:
    """The factor of the total: 1 + transition_weight * w."""
    return 1.0 + config.transition_weight * weight


def transition_factors(weights: Mapping[str, float], config: RankingConfig) -> dict[str, float]:
    """`transition_factor` of each weight, by capability id."""
    return {c: transition_factor(w, config) for c, w in weights.items()}


def transition_ceiling(config: RankingConfig) -> float:
    """Above every factor: what bounds an unread candidate's total in a lazy ranking (the
    tests' oracle, `testing/ranking_oracle/lazy.py`)."""
    return 1.0 + config.transition_weight
