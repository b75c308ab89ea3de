"""Semantic-only suggestion quality of an embedder on the development set: every held-apart
query (../shared/devset/queries.jsonl) ranks the groups of the dev set's executions by their
closest execution's cosine; hit@1 and MRR of the expected group. It judges the model alone (no
lexical signal, no ranking), so two model configurations can be compared:

    python -m benches.embedding_quality
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from benches import devset_workload
from pml_server.embedding.minilm import MiniLMEmbedder

QUERIES = devset_workload.DEVSET.with_name("queries.jsonl")


def _queries() -> list[dict[str, str]]:
    with Path(QUERIES).open() as lines:
        return [json.loads(line) for line in lines if line.strip()]


def scores(embedder: MiniLMEmbedder) -> dict[str, float]:
    executions = devset_workload.executions()
    queries = _queries()
    stored = embedder.embed([str(e["intent"]) for e in executions])
    asked = embedder.embed([q["intent"] for q in queries])
    groups = sorted({str(e["group"]) for e in executions})
    index = {g: i for i, g in enumerate(groups)}
    group_of = np.array([index[str(e["group"])] for e in executions])
    similarity = asked @ stored.T
    hits = 0
    reciprocal = 0.0
    for q, row in zip(queries, similarity, strict=True):
        best = np.full(len(groups), -np.inf)
        np.maximum.at(best, group_of, row)
        order = np.argsort(-best, kind="stable")
        rank = int(np.flatnonzero(order == index[q["expected_group"]])[0]) + 1
        hits += rank == 1
        reciprocal += 1.0 / rank
    return {"hit@1": hits / len(queries), "mrr": reciprocal / len(queries)}


def main() -> None:
    for compute in ("float", "int8"):
        print(compute, scores(MiniLMEmbedder(compute=compute)), flush=True)


if __name__ == "__main__":
    main()
