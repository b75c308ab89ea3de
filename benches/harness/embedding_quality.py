"""Semantic-only suggestion quality of an embedder on the development set: every held-apart
query (../shared/devset/queries.jsonl) ranks the groups of the dev set's executions by their
closest execution's cosine; hit@1 and MRR of the expected group. It judges the model alone (no
lexical signal, no ranking), so two model configurations can be compared:

    python -m benches.harness.embedding_quality
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from benches.harness import devset_workload
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


CACHE = Path(__file__).resolve().parents[1] / ".cache"


def cached_scores(compute: str) -> dict[str, float]:
    """`scores(MiniLMEmbedder(compute=compute))`, kept in benches/.cache between runs: one
    text a call, the vectors (so the scores) depend only on the model, the code that embeds
    and the data, all in the key; embedding the whole dev set twice took most of the capture
    suite's time (`rm -rf benches/.cache` forces it)."""
    from pml_server.embedding import int8_graph, minilm

    digest = hashlib.sha256(compute.encode())
    for source in (Path(minilm.__file__), Path(int8_graph.__file__), Path(__file__)):
        digest.update(source.read_bytes())
    for data in (devset_workload.DEVSET, QUERIES):
        digest.update(Path(data).read_bytes())
    digest.update(minilm.MODEL_SHA256.encode())
    path = CACHE / f"embedding-quality-{compute}-{digest.hexdigest()[:16]}.json"
    if path.exists():
        cached: dict[str, float] = json.loads(path.read_text())
        return cached
    measured = scores(MiniLMEmbedder(compute=compute))
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(measured))
    return measured


def main() -> None:
    for compute in ("float", "int8"):
        print(compute, scores(MiniLMEmbedder(compute=compute)), flush=True)


if __name__ == "__main__":
    main()
