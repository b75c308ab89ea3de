"""The Rust-backed `LexicalIndex` against two references, through random sequences of add,
add_terms, remove_terms and remove: a plain-Python BM25 computed one document at a time, and
the former numpy index (same float64 operations in the same order, so the same bits)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pml_server import _core
from pml_server.ranking.lexical import LexicalIndex, tokenize
from testing.lexical_numpy_reference import NumpyLexicalIndex

WORDS = ("read", "json", "file", "parse", "csv", "send", "email", "disk", "read_file", "data")
KINDS = ("add", "add_terms", "remove_terms", "remove")


def counted(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for term in tokenize(text):
        counts[term] = counts.get(term, 0) + 1
    return counts


def reference_search(
    docs: dict[str, dict[str, int]], query: str, limit: int
) -> list[tuple[str, float]]:
    """BM25 one document at a time over term counts, ties by doc id."""
    k1, b = 1.2, 0.75
    if limit <= 0 or not docs:
        return []
    avg = sum(sum(c.values()) for c in docs.values()) / len(docs) or 1.0
    scores: dict[str, float] = {}
    for term in dict.fromkeys(tokenize(query)):
        having = {d: c[term] for d, c in docs.items() if term in c}
        if not having:
            continue
        idf = math.log1p((len(docs) - len(having) + 0.5) / (len(having) + 0.5))
        for doc_id, tf in having.items():
            norm = k1 * (1.0 - b) + k1 * b / avg * sum(docs[doc_id].values())
            scores[doc_id] = scores.get(doc_id, 0.0) + idf * (k1 + 1.0) * tf / (tf + norm)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:limit]


def apply_to_reference(docs: dict[str, dict[str, int]], kind: str, doc_id: str, text: str) -> None:
    if kind == "add":
        docs[doc_id] = counted(text)
    elif kind == "add_terms":
        held = docs.setdefault(doc_id, {})
        for term, tf in counted(text).items():
            held[term] = held.get(term, 0) + tf
    elif kind == "remove_terms" and doc_id in docs:
        held = docs[doc_id]
        for term, tf in counted(text).items():
            left = held.get(term, 0) - tf
            if left > 0:
                held[term] = left
            else:
                held.pop(term, None)
        if not held:
            del docs[doc_id]
    elif kind == "remove":
        docs.pop(doc_id, None)


text = st.lists(st.sampled_from(WORDS), max_size=6).map(" ".join)
operation = st.tuples(st.sampled_from(KINDS), st.integers(0, 9), text)


@settings(max_examples=200, deadline=None)
@given(st.lists(operation, max_size=40), st.lists(text, min_size=1, max_size=3), st.integers(0, 8))
def test_any_update_sequence_searches_like_both_references(
    ops: list[tuple[str, int, str]], queries: list[str], limit: int
) -> None:
    index, numpy_index = LexicalIndex(), NumpyLexicalIndex()
    docs: dict[str, dict[str, int]] = {}
    for kind, n, body in ops:
        doc_id = f"d{n}"
        getattr(index, kind)(doc_id, *([body] if kind != "remove" else []))
        getattr(numpy_index, kind)(doc_id, *([body] if kind != "remove" else []))
        apply_to_reference(docs, kind, doc_id, body)
        assert len(index) == len(docs)
        assert all(doc_id in index for doc_id in docs)
        for query in queries:
            got = index.search(query, limit)
            assert got == numpy_index.search(query, limit)  # same ids, same order, same bits
            want = reference_search(docs, query, limit)
            assert [d for d, _ in got] == [d for d, _ in want]
            for (_, a), (_, b) in zip(got, want, strict=True):
                assert math.isclose(a, b, rel_tol=1e-12)


def test_many_equal_scores_are_cut_by_doc_id() -> None:
    index = LexicalIndex()
    for i in range(500):
        index.add(f"doc{i}", f"read the json file from disk batch{i}")
    # every other document shares exactly the same terms with the query: one big tie
    hits = index.search("read the json file from disk batch123 quickly", 10)
    assert hits[0][0] == "doc123"
    tied = [d for d, _ in hits[1:]]
    assert tied == sorted(f"doc{i}" for i in range(500) if i != 123)[:9]
    assert len({s for _, s in hits[1:]}) == 1


def test_core_index_names_the_bad_argument() -> None:
    with pytest.raises(_core.CoreArgumentError, match="`k1`"):
        _core.LexicalIndex(k1=float("nan"))
    with pytest.raises(_core.CoreArgumentError, match="`b`"):
        _core.LexicalIndex(b=2.0)
    core = _core.LexicalIndex()
    with pytest.raises(_core.CoreArgumentError, match="`doc_id`"):
        core.add("", ["x"])
    with pytest.raises(_core.CoreArgumentError, match="`terms`"):
        core.add("d", "not a list")  # type: ignore[arg-type]
    with pytest.raises(_core.CoreArgumentError, match="`terms`"):
        core.search([1, 2], 3)  # type: ignore[list-item]
    with pytest.raises(_core.CoreArgumentError, match="`limit`"):
        core.search(["x"], -1)
    assert len(core) == 0
    assert 5 not in core
