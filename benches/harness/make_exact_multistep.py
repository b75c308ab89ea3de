"""The "exact" multi-step queries (benches/README.md, "Exact multi-step queries"): held-apart
multi-tool requests whose exact tool sequence some stored execution has.

The multistep set (../shared/devset/multistep, Seal-Tools) cannot give them: every one of its
executions has its own tool sequence (its README, "No exact queries"), so none recurs. They
are built from the dev set (../shared/devset, MetaTool + NESTFUL), deterministically:

- every dev-set query with two or more tools (already held apart by the dev set's generator,
  whose group keeps at least one execution);
- plus, from every multi-tool group that still holds at least `MIN_LEFT + 1` executions, the
  one execution with the lowest sha1("exact:" + id), moved out of the store into the queries.

The store is the dev set's executions without the moved ones. The TF-IDF baseline is the dev
set's (intents only; each group ranked by its best execution; ties by group id).

    python -m benches.harness.make_exact_multistep OUT_DIR

writes executions.jsonl, queries.jsonl and stats.json (byte-identical across runs).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from benches.harness import devset

MIN_LEFT = 2  # a group keeps at least this many executions after one is moved out
_TOKEN = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class ExactQuery:
    id: str
    intent: str
    expected_group: str
    expected_tools: tuple[str, ...]
    origin: str  # "devset-query" or "held-apart-execution"


def build() -> tuple[list[devset.DevExecution], list[ExactQuery]]:
    """The store's executions and the exact queries, both sorted by id."""
    executions, queries = devset.load()
    by_group: dict[str, list[devset.DevExecution]] = defaultdict(list)
    for e in executions:
        by_group[e.group].append(e)
    moved = set()
    for members in by_group.values():
        if len(members[0].tools) >= 2 and len(members) >= MIN_LEFT + 1:
            key = min(members, key=lambda e: hashlib.sha1(f"exact:{e.id}".encode()).hexdigest())
            moved.add(key.id)
    exact = [
        ExactQuery(q.id, q.intent, q.group, q.tools, "devset-query")
        for q in queries
        if q.multi_tool
    ]
    exact += [
        ExactQuery(e.id, e.intent, e.group, e.tools, "held-apart-execution")
        for e in executions
        if e.id in moved
    ]
    store = sorted((e for e in executions if e.id not in moved), key=lambda e: e.id)
    return store, sorted(exact, key=lambda q: q.id)


def _vector(text: str, idf: dict[str, float]) -> dict[str, float]:
    counts = Counter(_TOKEN.findall(text.lower()))
    v = {t: (1 + math.log(c)) * idf.get(t, 0.0) for t, c in counts.items()}
    norm = math.sqrt(sum(x * x for x in v.values())) or 1.0
    return {t: x / norm for t, x in v.items()}


def tfidf_baseline(store: list[devset.DevExecution], queries: list[ExactQuery]) -> dict[str, float]:
    """hit@1, hit@5 and MRR of TF-IDF over the execution intents (the dev set's baseline)."""
    df: Counter[str] = Counter()
    for e in store:
        df.update(set(_TOKEN.findall(e.intent.lower())))
    n = len(store)
    idf = {t: math.log((1 + n) / (1 + d)) + 1 for t, d in df.items()}
    vectors = [(_vector(e.intent, idf), e.group) for e in store]
    hit1 = hit5 = rr = 0.0
    for q in queries:
        qv = _vector(q.intent, idf)
        best: dict[str, float] = {}
        for ev, group in vectors:
            score = sum(x * ev.get(t, 0.0) for t, x in qv.items())
            best[group] = max(best.get(group, 0.0), score)
        ranked = sorted(best, key=lambda g: (-best[g], g))
        rank = ranked.index(q.expected_group) + 1 if q.expected_group in best else 0
        hit1 += rank == 1
        hit5 += 0 < rank <= 5
        rr += 1 / rank if rank else 0.0
    m = len(queries)
    return {"hit@1": hit1 / m, "hit@5": hit5 / m, "mrr": rr / m}


def main(out: Path) -> None:
    store, queries = build()
    out.mkdir(parents=True, exist_ok=True)
    with (out / "executions.jsonl").open("w") as f:
        for e in store:
            f.write(json.dumps(asdict(e) | {"tools": list(e.tools)}) + "\n")
    with (out / "queries.jsonl").open("w") as f:
        for q in queries:
            f.write(json.dumps(asdict(q) | {"expected_tools": list(q.expected_tools)}) + "\n")
    stats = {
        "executions": len(store),
        "queries": len(queries),
        "queries_by_origin": dict(sorted(Counter(q.origin for q in queries).items())),
        "query_lengths": dict(sorted(Counter(len(q.expected_tools) for q in queries).items())),
        "tfidf": {k: round(v, 4) for k, v in tfidf_baseline(store, queries).items()},
    }
    (out / "stats.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
    print(json.dumps(stats, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
