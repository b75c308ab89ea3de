"""Suggest asked as a user asks it, by its text, and the misses read (docs/ranking.md, Steps).

`multi_misses` replays the step signals over cached candidates asked with a client vector, so
a request gets no parts (no model run on the server). This asks an in-process engine (MiniLM,
RocksDB, `fast` durability; default ranking settings but for the `k=v` arguments, e.g.
`step_order_weight=0`) every query by its text, so the request's parts, its coverage and its
order fit weigh in as served; the executions are recorded with the bench cache's MiniLM
vectors (benches/harness/quality_vectors.py).

    .venv/bin/python -m benches.calibrate.served_misses [dev|skewed|exact] [--show N] [k=v ...]

`dev`: the dev set's 923 queries; `skewed`: its skewed variant's 4,149; `exact`: the exact
multi-step queries (benches/harness/make_exact_multistep.py, 212) against the store they
leave. Printed: hit@1 and MRR by slice (`tune` / `check` by `quality_devset.split_of`;
multi- and single-tool; for `exact`, NESTFUL and MetaTool), and with `--show N` the first N
multi-tool misses, each with its first candidates' tools and score parts. About 15 s for `dev`
and `exact`, 80 s for `skewed`; a diagnostic, it changes nothing.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from benches.bench_plans import split_of
from benches.harness import devset, make_exact_multistep
from benches.harness.fill import record_all
from benches.harness.quality_engine import open_engine
from benches.harness.quality_vectors import vectors
from pml_server.domain.model import ScoreParts, SuggestQuery
from pml_server.ranking.config import default_ranking

TENANT = "bench"
K = 5


@dataclass(frozen=True)
class Query:
    id: str
    intent: str
    group: str
    multi: bool


@dataclass
class Answer:
    query: Query
    groups: list[str]  # the suggestions' groups, best first
    candidates: list[tuple[str, ScoreParts]]  # (group, parts) of every scored candidate


def _queries(which: str) -> tuple[list[devset.DevExecution], list[Query]]:
    if which == "exact":
        store, exact = make_exact_multistep.build()
        return store, [Query(q.id, q.intent, q.expected_group, True) for q in exact]
    executions, queries = devset.load("skewed" if which == "skewed" else "default")
    return executions, [Query(q.id, q.intent, q.group, q.multi_tool) for q in queries]


def ask(which: str, changed: dict[str, float]) -> tuple[list[Answer], dict[str, tuple[str, ...]]]:
    """Every query's answer, and each group's tools."""
    executions, queries = _queries(which)
    rows = vectors("minilm", [e.intent for e in executions])
    records = [devset.as_record(i, e, rows[i]) for i, e in enumerate(executions)]
    tools = {e.group: tuple(e.tools) for e in executions}
    ranking = replace(default_ranking("minilm"), **changed)
    answers = []
    with tempfile.TemporaryDirectory(prefix="pml-served-misses-") as tmp:
        engine = open_engine(Path(tmp), "minilm", ranking)
        try:
            votes: dict[str, Counter[str]] = defaultdict(Counter)
            done = record_all(engine, TENANT, len(records), records.__getitem__, threads=1)
            for e, result in zip(executions, done, strict=True):
                votes[result.capability_id][e.group] += 1
            group = {cap: c.most_common(1)[0][0] for cap, c in votes.items()}
            for q in queries:
                r = engine.suggest(TENANT, SuggestQuery(q.intent, k=K, explain=True, plan_size=0))
                groups = list(dict.fromkeys(group[s.capability_id] for s in r.suggestions))
                scored = [(group[s.capability_id], s.score) for s in r.suggestions]
                scored += [(group[f.capability_id], f.score) for f in r.filtered if f.score]
                answers.append(Answer(q, groups, scored))
        finally:
            engine.close()
    return answers, tools


def _rank(a: Answer) -> int:
    return a.groups.index(a.query.group) + 1 if a.query.group in a.groups[:K] else 0


def report(which: str, answers: Sequence[Answer]) -> None:
    slices: dict[str, list[Answer]] = defaultdict(list)
    for a in answers:
        slices["all"].append(a)
        slices[split_of(a.query.id)].append(a)
        slices["multi-tool" if a.query.multi else "single-tool"].append(a)
        if which == "exact":
            slices[a.query.id.split("-")[0]].append(a)
    for name, chosen in slices.items():
        ranks = [_rank(a) for a in chosen]
        hits = sum(r == 1 for r in ranks)
        mrr = sum(1 / r for r in ranks if r) / len(ranks)
        share = hits / len(ranks)
        print(f"{name}: {len(ranks)} queries, hit@1 {share:.4f} ({hits}), MRR {mrr:.4f}")


def show(answers: Sequence[Answer], tools: dict[str, tuple[str, ...]], n: int) -> None:
    misses = [a for a in answers if a.query.multi and _rank(a) != 1][:n]
    for a in misses:
        print(f"\n## {split_of(a.query.id)} {a.query.intent[:200]}")
        print(f"  expected {' > '.join(tools.get(a.query.group, ()))} (rank {_rank(a)})")
        seen: set[str] = set()
        for g, p in sorted(a.candidates, key=lambda c: -c[1].total):
            if g in seen:
                continue
            seen.add(g)
            mark = "*" if g == a.query.group else " "
            print(
                f"  {mark} total {p.total:.3f} match {p.match:.3f} semantic {p.semantic:.3f} "
                f"lexical {p.lexical:.3f} steps {p.steps:.3f}  {' > '.join(tools.get(g, ()))}"
            )
            if len(seen) == 4:
                break


def main(argv: Sequence[str]) -> None:
    which = next((a for a in argv if a in ("dev", "skewed", "exact")), "dev")
    n = int(argv[argv.index("--show") + 1]) if "--show" in argv else 0
    changed = {k: float(v) for k, v in (a.split("=", 1) for a in argv if "=" in a)}
    answers, tools = ask(which, changed)
    report(which, answers)
    show(answers, tools, n)


if __name__ == "__main__":
    main(sys.argv[1:])
