"""Suggest quality and latency through the real engine (issue 6).

Quality: the labelled executions of benches/data are captured, then every query asks for k=5
suggestions; hit@1, hit@5 and MRR of the expected capability label are reported for the
embedding signal alone, the lexical signal alone and the fused ranking (min_match and
min_success off, so only the order is judged), plus the fused ranking at the server defaults,
on the held-out queries (the result) and on the dev queries (the ones the defaults were tuned
on, shown for comparison). Baseline of the fused rows: the better single signal (target: fused
beats each alone on hit@1).

Dev set (benches/harness/quality_devset.py, issue 16): the MetaTool + NESTFUL development set
through `pml serve` over gRPC, default and skewed variants, with the failure-injected variant;
skipped when ../shared/devset is absent.

Latency (benches/harness/quality_latency.py): Suggest p50/p99 in-process with 10k stored intents
(100k with --large), for the hashing embedder and the default model; baseline: embedding the query
alone with that model.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from benches.common import Row
from benches.harness.quality_dataset import HeldOutQuery, load
from benches.harness.quality_engine import SUITE, TENANT, capture_labelled, open_engine
from benches.harness.quality_latency import latency_rows
from pml_server.domain.model import SuggestQuery
from pml_server.ranking import RankingConfig
from pml_server.service import Engine

# None: the fused ranking as served, with the defaults of the embedder family.
MODES: dict[str, RankingConfig | None] = {
    "embedding": RankingConfig(lexical_weight=0.0),
    "lexical": RankingConfig(semantic_weight=0.0, lexical_weight=1.0),
    "fused": None,
}


def _rank_of(engine: Engine, query: SuggestQuery, label_of: dict[str, str], label: str) -> int:
    """1-based position of `label` among the suggested labels (0: absent)."""
    labels: list[str] = []
    for suggestion in engine.suggest(TENANT, query).suggestions:
        found = label_of.get(suggestion.capability_id, "?")
        if found not in labels:
            labels.append(found)
    return labels.index(label) + 1 if label in labels else 0


def _metrics(ranks: Sequence[int]) -> dict[str, float]:
    n = len(ranks)
    return {
        "hit@1": sum(r == 1 for r in ranks) / n,
        "hit@5": sum(1 <= r <= 5 for r in ranks) / n,
        "MRR": sum(1.0 / r for r in ranks if r) / n,
    }


def _ranks(
    engine: Engine, queries: Sequence[HeldOutQuery], label_of: dict[str, str], defaults: bool
) -> list[int]:
    ranks = []
    for q in queries:
        query = SuggestQuery(q.text, k=5)
        if not defaults:
            query = replace(query, min_match=0.0, min_success=0.0)
        ranks.append(_rank_of(engine, query, label_of, q.label))
    return ranks


def evaluate(embedder: str) -> dict[tuple[str, str], dict[str, float]]:
    """(split, mode) -> metrics, for split "dev" (tuning) and "held-out" (reported) and mode
    embedding / lexical / fused / "fused (default thresholds)". The executions are captured
    once; each mode reopens the same store with its RankingConfig (the index is rebuilt)."""
    executions, held_out = load()
    _, dev = load(split="dev_queries")
    splits = {"dev": dev, "held-out": held_out}
    results: dict[tuple[str, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="pml-quality-") as tmp:
        engine = open_engine(Path(tmp), embedder, MODES["fused"])
        try:
            label_of = capture_labelled(engine, executions)
        finally:
            engine.close()
        for mode, config in MODES.items():
            engine = open_engine(Path(tmp), embedder, config)
            try:
                for split, queries in splits.items():
                    ranks = _ranks(engine, queries, label_of, defaults=False)
                    results[(split, mode)] = _metrics(ranks)
                    if mode == "fused":
                        ranks = _ranks(engine, queries, label_of, defaults=True)
                        results[(split, "fused (default thresholds)")] = _metrics(ranks)
            finally:
                engine.close()
    return results


def _quality_rows(embedder: str) -> list[Row]:
    results = evaluate(embedder)
    n_exec = len(load()[0])
    rows = []
    for split in ("held-out", "dev"):
        n_queries = len(load(split="queries" if split == "held-out" else "dev_queries")[1])
        extra = {"executions": n_exec, "queries": n_queries, "split": split}
        for metric in ("hit@1", "hit@5", "MRR"):
            single = {m: results[(split, m)][metric] for m in ("embedding", "lexical")}
            best_single = max(single, key=lambda m: single[m])
            prefix = f"{embedder} {split}"
            for mode, value in single.items():
                rows.append(Row(SUITE, f"{prefix} {mode} only {metric}", value, "", extra=extra))
            rows.append(
                Row(
                    SUITE,
                    f"{prefix} fused {metric}",
                    results[(split, "fused")][metric],
                    "",
                    baseline=single[best_single],
                    baseline_name=f"{best_single} only",
                    target=1.0 if metric != "hit@1" else 1.0001,
                    extra=extra,
                )
            )
            rows.append(
                Row(
                    SUITE,
                    f"{prefix} fused {metric} (default thresholds)",
                    results[(split, "fused (default thresholds)")][metric],
                    "",
                    extra=extra,
                )
            )
    return rows


def run(large: bool) -> list[Row]:
    from benches.harness import devset, quality_devset

    rows: list[Row] = []
    if devset.available():  # ../shared/devset, outside the repo (benches/harness/devset.py)
        rows.extend(quality_devset.run(large))
    for embedder in ("hashing", "minilm"):
        rows.extend(_quality_rows(embedder))
    sizes = (10_000, 100_000) if large else (10_000,)

    for embedder in ("hashing", "minilm"):
        for stored in sizes:
            rows.extend(latency_rows(embedder, stored))
    return rows
