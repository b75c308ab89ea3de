"""`LexicalIndex.search` scores postings with numpy; it must give exactly what BM25 computed one
document at a time gives (the plain-Python reference below), ties broken by doc id, through
any sequence of adds, replacements and removals."""

from __future__ import annotations

import heapq
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server.ranking.lexical import LexicalIndex, tokenize

WORDS = ("read", "json", "file", "parse", "csv", "send", "email", "boss", "disk", "load", "data")


def reference_search(docs: dict[str, str], query: str, limit: int) -> list[tuple[str, float]]:
    k1, b = 1.2, 0.75
    terms_of = {doc_id: tokenize(text) for doc_id, text in docs.items()}
    if limit <= 0 or not docs:
        return []
    avg = sum(len(t) for t in terms_of.values()) / len(docs) or 1.0
    scores: dict[str, float] = {}
    for term in dict.fromkeys(tokenize(query)):
        having = {d: t.count(term) for d, t in terms_of.items() if term in t}
        if not having:
            continue
        idf = math.log1p((len(docs) - len(having) + 0.5) / (len(having) + 0.5))
        gain = idf * (k1 + 1.0)
        for doc_id, tf in having.items():
            norm = k1 * (1.0 - b) + k1 * b / avg * len(terms_of[doc_id])
            scores[doc_id] = scores.get(doc_id, 0.0) + gain * tf / (tf + norm)
    return heapq.nsmallest(limit, scores.items(), key=lambda item: (-item[1], item[0]))


text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)
operation = st.tuples(st.sampled_from(("add", "remove")), st.integers(0, 12), text)


@settings(max_examples=150, deadline=None)
@given(st.lists(operation, max_size=40), text, st.integers(0, 8))
def test_search_matches_reference_bm25(
    ops: list[tuple[str, int, str]], query: str, limit: int
) -> None:
    index = LexicalIndex()
    docs: dict[str, str] = {}
    for kind, n, body in ops:
        doc_id = f"d{n}"
        if kind == "add":
            index.add(doc_id, body)
            docs[doc_id] = body
        else:
            index.remove(doc_id)
            docs.pop(doc_id, None)
        # searching between changes exercises the cached per-term arrays going stale
        got = index.search(query, limit)
        want = reference_search(docs, query, limit)
        assert [d for d, _ in got] == [d for d, _ in want]
        for (_, a), (_, b) in zip(got, want, strict=True):
            assert math.isclose(a, b, rel_tol=1e-12)
