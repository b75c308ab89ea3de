"""The plan search (docs/ranking.md, Plans): a beam over the assignments of request parts to
capabilities, each plan's total against the best single capability's, and the search's bound
("Bound")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pml_server.domain.model import Plan, PlanPart, PlanScore, Suggestion
from pml_server.ranking.plans._flow import data_flow_order, link_parts
from pml_server.ranking.plans._parts import COVER_MATCH, MAX_REQUEST_PARTS, PartHit
from pml_server.ranking.plans._steps import (
    _described_factor,
    _steps_factor,
    _support_factor,
    _tool_support,
    named_steps,
    step_match,
    tool_descriptions,
)
from pml_server.ranking.plans._words import content_words, text_words

# ---- the formula's constants and the search's bounds (docs/ranking.md, Plans) ----------------
WHOLE_HITS = 5  # the whole request's suggestions scored on each part
COVER_HITS = 3  # ... the first of them the cover test and the best single capability read
WHOLE_INTENTS = 32  # ... each scored by at most this many of its intents
WHOLE_COVER = 0.3  # ... one of them covers the request when its match on every part reaches this
# with part vectors pooled from the request's own model run (docs/ranking.md, Plans, "Part
# vectors")
WHOLE_COVER_POOLED = 0.2  # WHOLE_COVER for pooled part vectors
MIN_PLAN_TOTAL_POOLED = 0.42  # with pooled part vectors, a plan's total must exceed this
PART_HITS = 5  # candidates retrieved per request part (the second retrieval's k)
BEAM_WIDTH = 8  # partial plans kept after each request part
MIN_PLAN_PARTS = 2
MAX_PLAN_PARTS = 4
MAX_PLAN_SIZE = 10  # SuggestRequest.plan_size's bound
DEFAULT_PLAN_SIZE = 3
PLAN_MARGIN = 0.05  # a plan's total must exceed the best single capability's by more than this
EXTRA_PART_COST = 0.03  # per part beyond the first
UNLINKED_INPUT_COST = 0.01  # per identifier input no earlier part produces


def search_bound(parts: int, hits: int = PART_HITS, beam: int = BEAM_WIDTH) -> int:
    """The most partial plans `compose` scores for `parts` request parts: after each part,
    every kept partial plan (at most `beam`) grows in at most `hits + 2` ways (extend its last
    part, start a new part with one of the part's hits, or leave the request part uncovered)."""
    return min(parts, MAX_REQUEST_PARTS) * beam * (hits + 2)


# ---- the search ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _State:
    segments: tuple[tuple[str, tuple[int, ...]], ...]  # (capability id, request parts)


def _quality(
    segments: Sequence[tuple[str, tuple[int, ...]]],
    match: dict[tuple[str, int], float],
    reliability: dict[str, float],
    weights: Sequence[float],
) -> tuple[float, list[float], list[float]]:
    """coverage (the weighted share of request parts covered) x the mean over segments of
    match x reliability; with each segment's match and reliability."""
    covered = sum(weights[p] for _, ps in segments for p in ps)
    matches = [sum(match[(c, p)] for p in ps) / len(ps) for c, ps in segments]
    rels = [reliability[c] for c, _ in segments]
    if not segments:
        return 0.0, [], []
    mean = sum(m * r for m, r in zip(matches, rels, strict=True)) / len(segments)
    return covered / sum(weights) * mean, matches, rels


def _partial_total(
    state: _State,
    match: dict[tuple[str, int], float],
    rel: dict[str, float],
    weights: Sequence[float],
) -> float:
    value, _, _ = _quality(state.segments, match, rel, weights)
    return value - EXTRA_PART_COST * max(0, len(state.segments) - 1)


@dataclass(frozen=True)
class Composed:
    plans: tuple[Plan, ...]
    evaluated: int  # partial plans scored (never above `search_bound`)
    best_single: float
    covered_by_one: bool


def compose(
    request_parts: Sequence[str],
    hits: Sequence[Sequence[PartHit]],
    plan_size: int,
    *,
    part_hits: int = PART_HITS,
    beam: int = BEAM_WIDTH,
    weights: Sequence[float] | None = None,
    whole: Sequence[Sequence[PartHit]] = (),
    pooled: bool = False,
) -> Composed:
    """The best `plan_size` plans for a request cut into `request_parts`, `hits[n]` being the
    candidates retrieved for part n (best first; only the first `part_hits` are used), `weights`
    each part's weight in the coverage (`split_request_weighted`; 1 each when None), `whole[n]`
    the whole request's first suggestions (at most `WHOLE_HITS` read) with their semantic score
    on part n: one of the first `COVER_HITS` reaching `WHOLE_COVER` on every part covers the
    request, and those count for the best single capability (never as a plan's part).
    `pooled`: the parts' vectors were pooled from the request's model run
    (`pooled_part_vectors`), which the cover test and the plan's least total are set for
    (`WHOLE_COVER_POOLED`, `MIN_PLAN_TOTAL_POOLED`).
    None when one capability covers every part, or none beats the best single capability; a
    plan whose tools one of the whole request's first `WHOLE_HITS` suggestions all runs is never
    offered. A part's match on a hit is weighed by how well the stored intents describe the
    hit's step in the part's words (`step_descriptions`, docs/ranking.md, Plans)."""
    parts = min(len(request_parts), len(hits), MAX_REQUEST_PARTS)
    if parts < MIN_PLAN_PARTS or plan_size <= 0:
        return Composed((), 0, 0.0, False)
    weight = tuple(weights[:parts]) if weights is not None else (1.0,) * parts
    match: dict[tuple[str, int], float] = {}
    rel: dict[str, float] = {}
    shown: dict[str, Suggestion] = {}
    options: list[list[str]] = []
    words = [text_words(t) for t in request_parts[:parts]]
    descriptions = tool_descriptions([*(h[:part_hits] for h in hits[:parts]), *whole[:parts]])
    for n in range(parts):
        chosen: list[str] = []
        support = _tool_support(hits[n][:part_hits], words[n])
        content = content_words(request_parts[n])
        for hit in hits[n][:part_hits]:
            cap = hit.suggestion.capability_id
            if hit.match < COVER_MATCH or (cap, n) in match:
                continue
            tools = hit.suggestion.pattern.tools_used
            # a part starts only where it has a step to run
            if named_steps(tools, words[n], content, descriptions):
                chosen.append(cap)
            match[(cap, n)] = (
                hit.match
                * _steps_factor(tools, words[n])
                * _support_factor(tools, words[n], support)
                * _described_factor(tools, words[n], content, support, descriptions)
            )
            rel[cap] = hit.suggestion.score.reliability
            shown.setdefault(cap, hit.suggestion)
        options.append(chosen)
    # the whole request's suggestions, scored on each part: one that reaches `WHOLE_COVER` on
    # every part covers the request (it was retrieved for the whole of it)
    lowest: dict[str, list[float]] = {}
    for n, found in enumerate(whole[:parts]):
        for hit in found[:COVER_HITS]:
            cap = hit.suggestion.capability_id
            lowest.setdefault(cap, []).append(hit.match)
            if hit.match < COVER_MATCH or (cap, n) in match:
                continue
            tools = hit.suggestion.pattern.tools_used
            match[(cap, n)] = hit.match * _steps_factor(tools, words[n])
            rel[cap] = hit.suggestion.score.reliability
            shown.setdefault(cap, hit.suggestion)
    # the best single capability under the same formula (one segment over what it covers)
    best_single = 0.0
    cover = WHOLE_COVER_POOLED if pooled else WHOLE_COVER
    least = MIN_PLAN_TOTAL_POOLED if pooled else 0.0
    covered_by_one = any(len(ms) == parts and min(ms) >= cover for ms in lowest.values())
    for cap in shown:
        covers = tuple(n for n in range(parts) if (cap, n) in match)
        covered_by_one = covered_by_one or len(covers) == parts
        value, _, _ = _quality(((cap, covers),), match, rel, weight)
        best_single = max(best_single, value)
    if covered_by_one:
        return Composed((), 0, best_single, True)
    evaluated = 0
    beam_states = [_State(())]
    for n in range(parts):
        grown: dict[tuple[tuple[str, tuple[int, ...]], ...], _State] = {}
        for state in beam_states:
            used = {c for c, _ in state.segments}
            children = [state]  # part n left uncovered
            if state.segments and (state.segments[-1][0], n) in match:
                last_cap, last_parts = state.segments[-1]
                children.append(_State((*state.segments[:-1], (last_cap, (*last_parts, n)))))
            if len(state.segments) < MAX_PLAN_PARTS:
                for cap in options[n]:
                    if cap not in used:
                        children.append(_State((*state.segments, (cap, (n,)))))
            for child in children:
                evaluated += 1
                grown.setdefault(child.segments, child)
        beam_states = sorted(
            grown.values(), key=lambda s: (-_partial_total(s, match, rel, weight), s.segments)
        )[:beam]
    # the tools of the whole request's first suggestions: a plan whose every tool one of them
    # runs adds nothing to that suggestion (docs/ranking.md, Plans, "No plan")
    single_tools = [
        frozenset(hit.suggestion.pattern.tools_used)
        for found in whole[:parts]
        for hit in found[:WHOLE_HITS]
    ]
    plans = []
    for state in beam_states:
        if not MIN_PLAN_PARTS <= len(state.segments) <= MAX_PLAN_PARTS:
            continue
        plan = _plan(
            state, shown, match, rel, request_parts[:parts], weight, best_single, descriptions
        )
        if plan is None or plan.score.total <= max(best_single + PLAN_MARGIN, least):
            continue
        if not any(frozenset(plan.tools) <= tools for tools in single_tools):
            plans.append(plan)
    plans.sort(key=lambda p: -p.score.total)
    return Composed(tuple(plans[:plan_size]), evaluated, best_single, False)


def _plan_steps(
    segments: Sequence[tuple[str, tuple[int, ...]]],
    shown: dict[str, Suggestion],
    request_parts: Sequence[str],
    descriptions: dict[str, frozenset[str]] | None = None,
) -> list[tuple[int, ...]]:
    """Each segment's steps (`named_steps` over the text it covers); a tool two segments both
    run stays only in the one naming it best (the later on a tie), so a plan runs a tool once."""
    texts = [" ".join(request_parts[n] for n in ps) for _, ps in segments]
    words = [text_words(t) for t in texts]
    steps = [
        list(named_steps(shown[c].pattern.tools_used, w, content_words(t), descriptions))
        for (c, _), w, t in zip(segments, words, texts, strict=True)
    ]
    best: dict[str, tuple[float, int]] = {}
    for n, (cap, _) in enumerate(segments):
        tools = shown[cap].pattern.tools_used
        for step in steps[n]:
            share = step_match(tools[step], words[n])
            if tools[step] not in best or share >= best[tools[step]][0]:
                best[tools[step]] = (share, n)
    return [
        tuple(st for st in steps[n] if best[shown[cap].pattern.tools_used[st]][1] == n)
        for n, (cap, _) in enumerate(segments)
    ]


def _plan(
    state: _State,
    shown: dict[str, Suggestion],
    match: dict[tuple[str, int], float],
    rel: dict[str, float],
    request_parts: Sequence[str],
    weights: Sequence[float],
    best_single: float,
    descriptions: dict[str, frozenset[str]] | None = None,
) -> Plan | None:
    """The plan of a searched state, its parts left without a step dropped; None when fewer
    than `MIN_PLAN_PARTS` remain."""
    all_steps = _plan_steps(state.segments, shown, request_parts, descriptions)
    kept = [(seg, st) for seg, st in zip(state.segments, all_steps, strict=True) if st]
    if len(kept) < MIN_PLAN_PARTS:
        return None
    order = data_flow_order([shown[c].pattern for (c, _), _ in kept], [st for _, st in kept])
    segments = [kept[n][0] for n in order]
    steps = [kept[n][1] for n in order]
    value, matches, rels = _quality(segments, match, rel, weights)
    links, unlinked = link_parts([shown[c].pattern for c, _ in segments], steps)
    extra = EXTRA_PART_COST * (len(segments) - 1)
    unlinked_cost = UNLINKED_INPUT_COST * unlinked
    covered = sum(weights[p] for _, ps in segments for p in ps)
    score = PlanScore(
        coverage=covered / sum(weights),
        part_match=tuple(matches),
        part_reliability=tuple(rels),
        extra_part_cost=extra,
        unlinked_inputs=unlinked,
        unlinked_input_cost=unlinked_cost,
        total=value - extra - unlinked_cost,
        best_single=best_single,
    )
    return Plan(
        parts=tuple(
            PlanPart(shown[c], ps, st) for (c, ps), st in zip(segments, steps, strict=True)
        ),
        links=links,
        score=score,
        request_parts=tuple(request_parts),
    )
