"""The parts of a request in a language other than English (docs/ranking.md, Other languages,
"Request parts in other languages"). Pure decisions, no I/O.

`plans.split_request_spans` cuts an English request at its sentences and English connectives
("then", "also", ...). A request in another language is cut here, the same way, with the
marks and connectives of the languages the companion model reads:
- sentences end at `.`, `!`, `?` or `;` followed by a space, or at the full-width marks
  `。！？；` (Chinese and Japanese leave no space after them);
- a clause opening with a connective that adds a request ("puis", "außerdem", "además",
  "inoltre", "daarna", "ponadto", "ayrıca", "затем", ...: then, also, additionally, moreover,
  next, after that, finally) starts a part when it opens a sentence or follows a comma or the
  language's "and" ("und dann", "et puis"); inside a clause it cuts nothing ("me suggérer
  aussi ..."); in Chinese and Japanese, a clause after a comma opening with 再, 然后, 并, 同时,
  顺便, 另外, それから, そして, また, ...;
- a piece of fewer than `MIN_PART_WORDS` words joins the one before (the first joins the
  next); at most `MAX_REQUEST_PARTS` parts, the shortest adjacent pair joined first.

No cut at the language's "and" (the English splitter's rule for a request of one clause): in
these languages it joins the two things one step asks for as often as two requests ("logins and
passwords", "employment opportunities and affordable housing"), and it cost Russian requests
(docs/ranking.md). Every part weighs 1 in the coverage (the English splitter's weights read
English openings and questions).
"""

from __future__ import annotations

import re

from pml_server.ranking.plans import MAX_REQUEST_PARTS, MIN_PART_WORDS

# (not after a day's number: "am 5. April")
_SENTENCE = re.compile(r"(?<=[.!?;])(?<!\s\d\.)(?<!\s\d\d\.)\s+|(?<=[。！？；])\s*")

# connectives that open a clause adding a request, by language (lower case; a space stands for
# any run of spaces)
_CONNECTIVES: dict[str, tuple[str, ...]] = {
    "fr": (
        "puis",
        "ensuite",
        "après cela",
        "après ça",
        "de plus",
        "en outre",
        "également",
        "aussi",
        "enfin",
        "par ailleurs",
    ),
    "de": (
        "dann",
        "danach",
        "anschließend",
        "außerdem",
        "zusätzlich",
        "ferner",
        "schließlich",
        "zudem",
        "weiterhin",
    ),
    "es": (
        "luego",
        "después",
        "además",
        "también",
        "finalmente",
        "por último",
        "a continuación",
    ),
    "it": (
        "poi",
        "dopo",
        "inoltre",
        "infine",
        "successivamente",
        "in seguito",
    ),
    "pt": (
        "depois",
        "em seguida",
        "além disso",
        "também",
        "finalmente",
        "por fim",
    ),
    "nl": (
        "daarna",
        "vervolgens",
        "bovendien",
        "daarnaast",
        "verder",
        "tenslotte",
        "ten slotte",
    ),
    "pl": (
        "potem",
        "następnie",
        "ponadto",
        "dodatkowo",
        "również",
        "także",
        "na koniec",
        "wreszcie",
        "poza tym",
        "a potem",
        "a także",
    ),
    "tr": (
        "sonra",
        "ardından",
        "ayrıca",
        "daha sonra",
        "son olarak",
        "bunun yanı sıra",
    ),
    "ru": (
        "затем",
        "потом",
        "также",
        "кроме того",
        "после этого",
        "наконец",
        "\u0430 также",  # Cyrillic "a"
        "\u0430 затем",
    ),
    "ko": (
        "그리고",
        "그 다음",
        "그다음",
        "그런 다음",
        "그 후",
        "또한",
        "게다가",
        "다음으로",
        "마지막으로",
    ),
}
# Chinese and Japanese clause openers after a comma (then, and, at the same time, by the way,
# besides, also, moreover, next, finally)
_CJK_CONNECTIVES = (
    *("然后", "并且", "并", "同时", "顺便", "另外"),
    *("此外", "而且", "接着", "最后", "再", "还"),
    *("それから", "そして", "その後", "さらに", "また", "次に", "最後に"),
)
# "and" in these languages, which may come before a connective ("und dann", "et puis")
_AND = ("et", "und", "y", "e", "ed", "en", "i", "oraz", "ve", "и")


def _alternation(words: tuple[str, ...]) -> str:
    # longest first, so "par ailleurs" is taken whole
    ordered = sorted(set(words), key=len, reverse=True)
    return "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in ordered)


_CONNECTIVE = re.compile(
    r"(?:^|,\s*|\s+(?:"
    + "|".join(_AND)
    + r")\s+)(?:"
    + _alternation(tuple(w for ws in _CONNECTIVES.values() for w in ws))
    + r")(?![\w])[,:]?\s*",
    re.IGNORECASE,
)
_CJK_CONNECTIVE = re.compile(r"[，,、]\s*(?=(?:" + "|".join(_CJK_CONNECTIVES) + r"))")
_LETTERS = re.compile(r"[^\W\d_]{3,}")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def words(text: str) -> float:
    """How many words `text` holds for the splitter: runs of three letters or more, outside
    Chinese, Japanese and Korean script, plus half its characters in those scripts."""
    cjk = len(_CJK.findall(text))
    return len(_LETTERS.findall(_CJK.sub(" ", text))) + cjk / 2


def split_other_language(text: str) -> tuple[str, ...]:
    """The parts of a request in another language, in order (the module's rules)."""
    sentences = _SENTENCE.split(text.strip())
    pieces: list[str] = []
    for sentence in sentences:
        for clause in _CJK_CONNECTIVE.split(sentence):
            pieces += _CONNECTIVE.split(clause)
    parts: list[str] = []
    counts: list[float] = []  # each part's words, kept so that joining stays linear
    for piece in (p.strip(" ,;.，、；") for p in pieces):
        if not piece:
            continue
        count = words(piece)
        if parts and (count < MIN_PART_WORDS or counts[-1] < MIN_PART_WORDS):
            parts[-1] = f"{parts[-1]} {piece}"
            counts[-1] += count
        else:
            parts.append(piece)
            counts.append(count)
    while len(parts) > MAX_REQUEST_PARTS:
        n = min(range(len(parts) - 1), key=lambda i: counts[i] + counts[i + 1])
        parts[n : n + 2] = [f"{parts[n]} {parts[n + 1]}"]
        counts[n : n + 2] = [counts[n] + counts[n + 1]]
    return tuple(parts)
