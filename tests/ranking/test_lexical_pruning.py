"""The core's pruned BM25 top-k (MaxScore, `pml_core_rs/src/lexical/prune.rs`) against an
exhaustive scoring, on random corpora big enough for the pruning to run (below a few hundred
postings the core scans everything anyway): skewed vocabularies so some terms are in almost
every document and others in a handful, many identical documents (exact score ties cut by doc
id at the limit), and limits from 1 to beyond the number of matching documents.

Two exhaustive references: the core's own scan of every posting (`exhaustive=True`, the same
f64 operations in the same order, so the pruned scores must have the same bits) and a
plain-Python BM25 one document at a time (same ids in the same order, scores equal to within
rounding)."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server import _core

K1, B = 1.2, 0.75


def python_top(docs: dict[str, list[str]], query: list[str], limit: int) -> list[tuple[str, float]]:
    """Every document scored, term by term in the query's order (first occurrences only)."""
    if limit <= 0 or not docs:
        return []
    avg = sum(len(t) for t in docs.values()) / len(docs) or 1.0
    counts = {d: {w: t.count(w) for w in set(t)} for d, t in docs.items()}
    scores: dict[str, float] = {}
    for term in dict.fromkeys(query):
        having = {d: c[term] for d, c in counts.items() if term in c}
        if not having:
            continue
        idf = math.log1p((len(docs) - len(having) + 0.5) / (len(having) + 0.5))
        for doc_id, tf in having.items():
            norm = K1 * (1.0 - B) + K1 * B / avg * len(docs[doc_id])
            scores[doc_id] = scores.get(doc_id, 0.0) + idf * (K1 + 1.0) * tf / (tf + norm)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]


def skewed_corpus(seed: int, n_docs: int, vocabulary: int, templates: int) -> dict[str, list[str]]:
    """`n_docs` documents over a Zipf-like vocabulary; documents reuse one of `templates` term
    lists, so many share every term and length (exact ties), some get a rare word of their own."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocabulary)]
    weights = [1.0 / (rank + 1) for rank in range(vocabulary)]
    shapes = [rng.choices(words, weights, k=rng.randint(1, 8)) for _ in range(templates)]
    docs: dict[str, list[str]] = {}
    for _ in range(n_docs):
        terms = list(rng.choice(shapes))
        if rng.random() < 0.2:
            terms.append(f"rare{rng.randint(0, 40)}")
        docs[f"d{rng.randint(0, 10 * n_docs):06d}"] = terms
    return docs


def bits(hits: list[tuple[str, float]]) -> list[tuple[str, str]]:
    return [(doc_id, score.hex()) for doc_id, score in hits]


@settings(max_examples=100, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_docs=st.integers(300, 1500),
    vocabulary=st.integers(3, 40),
    templates=st.integers(1, 60),
    query=st.lists(st.integers(0, 45), min_size=1, max_size=7),
    limits=st.lists(st.integers(1, 2000), min_size=1, max_size=4),
)
def test_pruned_top_k_equals_exhaustive_scoring(
    seed: int, n_docs: int, vocabulary: int, templates: int, query: list[int], limits: list[int]
) -> None:
    docs = skewed_corpus(seed, n_docs, vocabulary, templates)
    index = _core.LexicalIndex(K1, B)
    for doc_id, terms in docs.items():
        index.add(doc_id, terms)
    # mostly vocabulary words (common ones first in the Zipf order), some rare, some absent
    terms = [f"w{q}" if q < 40 else f"rare{q}" for q in query]
    for limit in [*limits, 1, 2, len(docs) + 5]:
        pruned = index.search(terms, limit)
        assert bits(pruned) == bits(index.search(terms, limit, exhaustive=True))
        want = python_top(docs, terms, limit)
        assert [d for d, _ in pruned] == [d for d, _ in want]
        for (_, got), (_, expected) in zip(pruned, want, strict=True):
            assert math.isclose(got, expected, rel_tol=1e-12)
