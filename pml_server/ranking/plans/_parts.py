"""The request's parts (docs/ranking.md, Plans, "Request parts"): cutting a request into
weighted parts with their spans, the parts' vectors pooled from the request's one model run
("Part vectors"), and `PartHit`, a capability retrieved for one part."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from pml_server.domain.model import Suggestion
from pml_server.domain.vectors import Matrix, Vector
from pml_server.ranking.plans._words import _FILLER, _WORD, content_words

MAX_REQUEST_PARTS = 6  # a longer request is cut into at most this many parts
MIN_PART_WORDS = 2  # a piece with fewer content words joins its neighbour
COVER_MATCH = 0.5  # a capability covers a request part when its match on it is at least this
# Part vectors pooled from the request's own model run (docs/ranking.md, Plans, "Part vectors")
PART_CONTEXT = 0.8  # share of the request's mean token state taken off a part's mean


@dataclass(frozen=True)
class PartHit:
    """A capability retrieved for one request part, with its match on that part."""

    suggestion: Suggestion
    match: float


# A whitespace run is matched from its start only (`(?<!\s)`, `(?<![\s,])`): a match can
# only begin there, and trying every position inside the run read the run again each time
# (quadratic: a 4,096-character intent of spaces took 3 s to split).
_SENTENCE = re.compile(r"(?<=[.!?;])\s+")
_CONNECTIVE = re.compile(
    r"(?:^|,\s*|(?<!\s)\s+)(?:and\s+)?(?:then|after\s+that|afterwards|additionally|also|finally|"
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
_AND = re.compile(r"(?:,|(?<![\s,]))\s+and\s+", re.IGNORECASE)


def _words(text: str) -> int:
    """How many content words `text` holds (filler such as "can you help me" left out)."""
    return sum(w not in _FILLER for w in _WORD.findall(text.lower()))


# words that ask for what an earlier sentence asked ("Please provide the requested data"): a
# sentence adding no more than `RESTATE_NEW_WORDS` other content words restates the one before
_ECHO_WORDS = """retrieve provide perform report give show tell fetch find obtain share let
    know inform confirm requested result results"""
RESTATE_NEW_WORDS = 1
RESTATE_JOINS = True


_ECHO = content_words(_ECHO_WORDS)


def _restates(piece: str, before: set[str]) -> bool:
    """The sentence only asks again for what the one before asked: besides asking words
    (provide, retrieve, report, ...) it holds at most `RESTATE_NEW_WORDS` content words the
    sentence before (whose `content_words` are `before`) does not ("Could you retrieve data on
    this topic?" after "I'm interested in modern historical anthropology")."""
    new = content_words(piece) - before - _ECHO
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
    first piece's start to its last piece's end; what lay between, a connective, included).

    Each piece's words are counted once: a part's count and content words are kept as pieces
    join it, so the cost is linear in the request (re-reading a growing part made a 4,096-
    character request of 340 short sentences cost 0.4 s)."""
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
    counts: list[int] = []  # each part's `_words`
    stems: list[set[str]] = []  # each part's `content_words`
    at = 0  # every piece is a substring of `text`, found in order
    for piece, connected in ((p.strip(" ,;."), c) for p, c in pieces):
        if not piece:
            continue
        begin = text.find(piece, at)
        begin = at if begin < 0 else begin
        at = begin + len(piece)
        count = _words(piece)
        if parts and (
            count < MIN_PART_WORDS
            or counts[-1] < MIN_PART_WORDS
            or (not connected and _CONTINUES.match(piece) is not None)
            or (not connected and RESTATE_JOINS and _restates(piece, stems[-1]))
        ):
            parts[-1] = f"{parts[-1]} {piece}"
            spans[-1] = (spans[-1][0], at)
            counts[-1] += count
            stems[-1].update(content_words(piece))
        else:
            parts.append(piece)
            starts.append(connected)
            spans.append((begin, at))
            counts.append(count)
            stems.append(set(content_words(piece)))
    if len(parts) > MAX_REQUEST_PARTS:
        # joined pairwise, shortest first, over the pieces' own text (one join at the end)
        pieces_of = [[p] for p in parts]
        while len(pieces_of) > MAX_REQUEST_PARTS:
            n = min(range(len(counts) - 1), key=lambda i: counts[i] + counts[i + 1])
            pieces_of[n : n + 2] = [pieces_of[n] + pieces_of[n + 1]]
            counts[n : n + 2] = [counts[n] + counts[n + 1]]
            starts[n : n + 2] = [starts[n]]
            spans[n : n + 2] = [(spans[n][0], spans[n + 1][1])]
        parts = [" ".join(p) for p in pieces_of]
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
