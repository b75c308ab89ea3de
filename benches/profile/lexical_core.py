"""Old (numpy) vs new (Rust) `LexicalIndex`: CPU time of building a 10k-document index with
`add_terms` (as the engine does: tools, then the intent) and of Suggest-shaped searches, in one
run so the ratio holds on a loaded machine. Also checks that both return the same hits.

Then the Rust search with pruning (the default) against the same index scanning every posting
(`exhaustive=True`, the search before pruning), at each of `--sizes` documents, for two query
shapes: Suggest-shaped (one rare word among common ones) and common words only (little to
prune). Both must return the same hits and score bits.

    .venv/bin/python -m benches.profile.lexical_core [--docs 10000] [--queries 2000] [--limit 40]
        [--sizes 10000,100000]

The numpy index is the former implementation, kept as a test reference in
`testing/lexical_numpy_reference.py`.

`--kinds SIZES` times instead the two kinds of Suggest query of the service bench at each size
(issue 20), on the Rust index alone, as the engine fills it (one `add_terms` per pattern: its
tools, then its intent; pattern ids drawn as the engine draws them): queries j < 1000, whose
`run{j}` number also matches the tool_N / step_N words of 2,000 documents, and queries
j >= 1000, whose rare words are each in one document. It prints p50 / p90 of
`search(terms, --limit)` for `--kind-queries` queries of each kind, the CPU time of an
`add_terms` and the resident memory the index added per document and per posting; then one
document in 50 is emptied and filled again (`remove_terms`, `add_terms`: numbers reused, lists
changed out of order), timed, and the queries timed again on the churned index. With
`--baseline PATH` (another build's `_core.abi3.so`, e.g. main's) the same index is built in
both builds and every query timed in both, alternately, in this process; their hits and score
bits must agree:

    .venv/bin/python -m benches.profile.lexical_core --kinds 10000,100000,1000000 \
        [--baseline ../main/pml_server/_core.abi3.so] [--kind-queries 300]
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import random
import statistics
import time
from collections.abc import Callable
from functools import partial

from benches.harness.service_harness import rss_bytes
from benches.harness.service_workload import intent_text, query_text, tools_for
from pml_server import _core
from pml_server.ranking.lexical import LexicalIndex, query_terms, tokenize
from testing.lexical_numpy_reference import NumpyLexicalIndex

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


def load_core(path: str, number: int = 0) -> object:
    """Another build's extension module, beside this one (its init function is `_core`'s)."""
    name = f"pml_baseline{number}._core"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kind_queries(first: int, count: int) -> list[list[str]]:
    """The query terms of Suggest queries first..first+count, as `LexicalIndex.search`."""
    return [query_terms(query_text(j)) for j in range(first, first + count)]


def percentiles(seconds: list[float]) -> str:
    ms = sorted(s * 1e3 for s in seconds)
    p90 = ms[min(len(ms) - 1, int(0.9 * len(ms)))]
    return f"p50 {statistics.median(ms):6.3f} ms  p90 {p90:6.3f} ms"


def compare_kinds(size: int, queries: int, limit: int, rounds: int, builds: dict) -> None:
    """Each build's index of `size` documents and its search times on the two query kinds."""
    draw = random.Random(20)
    ids = [f"pat_{draw.getrandbits(64):016x}" for _ in range(size)]
    docs = [tokenize(f"{' '.join(tools_for(i))} {intent_text(i)}") for i in range(size)]
    postings = sum(len(set(terms)) for terms in docs)
    kinds = {
        "j < 1000 (numbers shared with tools)": kind_queries(0, min(queries, 1000)),
        "j >= 1000 (rare words in one document)": kind_queries(1000, queries),
    }
    cores = {}
    for name, module in builds.items():
        before = rss_bytes(os.getpid())
        core = module.LexicalIndex(1.2, 0.75)
        start = time.process_time()
        for doc_id, terms in zip(ids, docs, strict=True):
            core.add_terms(doc_id, terms)
        spent = time.process_time() - start
        added = rss_bytes(os.getpid()) - before
        cores[name] = core
        print(
            f"{size} documents, {name}: add_terms {spent / size * 1e6:.2f} us CPU a document,"
            f" resident memory added {added / size:.0f} B a document,"
            f" {added / postings:.1f} B a posting ({postings / size:.1f} postings a document)"
        )
    time_kinds(cores, kinds, limit, rounds, "")
    # one document in 50 loses its terms and gets them back: the freed numbers are reused by
    # other documents, so old lists get entries out of order and entries removed
    churned = list(range(0, size, 50))
    for name, core in cores.items():
        start = time.process_time()
        for i in churned:
            core.remove_terms(ids[i], docs[i])
        removed = time.process_time()
        for i in churned:
            core.add_terms(ids[i], docs[i])
        spent = time.process_time() - removed
        print(
            f"  churn of {len(churned)} documents, {name}: remove_terms"
            f" {(removed - start) / len(churned) * 1e6:.2f} us, add_terms again"
            f" {spent / len(churned) * 1e6:.2f} us CPU a document"
        )
    time_kinds(cores, kinds, limit, rounds, " after the churn")
    del cores


def time_kinds(cores: dict, kinds: dict, limit: int, rounds: int, label: str) -> None:
    """Every build's search times on each kind of query; their hits must agree."""
    for kind, term_lists in kinds.items():
        first = next(iter(cores.values()))
        for terms in term_lists:
            want = first.search(terms, limit)
            for core in cores.values():
                assert core.search(terms, limit) == want, terms
        for terms in term_lists[:20]:
            assert first.search(terms, limit) == first.search(terms, limit, exhaustive=True)
        times: dict[str, list[float]] = {name: [] for name in cores}
        for _ in range(rounds):
            for terms in term_lists:  # alternate so a neighbour's burst hits every build
                for name, core in cores.items():
                    start = time.perf_counter()
                    core.search(terms, limit)
                    times[name].append(time.perf_counter() - start)
        for name, seconds in times.items():
            print(f"  {kind}{label}, limit {limit}, {name}: {percentiles(seconds)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="10000,100000", help="index sizes for the pruning")
    parser.add_argument("--kinds", default="", help="sizes for the two query kinds alone")
    parser.add_argument("--kind-queries", type=int, default=300)
    parser.add_argument(
        "--baseline", action="append", default=[], help="another build's _core.abi3.so (repeatable)"
    )
    args = parser.parse_args()
    if args.kinds:
        builds = {
            **{path: load_core(path, n) for n, path in enumerate(args.baseline)},
            "this build": _core,
        }
        for size in (int(n) for n in args.kinds.split(",") if n):
            compare_kinds(size, args.kind_queries, args.limit, args.rounds, builds)
        return
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
