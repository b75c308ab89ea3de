"""Data flow between a plan's parts (docs/ranking.md, Plans, "Links" and "Order"): the
identifiers a pattern's steps produce and take, the links from each input to an earlier output,
and the order the parts run in."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from pml_server.domain.model import PatternView, PlanLink
from pml_server.ranking.plans._words import _singular, name_words

_ID_INPUT = re.compile(r"^(?P<stem>[a-z0-9_]*?)_?(?:id|ids|key|uuid|ref|handle|token)$")
_SCALAR = frozenset({"string", "integer", "number", ""})


def _input_types(pattern: PatternView) -> dict[str, str]:
    """Each parameter's JSON type, by its bare lower-case name (`$PERSON_ID` -> `person_id`)."""
    types = {p.name.lstrip("$").lower(): p.json_type for p in pattern.params}
    try:
        schema = json.loads(pattern.parameter_schema_json or "{}")
    except ValueError:
        schema = {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    if isinstance(props, dict):
        for key, spec in props.items():
            kind = spec.get("type", "") if isinstance(spec, dict) else ""
            types.setdefault(key.lstrip("$").lower(), kind if isinstance(kind, str) else "")
    return types


def _stem_words(name: str) -> frozenset[str] | None:
    """The words of an identifier name's stem (`person_id`, `personId` -> {person}); None for a
    name that is no identifier."""
    m = _ID_INPUT.match("_".join(name_words(name.lstrip("$"))))  # (`movieId` -> movie_id)
    if m is None:
        return None
    return frozenset(_singular(w) for w in m.group("stem").split("_") if w)


def _has_steps(pattern: PatternView) -> bool:
    return len(pattern.steps) == len(pattern.tools_used) > 0


def outputs(pattern: PatternView, steps: Sequence[int] | None = None) -> dict[str, frozenset[str]]:
    """The identifiers the steps (`steps`; every step when None) of a pattern produce, each with
    the words of its noun. Learned from the pattern's data flow (`Pattern.steps`): an argument
    of a later step fed by a reference to a step's output names what that step produces
    (`get_person_movie_credit({person_id: r1.results[0].id})` -> `search_people` produces
    `person_id`). And named after the tool: every tail of its name's words after the verb
    (`search_people` -> `person_id`, `people_id`). A tool's result is a scalar or a record
    holding one, so an output fits scalar inputs only."""
    out: dict[str, frozenset[str]] = {}
    chosen = range(len(pattern.tools_used)) if steps is None else steps
    if _has_steps(pattern):
        for later in pattern.steps:
            for arg in later.arguments:
                words = _stem_words(arg.name)
                if arg.kind == "reference" and words and any(s in chosen for s, _ in arg.sources):
                    out.setdefault(arg.name.lower(), words)
    for n in chosen:
        tool_words_ = [_singular(w) for w in name_words(pattern.tools_used[n])][1:]
        for first in range(len(tool_words_)):
            noun = tool_words_[first:]
            out.setdefault("_".join(noun) + "_id", frozenset(noun))
    return out


def identifier_inputs(
    pattern: PatternView, steps: Sequence[int] | None = None
) -> dict[str, tuple[frozenset[str], str]]:
    """The inputs that look produced by a tool (names ending in id, key, token, ...), each with
    the words of its stem and its JSON type. With the pattern's data flow (`Pattern.steps`):
    the arguments of the steps (`steps`; every step when None) that take a parameter, by the
    argument's name, typed by the parameter's schema; without it, the pattern's parameters."""
    types = _input_types(pattern)
    found = {}
    if _has_steps(pattern):
        chosen = range(len(pattern.steps)) if steps is None else steps
        for n in chosen:
            for arg in pattern.steps[n].arguments:
                stem = _stem_words(arg.name)
                if arg.kind != "parameter" or stem is None:
                    continue
                kinds = [types.get(p.lstrip("$").lower(), "") for p in arg.parameters]
                # several parameters in one argument: an array or object literal, no scalar
                found[arg.name.lower()] = (stem, kinds[0] if len(kinds) == 1 else "composite")
        return found
    for name, kind in types.items():
        stem = _stem_words(name)
        if stem is not None:
            found[name] = (stem, kind)
    return found


def compatible(output_words: frozenset[str], input_stem: frozenset[str], input_type: str) -> bool:
    """An output fits an input when the input's stem names the output's noun (its words are
    all among the output's) and the input takes a scalar."""
    return bool(input_stem) and input_stem <= output_words and input_type in _SCALAR


def link_parts(
    patterns: Sequence[PatternView], steps: Sequence[Sequence[int]] | None = None
) -> tuple[tuple[PlanLink, ...], int]:
    """The links between parts (each identifier input to the nearest earlier part producing
    a compatible output from the steps it runs) and how many identifier inputs stay
    unlinked."""
    links = []
    unlinked = 0
    produced = [outputs(p, None if steps is None else steps[n]) for n, p in enumerate(patterns)]
    for j, pattern in enumerate(patterns):
        taken = identifier_inputs(pattern, None if steps is None else steps[j])
        for name, (stem, kind) in sorted(taken.items()):
            found = None
            for i in range(j - 1, -1, -1):
                for output, words in sorted(produced[i].items()):
                    if compatible(words, stem, kind):
                        found = PlanLink(i, output, j, name)
                        break
                if found is not None:
                    break
            if found is None:
                if j > 0:
                    unlinked += 1
            else:
                links.append(found)
    return tuple(links), unlinked


def _feeds(
    produced: dict[str, frozenset[str]], taken: dict[str, tuple[frozenset[str], str]]
) -> set[str]:
    """The inputs of `taken` some output of `produced` fits, its noun being exactly the
    input's stem (`search_people` feeds `person_id`; `get_person_movie_credit`, whose
    nouns merely include "person", does not)."""
    return {
        name
        for name, (stem, kind) in taken.items()
        if any(compatible(words, stem, kind) and words == stem for words in produced.values())
    }


def data_flow_order(
    patterns: Sequence[PatternView], steps: Sequence[Sequence[int]]
) -> tuple[int, ...]:
    """The order a plan's parts run in (docs/ranking.md, Plans, "Order"): the request's order
    of mention (the parts' given order), except that a part whose identifier input only a
    part mentioned after it produces runs after that part (its data flows from it); an input
    an earlier part already produces, or two parts feeding each other, keep the order of
    mention (`_feeds`: an output whose noun is exactly the input's stem). A stable topological
    order: the earliest-mentioned part whose producers have run goes next."""
    count = len(patterns)
    produced = [outputs(p, steps[n]) for n, p in enumerate(patterns)]
    taken = [identifier_inputs(p, steps[n]) for n, p in enumerate(patterns)]
    after: list[set[int]] = [set() for _ in range(count)]  # after[j]: parts j must follow
    for j in range(count):
        fed_before = set().union(*(_feeds(produced[i], taken[j]) for i in range(j)))
        for i in range(j + 1, count):
            needed = _feeds(produced[i], taken[j]) - fed_before
            if needed and not _feeds(produced[j], taken[i]):
                after[j].add(i)
    order: list[int] = []
    left = list(range(count))
    while left:
        ready = next((n for n in left if after[n] <= set(order)), left[0])
        order.append(ready)
        left.remove(ready)
    return tuple(order)
