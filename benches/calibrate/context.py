"""What limits dev-set hit@1 when the agent's offered tools are given (docs/ranking.md, Offered
tools: what limits hit@1).

`python -m benches.calibrate.context [--dump FILE]` captures the dev set in-process exactly as
`benches/bench_context.py` does (default model, client vectors, RocksDB), asks every query with
its offered tools (expected + 4 nearest, `bench_context.offered_tools`) for k = 100, and prints:

- hit@1 against the number of distractors offered (0, 1, 2, 4, 8);
- the misses by kind: single-tool queries answered by an offered near-synonym, multi-tool ones
  answered by a subset, an overlap, a superset of the expected tools or by distractors only;
  how far the expected capability is behind (its total over the first's) and whether it is in
  the top 5;
- ceilings of classifiers over the model's vectors alone, each restricted to the offered
  tools' groups: the nearest group centroid, the nearest execution, and a softmax regression
  trained on every execution (a supervised learner the ranking is not: what the vectors can
  separate at best);
- replays of step evidence variants offline (the served candidates and score parts, the step
  factor replaced): the request's nearest intents taken among the permitted patterns only, and
  a tool-level relevance (each offered tool's best intents over every pattern using it,
  softmax over the offered tools), each in the step fit's Dice form; and the match alone with
  other lexical weights.

`--dump FILE` writes every miss as JSON lines (request, expected tools, offered tools, the top 3
with their tools and score parts). Nothing is written to results/.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from benches.bench_context import EMBEDDER, TENANT, _capture, _open, offered_tools
from benches.harness.devset import DevExecution, DevQuery, load
from benches.harness.quality_vectors import vectors
from pml_server.domain.model import ScoreParts, SuggestQuery

K_ALL = 100
SWEEP = (0, 1, 2, 4, 8)

Factor = Callable[[frozenset[str]], float]


@dataclass(frozen=True)
class Candidate:
    group: str | None
    tools: frozenset[str]
    parts: ScoreParts


def _dice(evidence: dict[str, float], weight: float) -> Factor:
    """The step fit's form (docs/ranking.md, Steps) over a soft set of tools."""
    mass = sum(evidence.values())

    def factor(tools: frozenset[str]) -> float:
        if not tools or mass <= 0:
            return 1.0
        inter = sum(evidence.get(t, 0.0) for t in tools)
        return 1 - weight + weight * min(1.0, 2 * inter / (len(tools) + mass))

    return factor


class Replay:
    def __init__(
        self,
        executions: Sequence[DevExecution],
        queries: Sequence[DevQuery],
        vector_of: dict[str, NDArray[np.float32]],
        offered: dict[str, tuple[str, ...]],
        answers: dict[str, list[Candidate]],
    ) -> None:
        self.queries = queries
        self.offered = offered
        self.answers = answers
        self.matrix = np.stack([vector_of[e.intent] for e in executions]).astype(np.float64)
        self.tools = [frozenset(e.tools) for e in executions]
        self.query_vec = {q.id: vector_of[q.intent].astype(np.float64) for q in queries}

    def hit1(self, factor_of: Callable[[DevQuery], Factor] | None = None) -> dict[str, float]:
        hits: Counter[str] = Counter()
        count: Counter[str] = Counter()
        for query in self.queries:
            cands = self.answers[query.id]
            kind = "multi" if query.multi_tool else "single"
            count["all"] += 1
            count[kind] += 1
            if not cands:
                continue
            factor = factor_of(query) if factor_of else None

            def total(c: Candidate, f: Factor | None = factor) -> float:
                return c.parts.total if f is None else c.parts.total / c.parts.steps * f(c.tools)

            best = max(cands, key=lambda c: (total(c), c.parts.match))
            hit = best.group == query.group
            hits["all"] += hit
            hits[kind] += hit
        return {k: hits[k] / count[k] for k in ("all", "single", "multi")}

    def hit1_lexical(self, weight: float) -> dict[str, float]:
        """hit@1 ranking by the match alone, its lexical weight replaced (semantic weight 1)."""
        hits: Counter[str] = Counter()
        count: Counter[str] = Counter()
        for query in self.queries:
            kind = "multi" if query.multi_tool else "single"
            count["all"] += 1
            count[kind] += 1
            cands = self.answers[query.id]
            if cands:
                best = max(
                    cands, key=lambda c: 1 - (1 - c.parts.semantic) * (1 - weight * c.parts.lexical)
                )
                hits["all"] += best.group == query.group
                hits[kind] += best.group == query.group
        return {k: hits[k] / count[k] for k in ("all", "single", "multi")}

    def permitted_neighbours(self, neighbours: int, weight: float) -> Callable[[DevQuery], Factor]:
        def factor_of(query: DevQuery) -> Factor:
            allowed = set(self.offered[query.id])
            rows = [i for i, t in enumerate(self.tools) if t <= allowed]
            cos = self.matrix[rows] @ self.query_vec[query.id]
            votes: dict[str, float] = defaultdict(float)
            total = 0.0
            for j in np.argsort(-cos, kind="stable")[:neighbours].tolist():
                w = max(float(cos[j]), 0.0)
                total += w
                for tool in self.tools[rows[j]]:
                    votes[tool] += w
            return _dice({t: v / total for t, v in votes.items()} if total else {}, weight)

        return factor_of

    def tool_relevance(
        self, best: int, temperature: float, weight: float
    ) -> Callable[[DevQuery], Factor]:
        def factor_of(query: DevQuery) -> Factor:
            relevance = {}
            for tool in sorted(set(self.offered[query.id])):
                rows = [i for i, t in enumerate(self.tools) if tool in t]
                if rows:
                    cos = np.sort(self.matrix[rows] @ self.query_vec[query.id])[::-1]
                    relevance[tool] = float(cos[:best].mean())
            if not relevance:
                return _dice({}, weight)
            top = max(relevance.values())
            soft = {t: float(np.exp((r - top) / temperature)) for t, r in relevance.items()}
            norm = sum(soft.values())
            return _dice({t: v / norm for t, v in soft.items()}, weight)

        return factor_of


