"""BM25 (Okapi, Lucene's idf) over intent documents, with incremental add and remove.

The engine keeps one document per pattern: the texts of all its intent mappings plus its tool
names, grown and shrunk one intent at a time (`add_terms` / `remove_terms`). Library BM25
implementations (rank-bm25, bm25s) index a fixed corpus; captures and deletions arrive one at a
time, so the index changes in place. Tokenization (stemming, stop words, compound names) is
here; the inverted index and the scoring are in Rust (`pml_core_rs/src/lexical/`), which runs
searches in parallel without the GIL.
"""

from __future__ import annotations

import itertools
import re
import threading
from functools import lru_cache

import Stemmer

from pml_server import _core

_WORD = re.compile(r"[^\W_]+(?:[_\-:./][^\W_]+)*")
_SEPARATORS = re.compile(r"[_\-:./]")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# Han, kana and hangul: scripts written without spaces between words (Hangul with spaces
# between phrases, its particles attached), so `_WORD` takes a whole clause, and any Latin name
# inside it, as one token. Such a run gives its overlapping character pairs instead (Lucene's
# CJK bigrams), and the text between runs its own terms (docs/ranking.md, Lexical index).
_CJK = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f]+"
)
_STOP_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "for",
        "from",
        "get",
        "how",
        "i",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "please",
        "some",
        "that",
        "the",
        "their",
        "them",
        "then",
        "this",
        "to",
        "up",
        "us",
        "we",
        "what",
        "with",
        "you",
        "your",
    ]
)
# Snowball's English stemmer compiled (PyStemmer wraps the Snowball project's C library): about
# 0.9 us a word against 22 for the same algorithm generated as Python (snowballstemmer), on the
# dev set's 7,047 distinct words, with the same stem for every one of them (tested against
# snowballstemmer in tests/ranking/test_lexical.py). A capture's new words and a query's are
# stemmed on the request's path, so this is per-request CPU (docs/capture.md, Batches).
_stemmer = Stemmer.Stemmer("english")
_stemmer.maxCacheSize = 0  # `_stem` caches; two caches would only cost memory
_stem_lock = threading.Lock()  # a Stemmer object is not thread-safe (its own documentation)


# Words and tokens longer than this are split and stemmed every time, never cached: a request's
# text is the client's (a Suggest's intent, 4,096 characters), and one made of a single long
# made-up word each time kept about 12 KB in the two caches below, up to 670 MB once they were
# full. Within it, the caches hold at most about 35 MB (docs/operations.md, "Limits, keepalive
# and shutdown").
CACHED_WORD_CHARS = 64


def _stem(word: str) -> str:
    if len(word) > CACHED_WORD_CHARS:
        return _stem_word(word)
    return _cached_stem(word)


@lru_cache(maxsize=65_536)
def _cached_stem(word: str) -> str:
    return _stem_word(word)


def _stem_word(word: str) -> str:
    with _stem_lock:
        return str(_stemmer.stemWord(word))


def _split_camel(piece: str) -> list[str]:
    # camelCase only means something in ASCII identifiers; other scripts stay whole.
    return _CAMEL.findall(piece) if piece.isascii() else [piece]


def tokenize(text: str) -> list[str]:
    """Lower-cased, stemmed words without stop words. A compound name such as `read_file`,
    `gmail:send` or `parseCSV` yields its parts and also itself whole, so an exact tool name
    scores above the same words scattered."""
    return list(itertools.chain.from_iterable(map(_token_terms, _WORD.findall(text))))


def query_terms(text: str) -> list[str]:
    """A query's distinct terms in the order they first appear: the order BM25 sums their
    contributions in. A `set` would iterate in an order that changes with the process's hash
    seed, and with it the last bit of a sum, so equal-score ties could swap between restarts."""
    return list(dict.fromkeys(tokenize(text)))


def _token_terms(token: str) -> tuple[str, ...]:
    """The terms of one word-like token: the same words recur across intents (rebuilding the
    index of 100k intents at open spends a fifth of its time here), so each is split, lowered
    and stemmed once (up to `CACHED_WORD_CHARS` long). A token holding a `_CJK` run is split
    every time, its Latin pieces through this cache: its terms are a pair of characters each
    (63 for 64 characters, about 6 KB kept an entry: the full cache held 190 MB, not the 35 MB
    of docs/operations.md), and pairing characters costs no stemming."""
    if len(token) > CACHED_WORD_CHARS or (not token.isascii() and _CJK.search(token)):
        return _split_token(token)
    return _cached_token_terms(token)


