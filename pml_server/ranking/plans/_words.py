"""Word analysis for the plans: a text's words and content words, a tool name's words, and
whether a request states the order of its steps (docs/ranking.md, Plans, "Which capability
covers which part"; Steps, "Order of the steps")."""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z0-9]+")
# words that ask rather than say what to do: a piece made of them ("Can you help me?") is
# no part of its own
_FILLER_WORDS = """i im i'm me my mine you your we us our can could would will shall should please
    help assist need want like looking hi hello hey thanks thank with that this these those it
    its is
    are am be was were do does did a an the to for of in on at and or so some any there here
    what how also just now then really very ok okay sure know let tell give m s re ve
    ll d t"""
_FILLER = frozenset(_FILLER_WORDS.split())
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
_IRREGULAR = {"people": "person", "children": "child", "men": "man", "women": "woman"}


def _singular(word: str) -> str:
    if word in _IRREGULAR:
        return _IRREGULAR[word]
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


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


_NAME_SEPARATORS = re.compile(r"[_\-:./\s]+")
_NAME_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")


def name_words(name: str) -> list[str]:
    """An identifier's words in order, lower case: split at `_ - : . /` and, in ASCII, where
    the case turns (`getWeatherForecast` -> get, weather, forecast; `HTTPRequest` -> http,
    request), a digit kept with the letters before it (`vo2_max` -> vo2, max; `ai2sql`
    whole). Tool names come in every convention (snake_case, camelCase, kebab-case, dotted
    `server.tool`); a request names their words. (The lexical index cuts names for its own
    terms, digits apart: `ranking.lexical.tokenize`.)"""
    words: list[str] = []
    for piece in _NAME_SEPARATORS.split(name):
        parts = _NAME_CAMEL.findall(piece) if piece.isascii() else [piece]
        words += [w.lower() for w in parts if w]
    return words


def tool_words(tool: str) -> frozenset[str]:
    """The stems of a tool name's words (`name_words`), generic ones (get, info, data, ...)
    left out."""
    return frozenset(_stem(w) for w in name_words(tool) if w not in _GENERIC)


def content_words(text: str) -> frozenset[str]:
    """The stems of a text's content words: filler ("can you help me") and generic words
    (get, info, data, ...) left out, and words of fewer than 3 letters."""
    return frozenset(
        _stem(w)
        for w in _WORD.findall(text.lower())
        if len(w) > 2 and w not in _FILLER and w not in _GENERIC
    )
