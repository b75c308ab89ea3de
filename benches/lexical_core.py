"""Old (numpy) vs new (Rust) `LexicalIndex`: CPU time of building a 10k-document index with
`add_terms` (as the engine does: tools, then the intent) and of Suggest-shaped searches, in one
run so the ratio holds on a loaded machine. Also checks that both return the same hits.

Then the Rust search with pruning (the default) against the same index scanning every posting
(`exhaustive=True`, the search before pruning), at each of `--sizes` documents, for two query
shapes: Suggest-shaped (one rare word among common ones) and common words only (little to
prune). Both must return the same hits and score bits.

    .venv/bin/python -m benches.lexical_core [--docs 10000] [--queries 2000] [--limit 40]
        [--sizes 10000,100000]

The numpy index is the former implementation, kept as a test reference in
`tests/ranking/lexical_numpy_reference.py`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

from benches.service_workload import intent_text, query_text, tools_for
from pml_server import _core
from pml_server.ranking.lexical import LexicalIndex, tokenize
from tests.ranking.lexical_numpy_reference import NumpyLexicalIndex

Index = LexicalIndex | NumpyLexicalIndex


def cpu(step: Callable[[], object]) -> float:
    start = time.process_time()
    step()
    return time.process_time() - start


def build(index: Index, docs: int) -> None:
    for i in range(docs):
        index.add_terms(f"p{i}", " ".join(tools_for(i)))
        index.add_terms(f"p{i}", intent_text(i))


def search_all(index: Index, queries: list[str], limit: int) -> list[list[tuple[str, float]]]:
    return [index.search(q, limit) for q in queries]


def common_words_query(j: int) -> str:
    """An intent without its unique last word: every term is in thousands of documents."""
    return intent_text(j * 7 + 3).rsplit(" ", 1)[0]


def search_terms(
    core: _core.LexicalIndex, term_lists: list[list[str]], limit: int, *, exhaustive: bool
) -> None:
    for terms in term_lists:
        core.search(terms, limit, exhaustive=exhaustive)


def compare_pruning(docs: int, queries: int, limit: int, rounds: int) -> None:
    index = LexicalIndex()
    build(index, docs)
    core = index._core  # the term lists as `LexicalIndex.search` passes them, minus tokenizing
    shapes = {
        "suggest": [list(set(tokenize(query_text(j)))) for j in range(queries)],
        "common words": [list(set(tokenize(common_words_query(j)))) for j in range(queries)],
    }
    for shape, term_lists in shapes.items():
        for terms in term_lists[:200]:
            assert core.search(terms, limit) == core.search(terms, limit, exhaustive=True), terms
        for round_ in range(rounds):  # alternate so a neighbour's burst hits both
            t_old = cpu(partial(search_terms, core, term_lists, limit, exhaustive=True))
            t_new = cpu(partial(search_terms, core, term_lists, limit, exhaustive=False))
            print(
                f"{docs} docs, {shape} queries, limit {limit}, round {round_}: exhaustive"
                f" {t_old / queries * 1e6:.0f} us, pruned {t_new / queries * 1e6:.0f} us"
                f" CPU per query, ratio exhaustive/pruned {t_old / t_new:.2f}x"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="10000,100000", help="index sizes for the pruning")
    args = parser.parse_args()
    queries = [query_text(j) for j in range(args.queries)]
    old, new = NumpyLexicalIndex(), LexicalIndex()
    build_old, build_new = cpu(lambda: build(old, args.docs)), cpu(lambda: build(new, args.docs))
    assert search_all(old, queries[:200], args.limit) == search_all(new, queries[:200], args.limit)
    print(f"{args.docs} documents, {args.queries} queries, limit {args.limit} (CPU seconds)")
    per_add = 2 * args.docs
    print(
        f"add_terms: numpy {build_old / per_add * 1e6:.1f} us, rust {build_new / per_add * 1e6:.1f}"
        f" us per call, ratio old/new {build_old / build_new:.2f}x"
    )
    for round_ in range(args.rounds):  # alternate so a neighbour's burst hits both
        t_old = cpu(lambda: search_all(old, queries, args.limit))
        t_new = cpu(lambda: search_all(new, queries, args.limit))
        print(
            f"search round {round_}: numpy {t_old / args.queries * 1e6:.0f} us,"
            f" rust {t_new / args.queries * 1e6:.0f} us per query,"
            f" ratio old/new {t_old / t_new:.2f}x"
        )
    for size in (int(n) for n in args.sizes.split(",") if n):
        compare_pruning(size, min(args.queries, 500), args.limit, args.rounds)


if __name__ == "__main__":
    main()
