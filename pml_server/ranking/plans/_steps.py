"""Which steps of a pattern a request part names, and what the stored intents say about each
step (docs/ranking.md, Plans, "Which capability covers which part" and "Step descriptions"): the
factors a part's match on a hit is weighed by."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Sequence

from pml_server.domain.lru import ENTRY_BYTES, Lru
from pml_server.domain.model import PatternView
from pml_server.ranking.plans._parts import COVER_MATCH, PartHit, split_request
from pml_server.ranking.plans._words import content_words, text_words, tool_words

PREFIX_MIN = 4  # a text word naming a tool word it begins with (or is the start of)
NAMED_SHARE = 0.6  # a step is named by a text holding this share of its tool name's words
STEP_WEIGHT = 0.8  # share of a part's match that comes from its steps being named


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
# Step descriptions kept between requests, by the estimated bytes of what they are read from
# and hold: a pattern's code (up to 256 KiB) and intents are the clients', and 4,096 patterns
# counted by entries could keep a gigabyte of code alive (docs/operations.md, "Limits,
# keepalive and shutdown").
_DESCRIPTIONS_BYTES = 32 * 1024 * 1024
_LITERAL = re.compile(
    r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'|(?<![\w$.])(\d+(?:\.\d+)?)(?!\w)"
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
    key = (pattern.original_code, tuple(pattern.tools_used), intents)
    with _descriptions_lock:
        found = _descriptions.get(key)
    if found is None:
        found = _step_descriptions(*key)
        with _descriptions_lock:
            _descriptions.put(key, found)
    return found


_DescriptionKey = tuple[str, tuple[str, ...], tuple[str, ...]]


def _description_bytes(key: _DescriptionKey, words: tuple[frozenset[str], ...]) -> int:
    """Every object an entry holds: its key's texts and tuples, each step's set and its words
    (counted in each set they are in), and its place in the LRU (docs/reliability.md, "Caches
    bounded in bytes"); the sets alone, 216 bytes each when empty, were uncounted."""
    code, tools, intents = key
    objects = (key, tools, intents, code, *tools, *intents, words, *words)
    held = sum(sys.getsizeof(o) for o in objects)
    return ENTRY_BYTES + held + sum(sys.getsizeof(w) for step in words for w in step)


_descriptions: Lru[_DescriptionKey, tuple[frozenset[str], ...]] = Lru(
    _DESCRIPTIONS_BYTES, weigh=_description_bytes
)
_descriptions_lock = threading.Lock()


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