def classifier_ceilings(
    executions: Sequence[DevExecution],
    queries: Sequence[DevQuery],
    vector_of: dict[str, NDArray[np.float32]],
    offered: dict[str, tuple[str, ...]],
) -> dict[str, float]:
    """hit@1 of classifiers over the model's vectors, restricted to the offered tools' groups."""
    groups = sorted({e.group for e in executions})
    index = {g: i for i, g in enumerate(groups)}
    group_tools = {e.group: frozenset(e.tools) for e in executions}
    x = np.stack([vector_of[e.intent] for e in executions]).astype(np.float64)
    y = np.array([index[e.group] for e in executions])
    q = np.stack([vector_of[query.intent] for query in queries]).astype(np.float64)
    centroids = np.zeros((len(groups), x.shape[1]))
    np.add.at(centroids, y, x)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    cos = q @ x.T
    nearest = np.stack([cos[:, y == g].max(axis=1) for g in range(len(groups))], axis=1)
    # softmax regression, full-batch gradient descent from zero (deterministic)
    scale, rate, l2 = 20.0, 0.5, 1e-3
    weights, bias = np.zeros((x.shape[1], len(groups))), np.zeros(len(groups))
    onehot = np.eye(len(groups))[y]
    for _ in range(600):
        z = scale * (x @ weights) + bias
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        grad = (p - onehot) / len(x)
        weights -= rate * (scale * x.T @ grad + l2 * weights)
        bias -= rate * grad.sum(axis=0)
    scores = {
        "nearest group centroid": q @ centroids.T,
        "nearest execution": nearest,
        "softmax regression on every execution": scale * (q @ weights) + bias,
    }
    out = {}
    for name, score in scores.items():
        hits = 0
        for i, query in enumerate(queries):
            allowed = set(offered[query.id])
            mask = np.array([group_tools[g] <= allowed for g in groups])
            hits += groups[int(np.argmax(np.where(mask, score[i], -np.inf)))] == query.group
        out[name] = hits / len(queries)
    return out


