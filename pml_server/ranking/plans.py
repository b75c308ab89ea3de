"""Plans: when no stored capability covers a request, compose one from 2 to 4 of them
(docs/ranking.md, Plans).

Pure decisions, no I/O: `split_request` cuts a request into its parts (clauses, in order);
the service retrieves a few candidates per part (`PartHit`s, each with its match on that part);
`compose` searches the assignments of parts to capabilities with a beam of stated width and
returns the plans that beat the best single capability under the same formula. Its cost is
bounded by `search_bound` whatever the store holds (docs/ranking.md, Plans, "Bound").
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from pml_server.domain.model import (
    PatternView,
    Plan,
    PlanLink,
    PlanPart,
    PlanScore,
    Suggestion,
)
from pml_server.domain.vectors import Matrix, Vector

# ---- the formula's constants and the search's bounds (docs/ranking.md, Plans) ----------------
MAX_REQUEST_PARTS = 6  # a longer request is cut into at most this many parts
WHOLE_HITS = 5  # the whole request's suggestions scored on each part
COVER_HITS = 3  # ... the first of them the cover test and the best single capability read
WHOLE_INTENTS = 32  # ... each scored by at most this many of its intents
WHOLE_COVER = 0.3  # ... one of them covers the request when its match on every part reaches this
# Part vectors pooled from the request's own model run (docs/ranking.md, Plans, "Part vectors")
PART_CONTEXT = 0.8  # share of the request's mean token state taken off a part's mean
WHOLE_COVER_POOLED = 0.2  # WHOLE_COVER for pooled part vectors
MIN_PLAN_TOTAL_POOLED = 0.42  # with pooled part vectors, a plan's total must exceed this
PART_HITS = 5  # candidates retrieved per request part (the second retrieval's k)
BEAM_WIDTH = 8  # partial plans kept after each request part
MIN_PLAN_PARTS = 2
MAX_PLAN_PARTS = 4
MAX_PLAN_SIZE = 10  # SuggestRequest.plan_size's bound
DEFAULT_PLAN_SIZE = 3
COVER_MATCH = 0.5  # a capability covers a request part when its match on it is at least this
PLAN_MARGIN = 0.05  # a plan's total must exceed the best single capability's by more than this
EXTRA_PART_COST = 0.03  # per part beyond the first
UNLINKED_INPUT_COST = 0.01  # per identifier input no earlier part produces
MIN_PART_WORDS = 2  # a piece with fewer content words joins its neighbour
# words that ask rather than say what to do: a piece made of them ("Can you help me?") is
# no part of its own
_FILLER_WORDS = """i im i'm me my mine you your we us our can could would will shall should please
    help assist need want like looking hi hello hey thanks thank with that this these those it
    its is
    are am be was were do does did a an the to for of in on at and or so some any there here
    what how also just now then really very ok okay sure know let tell give m s re ve
    ll d t"""
_FILLER = frozenset(_FILLER_WORDS.split())
PREFIX_MIN = 4  # a text word naming a tool word it begins with (or is the start of)
NAMED_SHARE = 0.6  # a step is named by a text holding this share of its tool name's words
STEP_WEIGHT = 0.8  # share of a part's match that comes from its steps being named
_GENERIC = frozenset(
    [
        "get",
        "set",
        "info",
        "information",
        "data",
        "detail",
        "by",
        "for",
        "of",
        "the",
        "a",
        "an",
        "to",
        "in",
        "on",
        "and",
        "with",
        "from",
    ]
)


def search_bound(parts: int, hits: int = PART_HITS, beam: int = BEAM_WIDTH) -> int:
    """The most partial plans `compose` scores for `parts` request parts: after each part,
    every kept partial plan (at most `beam`) grows in at most `hits + 2` ways (extend its last
    part, start a new part with one of the part's hits, or leave the request part uncovered)."""
    return min(parts, MAX_REQUEST_PARTS) * beam * (hits + 2)


# ---- the request's parts ---------------------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
_CONNECTIVE = re.compile(
    r"(?:^|,\s*|\s+)(?:and\s+)?(?:then|after\s+that|afterwards|additionally|also|finally|"
    r"in\s+addition|moreover|furthermore|lastly|next)\b[,:]?\s+",
    re.IGNORECASE,
)
# a piece that only says more about the one before ("The file is ...", "To do this, ...")
_CONTINUES = re.compile(
    r"(?:the|this|these|that|those|it|its|they|their|he|she|his|her|such|which|here|"
    r"to\s+do\s+(?:this|so)|for\s+this|make\s+sure|ensure|including)\b",
    re.IGNORECASE,
)
INTRO_WEIGHT = 0.1  # an opening statement's weight in the coverage
DETAIL_WEIGHT = 0.5  # a detail sentence's
_WANTS = re.compile(
    r"(?:i|we)(?:\s+would|'d|\s+also|\s+will)?\s+(?:like|want|need|wish|am interested|"
    r"'m interested)",
    re.IGNORECASE,
)
_INTRO = re.compile(r"(?:i|i'm|i am|we|we're|as an?|my|our)\b", re.IGNORECASE)
_ASKS = re.compile(
    r"(?:please|kindly|can you|could you|would you|will you|first|firstly|to start|"
    r"retrieve|get|find|fetch|check|provide|calculate|search|look up|tell me|show me)\b",
    re.IGNORECASE,
)
_AND = re.compile(r",?\s+and\s+", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z0-9]+")


def _words(text: str) -> int:
    """How many content words `text` holds (filler such as "can you help me" left out)."""
    return sum(w not in _FILLER for w in _WORD.findall(text.lower()))


# words that ask for what an earlier sentence asked ("Please provide the requested data"): a
# sentence adding no more than `RESTATE_NEW_WORDS` other content words restates the one before
_ECHO_WORDS = """retrieve provide perform report give show tell fetch find obtain share let
    know inform confirm requested result results"""
RESTATE_NEW_WORDS = 1
RESTATE_JOINS = True


def _restates(piece: str, before: str) -> bool:
    """The sentence only asks again for what the one before asked: besides asking words
    (provide, retrieve, report, ...) it holds at most `RESTATE_NEW_WORDS` content words the
    sentence before does not ("Could you retrieve data on this topic?" after "I'm interested
    in modern historical anthropology")."""
    new = content_words(piece) - content_words(before) - content_words(_ECHO_WORDS)
    return len(new) <= RESTATE_NEW_WORDS


def split_request_weighted(text: str) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The request's parts and their weights (`split_request_spans`)."""
    parts, weights, _ = split_request_spans(text)
    return parts, weights


def split_request_spans(
    text: str,
) -> tuple[tuple[str, ...], tuple[float, ...], tuple[tuple[int, int], ...]]:
    """The request cut into its parts, in order: sentences, then connectives ("then",
    "additionally", "finally", ...); a request that is one clause is cut at its one " and " when
    both sides hold more than 3 content words. Pieces shorter than `MIN_PART_WORDS` words join
    the piece before (the first piece joins the next), and so does a sentence that only goes on
    about the one before ("The file is ...", "To do this, ..."); more than `MAX_REQUEST_PARTS`
    pieces are joined pairwise (the shortest adjacent pair first) until that many are left.

    With each part's weight in the coverage (docs/ranking.md, Plans, "Request parts"): an
    opening statement ("I am working on a research project.") before a part that asks
    ("Please ...", "First, ...") weighs `INTRO_WEIGHT`, a later sentence that neither follows a
    connective nor asks nor says what is wanted weighs `DETAIL_WEIGHT`, every other part 1.
    And with each part's characters in `text`, `[start, end)` (a joined part spans from its
    first piece's start to its last piece's end; what lay between, a connective, included)."""
    pieces: list[tuple[str, bool]] = []  # (clause, begins at a connective)
    for sentence in _SENTENCE.split(text.strip()):
        clauses = _CONNECTIVE.split(sentence)
        pieces += [(c, n > 0) for n, c in enumerate(clauses)]
    if len(pieces) == 1:
        halves = _AND.split(pieces[0][0])
        if len(halves) == 2 and all(_words(h) > 3 for h in halves):
            pieces = [(h, True) for h in halves]
    parts: list[str] = []
    starts: list[bool] = []
    spans: list[tuple[int, int]] = []
    at = 0  # every piece is a substring of `text`, found in order
    for piece, connected in ((p.strip(" ,;."), c) for p, c in pieces):
        if not piece:
            continue
        begin = text.find(piece, at)
        begin = at if begin < 0 else begin
        at = begin + len(piece)
        if parts and (
            _words(piece) < MIN_PART_WORDS
            or _words(parts[-1]) < MIN_PART_WORDS
            or (not connected and _CONTINUES.match(piece) is not None)
            or (not connected and RESTATE_JOINS and _restates(piece, parts[-1]))
        ):
            parts[-1] = f"{parts[-1]} {piece}"
            spans[-1] = (spans[-1][0], at)
        else:
            parts.append(piece)
            starts.append(connected)
            spans.append((begin, at))
    while len(parts) > MAX_REQUEST_PARTS:
        n = min(range(len(parts) - 1), key=lambda i: _words(parts[i]) + _words(parts[i + 1]))
        parts[n : n + 2] = [f"{parts[n]} {parts[n + 1]}"]
        starts[n : n + 2] = [starts[n]]
        spans[n : n + 2] = [(spans[n][0], spans[n + 1][1])]
    weights = [
        1.0 if n == 0 or starts[n] or _ASKS.match(p) or _WANTS.match(p) else DETAIL_WEIGHT
        for n, p in enumerate(parts)
    ]
    if len(parts) >= 3 and _INTRO.match(parts[0]) and _ASKS.match(parts[1]) and not starts[1]:
        weights[0] = INTRO_WEIGHT
    return tuple(parts), tuple(weights), tuple(spans)


def split_request(text: str) -> tuple[str, ...]:
    """The request's parts (`split_request_weighted`)."""
    return split_request_weighted(text)[0]


def pooled_part_vectors(mean: Vector, spans: Matrix) -> Matrix:
    """The parts' vectors from the request's one model run (docs/ranking.md, Plans, "Part
    vectors"): each part's mean token state less `PART_CONTEXT` x the request's mean token
    state (the context every token of the request shares), normalized. A zero row stays zero
    (unusable: that part gets no hits)."""
    rows = spans - np.float32(PART_CONTEXT) * mean[None, :]
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: Matrix = np.where(norms > 0, rows / np.where(norms > 0, norms, 1.0), 0.0).astype(
        np.float32
    )
    return out


# ---- which steps of a pattern a request part names ------------------------------------------


def _stem(word: str) -> str:
    return _singular(word)[:6]


def text_words(text: str) -> frozenset[str]:
    """The stems of a text's words (lower case, singular, first six letters)."""
    return frozenset(text_words_in_order(text))


def text_words_in_order(text: str) -> tuple[str, ...]:
    """`text_words`, each once, in the order the text first uses them (the step factor's order
    fit reads where a tool is named: docs/ranking.md, Steps, "Order of the steps")."""
    stems = (_stem(w) for w in _WORD.findall(text.lower()) if w not in _GENERIC)
    return tuple(dict.fromkeys(stems))


# words by which a request states the order of its steps (docs/ranking.md, Steps, "Order of
# the steps"): "find the lyrics and then translate them", "after that", "followed by"
_STATES_ORDER = re.compile(
    r"\b(?:then|after\s+(?:that|this|which)|afterwards|followed\s+by|subsequently|once\s+"
    r"(?:that|this|you)|finally|lastly)\b|(?:^|[.;,]\s*)(?:first|next)\b",
    re.IGNORECASE,
)


def states_order(text: str) -> bool:
    """The request states in which order its steps run ("then", "after that", "first", ...)."""
    return _STATES_ORDER.search(text) is not None


def tool_words(tool: str) -> frozenset[str]:
    """The stems of a tool name's words, generic ones (get, info, data, ...) left out."""
    words = [w for w in tool.lower().split("_") if w and w not in _GENERIC]
    return frozenset(_stem(w) for w in words)


def _names(word: str, words: frozenset[str]) -> bool:
    """A text names a tool's word when it holds it, or a word it begins (of at least
    `PREFIX_MIN` letters: "speedup" names "speed")."""
    if word in words:
        return True
    if len(word) < PREFIX_MIN:
        return False
    return any(w.startswith(word) or (len(w) >= PREFIX_MIN and word.startswith(w)) for w in words)


def step_match(tool: str, words: frozenset[str]) -> float:
    """Share of a tool name's words the text names, 0..1."""
    own = tool_words(tool)
    return sum(_names(w, words) for w in own) / len(own) if own else 0.0


def named_steps(
    tools: Sequence[str],
    words: frozenset[str],
    content: frozenset[str] = frozenset(),
    descriptions: dict[str, frozenset[str]] | None = None,
) -> tuple[int, ...]:
    """The steps (indexes into `tools`) whose tool the text names best: every tool that shares
    at least `NAMED_SHARE` of its words with the text. When none is named, a one-step pattern
    keeps its step; a longer one keeps the step whose description (`descriptions`, the text's
    content words `content`: `described`) fits the text best, when that fit reaches
    `DESCRIBED_NAMES`, and none otherwise (the part then has no step a plan can run)."""
    named = tuple(
        n
        for n, t in enumerate(tools)
        if step_match(t, words) >= NAMED_SHARE and t not in tools[:n]  # a tool runs once
    )
    if named or len(tools) == 1:
        return named or (0,)
    if not descriptions or not content or not tools:
        return ()
    fits = [described(t, content, descriptions) for t in tools]
    best = max(range(len(tools)), key=lambda i: fits[i])
    return (best,) if fits[best] >= DESCRIBED_NAMES else ()


def _steps_factor(tools: Sequence[str], words: frozenset[str]) -> float:
    """1 - STEP_WEIGHT + STEP_WEIGHT x the best named share of a step (a part naming a step
    of the pattern keeps its whole match), for a one-step pattern as for a longer one: its
    match on a part that names its tool no more than another step's (docs/ranking.md, Plans,
    "Which capability covers which part")."""
    best = max((step_match(t, words) for t in tools), default=0.0)
    return 1.0 - STEP_WEIGHT + STEP_WEIGHT * best


SUPPORT_WEIGHT = 0.4  # share of a part's match from how many of its hits run the step


def _attribution(tools: Sequence[str], words: frozenset[str]) -> list[float]:
    """The share of a pattern's match each of its steps takes on a text (named steps more)."""
    if len(tools) == 1:
        return [1.0]
    shares = [step_match(t, words) for t in tools]
    return [1.0 - STEP_WEIGHT + STEP_WEIGHT * s for s in shares]


def _tool_support(hits: Sequence[PartHit], words: frozenset[str]) -> dict[str, float]:
    """How much of a part's hits speaks for each tool: the sum over the hits running it of
    the hit's match times the tool's share of it (docs/ranking.md, Plans)."""
    out: dict[str, float] = {}
    for hit in hits:
        tools = hit.suggestion.pattern.tools_used
        for t, a in zip(tools, _attribution(tools, words), strict=True):
            if hit.match >= COVER_MATCH:
                out[t] = out.get(t, 0.0) + hit.match * a
    return out


def _support_factor(
    tools: Sequence[str], words: frozenset[str], support: dict[str, float]
) -> float:
    """1 - SUPPORT_WEIGHT + SUPPORT_WEIGHT x the support of the pattern's best attributed step
    relative to the part's best supported tool."""
    if not support:
        return 1.0
    top = max(support.values())
    atts = _attribution(tools, words)
    best = max(range(len(tools)), key=lambda i: (atts[i], support.get(tools[i], 0.0)))
    return 1.0 - SUPPORT_WEIGHT + SUPPORT_WEIGHT * support.get(tools[best], 0.0) / top


# ---- what the stored intents say about each step (docs/ranking.md, Plans, "Step descriptions")

DESCRIBED_WEIGHT = 0.3  # share of a part's match from how well its step's description fits it
DESCRIBED_NAMES = 0.4  # a step no tool name names runs when its description fits this share
DESCRIBED_INTENTS = 8  # a pattern's first intents read for its steps' descriptions
DESCRIBED_VALUE_CHARS = 3  # a step's literal values shorter than this locate nothing
_DESCRIPTIONS_KEPT = 4096  # patterns whose step descriptions are kept between requests
_LITERAL = re.compile(
    r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'|(?<![\w$.])(\d+(?:\.\d+)?)(?!\w)"
)


def content_words(text: str) -> frozenset[str]:
    """The stems of a text's content words: filler ("can you help me") and generic words
    (get, info, data, ...) left out, and words of fewer than 3 letters."""
    return frozenset(
        _stem(w)
        for w in _WORD.findall(text.lower())
        if len(w) > 2 and w not in _FILLER and w not in _GENERIC
    )


def _step_values(code: str, tools: Sequence[str]) -> list[set[str]]:
    """Each step's literal values (strings and numbers of at least `DESCRIBED_VALUE_CHARS`
    characters, lower case) read from the code lines that call its tool."""
    lines = code.splitlines()
    out: list[set[str]] = []
    for tool in tools:
        call = re.compile(rf"\b{re.escape(tool)}\s*\(")
        values: set[str] = set()
        for line in lines:
            found = call.search(line)
            if found is None:
                continue
            for m in _LITERAL.finditer(line[found.end() :]):
                value = (m.group(1) or m.group(2) or m.group(3) or "").strip().lower()
                if len(value) >= DESCRIBED_VALUE_CHARS:
                    values.add(value)
        out.append(values)
    return out


def step_descriptions(pattern: PatternView) -> tuple[frozenset[str], ...]:
    """What the pattern's stored intents say about each of its steps (docs/ranking.md, Plans,
    "Step descriptions"): each of its first `DESCRIBED_INTENTS` intents is cut into parts
    (`split_request`); a part holding literal values of a step's call (the step whose values
    it holds most) describes that step, a part holding none describes the step whose tool it
    names (at least `NAMED_SHARE`), if any. A step's description is the content words of the
    parts describing it. Kept for later requests, by what it is read from (code, tools and the
    intents read)."""
    intents = tuple(i.text for i in pattern.intents[:DESCRIBED_INTENTS])
    return _step_descriptions(pattern.original_code, tuple(pattern.tools_used), intents)


@lru_cache(maxsize=_DESCRIPTIONS_KEPT)
def _step_descriptions(
    code: str, tools: tuple[str, ...], intents: tuple[str, ...]
) -> tuple[frozenset[str], ...]:
    values = _step_values(code, tools)
    words: list[set[str]] = [set() for _ in tools]
    for text in intents:
        for part in split_request(text):
            low = part.lower()
            held = [sum(v in low for v in vs) for vs in values]
            best = max(range(len(tools)), key=lambda i: held[i], default=-1)
            if best < 0:
                continue
            if held[best] == 0:
                named = [step_match(t, text_words(part)) for t in tools]
                best = max(range(len(tools)), key=lambda i: named[i])
                if named[best] < NAMED_SHARE:
                    continue
            words[best] |= content_words(part)
    return tuple(frozenset(w) for w in words)


def tool_descriptions(hits: Sequence[Sequence[PartHit]]) -> dict[str, frozenset[str]]:
    """Each tool's description: the union of its step descriptions over the patterns `hits`
    holds (`step_descriptions`)."""
    out: dict[str, frozenset[str]] = {}
    for found in hits:
        for hit in found:
            pattern = hit.suggestion.pattern
            for tool, words in zip(pattern.tools_used, step_descriptions(pattern), strict=True):
                out[tool] = out.get(tool, frozenset()) | words
    return out


def described(tool: str, words: frozenset[str], descriptions: dict[str, frozenset[str]]) -> float:
    """Share of a part's content words (`words`) the tool's description holds, 0..1."""
    if not words:
        return 0.0
    return len(words & descriptions.get(tool, frozenset())) / len(words)


def _described_factor(
    tools: Sequence[str],
    words: frozenset[str],
    content: frozenset[str],
    support: dict[str, float],
    descriptions: dict[str, frozenset[str]],
) -> float:
    """1 - DESCRIBED_WEIGHT + DESCRIBED_WEIGHT x how well the description of the pattern's
    best attributed step fits the part, relative to the best fitting tool of the part's hits
    (1 when no description fits the part at all)."""
    atts = _attribution(tools, words)
    best = max(range(len(tools)), key=lambda i: (atts[i], support.get(tools[i], 0.0)))
    own = described(tools[best], content, descriptions)
    top = max([own, *(described(t, content, descriptions) for t in support)])
    if top <= 0:
        return 1.0
    return 1.0 - DESCRIBED_WEIGHT + DESCRIBED_WEIGHT * own / top


# ---- links between parts ---------------------------------------------------------------------

_ID_INPUT = re.compile(r"^(?P<stem>[a-z0-9_]*?)_?(?:id|ids|key|uuid|ref|handle|token)$")
_SCALAR = frozenset({"string", "integer", "number", ""})
_IRREGULAR = {"people": "person", "children": "child", "men": "man", "women": "woman"}


def _singular(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


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
    """The words of an identifier name's stem (`person_id` -> {person}); None for a name that
    is no identifier."""
    m = _ID_INPUT.match(name.lstrip("$").lower())
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
        tool_words_ = [_singular(w) for w in pattern.tools_used[n].lower().split("_") if w][1:]
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


# ---- the search ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartHit:
    """A capability retrieved for one request part, with its match on that part."""

    suggestion: Suggestion
    match: float


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
