"""Suggest ranked in the Rust core: each tenant's ranking table (what the formula and the
filters read of every pattern) and the calls that turn (query vector, query words, filters, k)
into the top k with their score parts and, with `explain`, every other candidate with its rule,
GIL released (`pml_core_rs/src/ranking/`). The only ranking path of the service: the Python
formula is the tests' oracle (`testing/ranking_oracle`, docs/ranking.md, Pipeline).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from pml_server import _core
from pml_server.domain.model import FilteredCandidate, ScoreParts
from pml_server.domain.vectors import Vector
from pml_server.ranking.config import RankingConfig
from pml_server.ranking.lexical import LexicalIndex, query_terms
from pml_server.ranking.plans import states_order, text_words_in_order, tool_words
from pml_server.ranking.settings import FilterSettings

# How many of a request's nearest intents vote for their tools (docs/ranking.md, Steps).
STEP_NEIGHBOURS: int = _core.STEP_NEIGHBOURS

# The RankingConfig fields the core's formula reads (`ranking::Params`); the rest are filters
# (passed per request) and retrieval sizes.
_FORMULA_FIELDS = (
    "semantic_weight",
    "lexical_weight",
    "lexical_half_score",
    "prior_successes",
    "prior_failures",
    "expected_success_rate",
    "reliability_prior_strength",
    "usage_weight",
    "usage_saturation",
    "recency_full_days",
    "recency_half_life_days",
    "recency_floor",
    "superseded_penalty",
    "step_weight",
    "step_profile_weight",
    "step_gate",
    "step_coverage_weight",
    "step_order_weight",
)
assert set(_FORMULA_FIELDS) <= {f.name for f in fields(RankingConfig)}


# A set of tools stored workflows taught to follow a step (docs/ranking.md, Sessions,
# "Workflows"): its capability ids, and the (successes, last use in ms) of each workflow.
Taught = tuple[list[str], list[tuple[int, int]]]


@dataclass(frozen=True)
class RankRequest:
    """One Suggest query as the core ranks it: the request's vector and words, each index asked
    for `limit` hits (`RankingConfig.fetch_limit`), the top `k`, the resolved filters, the
    formula's settings and clock, and the session signal's factor by capability
    (docs/ranking.md, Sessions; None without a context)."""

    vector: np.ndarray
    text: str
    limit: int
    k: int
    settings: FilterSettings
    config: RankingConfig
    now_ms: int
    transitions: Mapping[str, float] | None = None
    # the request's parts (docs/ranking.md, Steps, "Request parts' coverage"): each part's
    # vector in the space of `vector` and its weight; None for a request of one part
    parts: RequestParts | None = None


class RequestParts(NamedTuple):
    """A request's parts as the step factor reads them: one vector per part (pooled from the
    request's own model run) and each part's weight (`plans.split_request_spans`)."""

    vectors: Sequence[np.ndarray]
    weights: Sequence[float]


class Foreign(NamedTuple):
    """The intents of a query recorded in another language and where they are read
    (docs/ranking.md, Other languages: the reverse direction; `ranking::Space` in the core):
    the companion's index and the request embedded by the companion model."""

    ann: _core.HnswIndex
    query: np.ndarray
    ids: Sequence[int]


@lru_cache(maxsize=4096)
def _name_words(tool: str) -> tuple[str, ...]:
    """A tool name's analysed words, sorted, computed once per name: every capture sets its
    pattern's row, and a tenant's tools recur."""
    return tuple(sorted(tool_words(tool)))


@lru_cache(maxsize=64)
def core_params(config: RankingConfig) -> _core.RankParams:
    """The formula's parameters in the core's form, converted once per configuration."""
    return _core.RankParams(**{name: float(getattr(config, name)) for name in _FORMULA_FIELDS})


class CoreSuggestion(NamedTuple):
    """One suggestion as the core ranked it: the pattern's view is read afterwards."""

    pattern_id: str
    capability_id: str
    score: ScoreParts