def main(argv: Sequence[str]) -> None:
    dump = Path(argv[argv.index("--dump") + 1]) if "--dump" in argv else None
    executions, queries = load()
    texts = list(dict.fromkeys([e.intent for e in executions] + [q.intent for q in queries]))
    vector_of = dict(zip(texts, vectors(EMBEDDER, texts), strict=True))
    offered = offered_tools(executions, queries, vector_of)
    tools_of = {e.group: frozenset(e.tools) for e in executions}
    answers: dict[str, list[Candidate]] = {}
    sweep: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as where:
        engine = _open(Path(where))
        try:
            group_of = _capture(engine, executions, vector_of)
            for distractors in SWEEP:
                sets = offered_tools(executions, queries, vector_of, distractors)
                hits = 0
                keep = distractors == 4
                for query in queries:
                    base = SuggestQuery(
                        query.intent,
                        k=K_ALL,
                        intent_embedding=tuple(vector_of[query.intent].tolist()),
                        available_tools=sets[query.id],
                    )
                    answer = engine.suggest(TENANT, base)
                    cands = [
                        Candidate(
                            group_of.get(s.capability_id),
                            tools_of.get(group_of.get(s.capability_id) or "", frozenset()),
                            s.score,
                        )
                        for s in answer.suggestions
                    ]
                    hits += bool(cands) and cands[0].group == query.group
                    if keep:
                        answers[query.id] = cands
                sweep[distractors] = hits / len(queries)
                if distractors == 4:
                    assert all(set(q.tools) <= set(sets[q.id]) for q in queries)
        finally:
            engine.close()
    print("hit@1 by distractors offered:", {d: round(v, 4) for d, v in sweep.items()})
    kinds: Counter[str] = Counter()
    in_top5 = 0
    behind: list[float] = []
    lines = []
    for query in queries:
        cands = answers[query.id]
        if cands and cands[0].group == query.group:
            continue
        expected = frozenset(query.tools)
        got = cands[0].tools if cands else frozenset()
        if not cands:
            kind = "empty"
        elif not query.multi_tool:
            kind = "single: an offered near-synonym" if not got & expected else "single: a superset"
        elif got < expected:
            kind = "multi: a subset of the expected tools"
        elif got > expected:
            kind = "multi: a superset"
        elif got & expected:
            kind = "multi: an overlap"
        else:
            kind = "multi: distractors only"
        kinds[kind] += 1
        rank = next((i for i, c in enumerate(cands) if c.group == query.group), None)
        in_top5 += rank is not None and rank < 5
        if rank is not None:
            behind.append(cands[rank].parts.total / cands[0].parts.total)
        lines.append(
            {
                "request": query.intent,
                "expected": sorted(expected),
                "offered": list(offered[query.id]),
                "expected_rank": rank,
                "top": [
                    {
                        "tools": sorted(c.tools),
                        **{
                            f: round(getattr(c.parts, f), 4)
                            for f in ("match", "semantic", "lexical", "steps", "usage", "total")
                        },
                    }
                    for c in cands[:3]
                ],
            }
        )
    print(f"misses {len(lines)} of {len(queries)}; expected capability in the top 5: {in_top5}")
    for kind, n in kinds.most_common():
        print(f"  {kind}: {n}")
    if behind:
        quantiles = np.quantile(np.array(behind), [0.1, 0.5, 0.9]).round(3).tolist()
        ties = sum(b >= 1 for b in behind)
        print(f"  expected total / first total, 10/50/90%: {quantiles}; ties: {ties}")
    print("classifier ceilings (model vectors only, restricted to the offered tools' groups):")
    for name, value in classifier_ceilings(executions, queries, vector_of, offered).items():
        print(f"  {name}: {value:.4f}")
    replay = Replay(executions, queries, vector_of, offered, answers)
    print("replays (served candidates, step factor replaced):")
    variants: list[tuple[str, Callable[[DevQuery], Factor] | None]] = [
        ("served", None),
        ("no step factor", lambda _q: lambda _t: 1.0),
        *[
            (f"neighbours among the permitted, {n}, w 0.3", replay.permitted_neighbours(n, 0.3))
            for n in (5, 10, 20)
        ],
        *[
            (f"tool relevance, best {b}, temperature {t}, w 0.3", replay.tool_relevance(b, t, 0.3))
            for b in (1, 3, 10)
            for t in (0.05, 0.1)
        ],
    ]
    for name, factor_of in variants:
        result = replay.hit1(factor_of)
        print(f"  {name}: " + " ".join(f"{k} {v:.4f}" for k, v in result.items()))
    for weight in (0.5, 0.7, 0.9, 1.0):
        result = replay.hit1_lexical(weight)
        print(
            f"  match alone, lexical weight {weight}: "
            + " ".join(f"{k} {v:.4f}" for k, v in result.items())
        )
    if dump is not None:
        dump.write_text("".join(json.dumps(line) + "\n" for line in lines))


if __name__ == "__main__":
    main(sys.argv[1:])