@lru_cache(maxsize=32_768)
def _cached_token_terms(token: str) -> tuple[str, ...]:
    return _split_token(token)


def _split_token(token: str) -> tuple[str, ...]:
    if _CJK.search(token) is not None:
        return _split_cjk(token)
    terms: list[str] = []
    parts = [p for piece in _SEPARATORS.split(token) for p in _split_camel(piece)]
    for part in parts:
        word = part.lower()
        if word.isascii() and word.isdigit():
            # the stemmer leaves ASCII numbers unchanged (tested); skipping it keeps
            # numbers (ids, years, "batch123" pieces) out of the stem cache
            terms.append(word)
        elif word not in _STOP_WORDS:
            terms.append(_stem(word))
    if len(parts) > 1:
        terms.append(token.lower())
    return tuple(terms)


def _split_cjk(token: str) -> tuple[str, ...]:
    """A token holding runs of `_CJK`: each run's overlapping pairs of characters (a run of one,
    that character), and the terms of each piece between runs (`我想把它部署到Netlify上` ->
    我想, 想把, ..., 署到, netlifi, 上)."""
    terms: list[str] = []
    start = 0
    for run in _CJK.finditer(token):
        terms += _pieces_terms(token[start : run.start()])
        chars = run.group().lower()
        terms += [chars] if len(chars) == 1 else [chars[i : i + 2] for i in range(len(chars) - 1)]
        start = run.end()
    terms += _pieces_terms(token[start:])
    return tuple(terms)


def _pieces_terms(text: str) -> list[str]:
    return [t for piece in _WORD.findall(text) for t in _token_terms(piece)]


def _check_id(doc_id: str) -> None:
    if not isinstance(doc_id, str) or not doc_id:
        raise ValueError("doc_id must be a non-empty string")


class LexicalIndex:
    """Thread-safe BM25 index. `search` returns (doc_id, raw score), best first."""

    def __init__(self, k1: float = 1.2, b: float = 0.75) -> None:
        if not k1 >= 0 or not 0.0 <= b <= 1.0:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={k1!r}, b={b!r}")
        self._core = _core.LexicalIndex(k1, b)

    def __len__(self) -> int:
        return len(self._core)

    @property
    def core(self) -> _core.LexicalIndex:
        """The Rust index itself (for `ranking.table`, which searches it inside the core)."""
        return self._core

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._core

    def add(self, doc_id: str, text: str) -> None:
        """Index `text` under `doc_id`, replacing what that id held before."""
        _check_id(doc_id)
        self._core.add(doc_id, tokenize(text))

    def add_terms(self, doc_id: str, text: str) -> None:
        """Add the words of `text` to the document `doc_id` (created if new)."""
        _check_id(doc_id)
        self._core.add_terms(doc_id, tokenize(text))

    def remove_terms(self, doc_id: str, text: str) -> None:
        """Take the words of `text` (added before with `add_terms`) out of `doc_id`; the
        document disappears once it holds no term. Unknown ids and words do nothing."""
        if isinstance(doc_id, str):
            self._core.remove_terms(doc_id, tokenize(text))

    def remove(self, doc_id: str) -> None:
        """Forget `doc_id`; removing an unknown id does nothing (deletions may be replayed)."""
        if isinstance(doc_id, str):
            self._core.remove(doc_id)

    def renumber(self, order: list[str]) -> None:
        """Number the documents in `order` first, in that order (searches walk documents in
        number order: related ones numbered together are read from nearby memory); answers
        do not change."""
        self._core.renumber(order)

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """The `limit` best documents for `query` with their raw BM25 scores (> 0), best first;
        ties broken by doc id so results are deterministic (scores summed over `query_terms`)."""
        if limit <= 0:
            return []
        return self._core.search(query_terms(query), limit)

    def search_among(self, query: str, limit: int, allowed: list[str]) -> list[tuple[str, float]]:
        """`search` among the `allowed` documents alone (docs/ranking.md, Context filters)."""
        if limit <= 0 or not allowed:
            return []
        return self._core.search_among(query_terms(query), limit, allowed)