class RankTable:
    """One tenant's ranking table. Rows are keyed by pattern id; a row ranks once both its
    record part (`set_pattern`) and its counters part (`set_counters`) are known and at least
    one of its intents is linked (`link_intent`) and still in the vector index."""

    def __init__(self) -> None:
        self._core = _core.RankTable()

    def __len__(self) -> int:
        return len(self._core)

    def set_pattern(
        self,
        pattern_id: str,
        capability_id: str,
        tools: Sequence[str],
        flagged: bool,
        superseded: bool,
    ) -> None:
        words = [list(_name_words(t)) for t in tools]  # docs/ranking.md, Steps
        self._core.set_pattern(pattern_id, capability_id, list(tools), flagged, superseded, words)

    def set_counters(
        self,
        pattern_id: str,
        successes: int,
        failures: int,
        usage: int,
        last_used_ms: int,
        tags: Sequence[str],
    ) -> None:
        self._core.set_counters(pattern_id, successes, failures, usage, last_used_ms, list(tags))

    def remove_pattern(self, pattern_id: str) -> None:
        self._core.remove_pattern(pattern_id)

    def link_intent(self, intent_id: int, pattern_id: str) -> None:
        self._core.link_intent(intent_id, pattern_id)

    def unlink_intents(self, intent_ids: Sequence[int]) -> None:
        self._core.unlink_intents(list(intent_ids))

    def pattern_of(self, intent_id: int) -> str | None:
        """The pattern an intent stands for, if linked."""
        return self._core.pattern_of(intent_id)

    def intents_of(self, pattern_id: str) -> list[int]:
        """The intents linked to a pattern (empty if none)."""
        return self._core.intents_of(pattern_id)

    def memory_bytes(self) -> int:
        return self._core.memory_bytes()

    def followers(self, previous: Sequence[str], limit: int) -> list[Taught]:
        """What stored workflows teach follows a step whose tools are `previous`, in call order
        (docs/ranking.md, Sessions, "Workflows"), from at most `limit` workflows: each set of
        tools taught, its capability ids with the (successes, last use in ms) of each workflow
        that taught it (a session transition's count and time)."""
        return self._core.followers(list(previous), limit)

    def step_capabilities(self, previous: Sequence[str]) -> list[str]:
        """The capabilities standing for a step whose tools are `previous`, in call order:
        those with its tools, each with or without its server's namespace (`same_tool`), else
        (several tools) those of its last tool alone (docs/ranking.md, Sessions)."""
        return self._core.step_capabilities(list(previous))

    def step_profile(
        self, previous: Sequence[str], ann: _core.HnswIndex, companion: bool = False
    ) -> Vector | None:
        """The previous step's vector for a follow-up request (docs/ranking.md, Sessions,
        "Follow-up requests"): the mean of its tools' profiles in `ann`'s space, unit length;
        None when none of its tools has one."""
        found = self._core.step_profile(list(previous), ann, companion)
        return None if found is None else np.asarray(found, dtype=np.float32)

    def permitted(
        self, settings: FilterSettings, config: RankingConfig
    ) -> tuple[list[str], list[int]] | None:
        """(pattern ids, their intents) the context filters permit, or None when retrieval is
        not restricted (the request names none, or they permit every pattern):
        docs/ranking.md, Context filters."""
        if not settings.restricts_retrieval():
            return None
        available = settings.available_tools
        return self._core.permitted(
            core_params(config),
            min_success=settings.min_success,
            include_flagged=settings.include_flagged,
            available_tools=None if available is None else sorted(available),
            tags=sorted(settings.tags),
        )

    def step_factors(
        self,
        hits: Sequence[tuple[int, float]],
        pattern_ids: Sequence[str],
        text: str,
        config: RankingConfig,
        ann: _core.HnswIndex | None,
        vector: np.ndarray,
        *,
        companion: bool = False,
        parts: RequestParts | None = None,
    ) -> list[float]:
        """The step factor of each of `pattern_ids` for a request whose vector search returned
        `hits` (intent id, cosine) are its `STEP_NEIGHBOURS` nearest intents in the whole memory
        and whose vector is `vector` (its tools' profiles are read from `ann`, the companion's
        index when `companion`, whose profiles are kept apart; None: the scoring mixes two
        spaces and the profiles' part is left out): the core's, as its ranking applies it
        (docs/ranking.md, Steps; Other languages), for the tests' oracle."""
        vectors, weights = _part_args(parts)
        return self._core.step_factors(
            [i for i, _ in hits],
            [s for _, s in hits],
            list(pattern_ids),
            list(text_words_in_order(text)),
            core_params(config),
            ann,
            np.asarray(vector, dtype=np.float32),
            companion=companion,
            parts=vectors,
            part_weights=weights,
            ordered=states_order(text),
        )

    def rank(
        self,
        ann: _core.HnswIndex,
        lexical: LexicalIndex,
        request: RankRequest,
        *,
        primary: bool = True,
        foreign: Foreign | None = None,
    ) -> list[CoreSuggestion]:
        """The top `k` for the request. `primary`: `ann` is the tenant's own index, whose
        vectors the tool profiles are means of (False: the companion's, for a request in another
        language); `foreign`: intents read in the companion's space instead (docs/ranking.md,
        Other languages)."""
        ranked, _ = self._query(ann, lexical, request, False, primary, foreign)
        return ranked

    def explain(
        self,
        ann: _core.HnswIndex,
        lexical: LexicalIndex,
        request: RankRequest,
        *,
        primary: bool = True,
        foreign: Foreign | None = None,
    ) -> tuple[list[CoreSuggestion], list[FilteredCandidate]]:
        """`rank`, and every other candidate retrieved with the rule that kept it out (a filter
        name, `same_capability` or `beyond_k`), its detail and its score parts."""
        return self._query(ann, lexical, request, True, primary, foreign)

    def rank_next(
        self,
        pattern_ids: Sequence[str],
        weights: Mapping[str, float],
        k: int,
        settings: FilterSettings,
        config: RankingConfig,
        now_ms: int,
        explain: bool = False,
    ) -> tuple[list[CoreSuggestion], list[FilteredCandidate]]:
        """What usually comes next (a request without an intent, docs/ranking.md, Sessions):
        the patterns among `pattern_ids` scored by their capability's transition weight, with
        every filter but `min_match`; the filtered candidates with `explain`."""
        available = settings.available_tools
        ranked, filtered = _core.rank_next(
            self._core,
            list(pattern_ids),
            dict(weights),
            k,
            core_params(config),
            now_ms,
            min_success=settings.min_success,
            include_flagged=settings.include_flagged,
            available_tools=None if available is None else sorted(available),
            tags=sorted(settings.tags),
            explain=explain,
        )
        return _answer(ranked, filtered)

    def _query(
        self,
        ann: _core.HnswIndex,
        lexical: LexicalIndex,
        request: RankRequest,
        explain: bool,
        primary: bool,
        foreign: Foreign | None,
    ) -> tuple[list[CoreSuggestion], list[FilteredCandidate]]:
        text, settings, transitions = request.text, request.settings, request.transitions
        terms = query_terms(text)  # in the order `LexicalIndex.search` sums them
        available = settings.available_tools
        vectors, weights = _part_args(request.parts)
        ranked, filtered = _core.rank_query(
            self._core,
            ann,
            lexical.core,
            request.vector,
            terms,
            request.limit,
            request.k,
            core_params(request.config),
            request.now_ms,
            min_match=settings.min_match,
            min_success=settings.min_success,
            include_flagged=settings.include_flagged,
            available_tools=None if available is None else sorted(available),
            tags=sorted(settings.tags),
            own_min_success=settings.own_min_success,
            words=list(text_words_in_order(text)),
            transitions=dict(transitions) if transitions else None,
            explain=explain,
            primary=primary,
            foreign_ann=None if foreign is None else foreign.ann,
            foreign_query=None if foreign is None else foreign.query,
            foreign_ids=[] if foreign is None else list(foreign.ids),
            parts=vectors,
            part_weights=weights,
            ordered=states_order(text),
        )
        return _answer(ranked, filtered)


def _part_args(parts: RequestParts | None) -> tuple[list[np.ndarray] | None, list[float]]:
    """The core's `parts` and `part_weights` arguments (None and [] without parts)."""
    if parts is None:
        return None, []
    return [np.asarray(v, dtype=np.float32) for v in parts.vectors], [
        float(w) for w in parts.weights
    ]


_Parts = tuple[float, float, float, float, float, float, float, float, float, float, float]


def _answer(
    ranked: list[tuple[str, str, _Parts]],
    filtered: list[tuple[str, str, str, str, _Parts]],
) -> tuple[list[CoreSuggestion], list[FilteredCandidate]]:
    return (
        [
            CoreSuggestion(pattern_id, capability_id, ScoreParts(*parts))
            for pattern_id, capability_id, parts in ranked
        ],
        [
            FilteredCandidate(capability_id, pattern_id, rule, detail, ScoreParts(*parts))
            for pattern_id, capability_id, rule, detail, parts in filtered
        ],
    )
