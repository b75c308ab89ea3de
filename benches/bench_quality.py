"""Suggest quality and latency through the real engine (issue 6).

Quality: the labelled executions of benches/data are captured, then every held-out query asks
for k=5 suggestions; hit@1, hit@5 and MRR of the expected capability label are reported for the
embedding signal alone, the lexical signal alone and the fused ranking (min_match and
min_success off, so only the order is judged), plus the fused ranking at the server defaults.
Baseline of the fused rows: the better single signal (target: fused beats each alone on hit@1).

Latency: Suggest p50/p99 in-process with 10k stored intents (100k with --large), for the
hashing embedder and the default model; baseline: embedding the query alone with that model.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from benches.common import Row
from benches.quality_dataset import LabelledExecution, filler_intent, load
from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, SuggestQuery, ToolCall
from pml_server.embedding import make_embedder
from pml_server.engine import Engine
from pml_server.ranking import RankingConfig

SUITE = "quality"
TENANT = "bench"
MODES = {
    "embedding": RankingConfig(lexical_weight=0.0),
    "lexical": RankingConfig(semantic_weight=0.0, lexical_weight=1.0),
    "fused": RankingConfig(),
}


def _open(data_dir: Path, embedder: str, ranking: RankingConfig) -> Engine:
    config = EngineConfig(data_dir=data_dir, embedder=embedder, durability="fast", ranking=ranking)
    engine = Engine.open(config)
    if not engine.wait_ready(timeout=600):
        raise RuntimeError("engine index did not become ready")
    return engine


def _record(i: int, execution: LabelledExecution) -> ExecutionRecord:
    return ExecutionRecord(
        request_id=f"q{i}",
        intent=execution.intent,
        code=execution.code,
        language=execution.language,
        tool_calls=tuple(ToolCall(tool) for tool in execution.tools),
    )


def _capture(engine: Engine, executions: Sequence[LabelledExecution]) -> dict[str, str]:
    """Capability id -> label (the majority label of the executions it holds)."""
    votes: dict[str, Counter[str]] = {}
    for i, execution in enumerate(executions):
        result = engine.record(TENANT, _record(i, execution))
        votes.setdefault(result.capability_id, Counter())[execution.label] += 1
    return {cap: counter.most_common(1)[0][0] for cap, counter in votes.items()}


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


def evaluate(embedder: str, mode: str, defaults: bool = False) -> dict[str, float]:
    executions, queries = load()
    with tempfile.TemporaryDirectory(prefix="pml-quality-") as tmp:
        engine = _open(Path(tmp), embedder, MODES[mode])
        try:
            label_of = _capture(engine, executions)
            ranks = []
            for q in queries:
                query = SuggestQuery(q.text, k=5)
                if not defaults:
                    query = replace(query, min_match=0.0, min_success=0.0)
                ranks.append(_rank_of(engine, query, label_of, q.label))
        finally:
            engine.close()
    return _metrics(ranks)


def _quality_rows(embedder: str) -> list[Row]:
    results = {mode: evaluate(embedder, mode) for mode in MODES}
    at_defaults = evaluate(embedder, "fused", defaults=True)
    n_exec, n_queries = (len(x) for x in load())
    rows = []
    for metric in ("hit@1", "hit@5", "MRR"):
        best_single = max(("embedding", "lexical"), key=lambda m: results[m][metric])
        for mode in ("embedding", "lexical"):
            rows.append(Row(SUITE, f"{embedder} {mode} only {metric}", results[mode][metric], ""))
        rows.append(
            Row(
                SUITE,
                f"{embedder} fused {metric}",
                results["fused"][metric],
                "",
                baseline=results[best_single][metric],
                baseline_name=f"{best_single} only",
                target=1.0 if metric != "hit@1" else 1.0001,
                extra={"executions": n_exec, "queries": n_queries},
            )
        )
        rows.append(
            Row(SUITE, f"{embedder} fused {metric} (default thresholds)", at_defaults[metric], "")
        )
    return rows


def _filler_vectors(embedder_name: str, count: int) -> np.ndarray:
    """Realistic (clustered) vectors for the filler intents without embedding each: the model
    embeds a few hundred filler texts and each filler intent takes one plus a little noise."""
    embedder = make_embedder(embedder_name, cache_size=1)
    bases = embedder.embed([filler_intent(n)[0].rsplit(" ", 1)[0] for n in range(256)])
    rng = np.random.default_rng(7)
    picks = bases[np.arange(count) % len(bases)]
    noisy = picks + rng.normal(0.0, 0.03, picks.shape).astype(np.float32)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def _percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q))


def _latency_rows(embedder_name: str, stored: int) -> list[Row]:
    executions, queries = load()
    texts = [f"{q.text} {suffix}" for q in queries for suffix in ("", "now", "please")]
    with tempfile.TemporaryDirectory(prefix="pml-latency-") as tmp:
        engine = _open(Path(tmp), embedder_name, RankingConfig())
        try:
            _capture(engine, executions)
            vectors = _filler_vectors(embedder_name, stored - len(executions))
            for n, vector in enumerate(vectors):
                text, tools = filler_intent(n)
                engine.record(
                    TENANT,
                    ExecutionRecord(
                        request_id=f"f{n}",
                        intent=text,
                        code="".join(f"await mcp.{t}({{}});\n" for t in tools),
                        language="typescript",
                        tool_calls=tuple(ToolCall(t) for t in tools),
                        intent_embedding=tuple(vector.tolist()),
                    ),
                )
            samples = []
            for text in texts:
                start = time.perf_counter()
                engine.suggest(TENANT, SuggestQuery(text, k=5))
                samples.append(time.perf_counter() - start)
        finally:
            engine.close()
    embedder = make_embedder(embedder_name, cache_size=1)
    embed_samples = []
    for text in texts:
        start = time.perf_counter()
        embedder.embed([text + " again"])
        embed_samples.append(time.perf_counter() - start)
    embed_p50 = statistics.median(embed_samples) * 1e3
    label = f"{embedder_name} suggest at {stored // 1000}k intents"
    return [
        Row(
            SUITE,
            f"{label} p50",
            statistics.median(samples) * 1e3,
            "ms",
            embed_p50,
            "embed query only p50",
            lower_is_better=True,
            extra={"samples": len(samples)},
        ),
        Row(
            SUITE,
            f"{label} p99",
            _percentile(samples, 99) * 1e3,
            "ms",
            embed_p50,
            "embed query only p50",
            lower_is_better=True,
            extra={"samples": len(samples)},
        ),
    ]


def run(large: bool) -> list[Row]:
    rows: list[Row] = []
    for embedder in ("hashing", "minilm"):
        rows.extend(_quality_rows(embedder))
    sizes = (10_000, 100_000) if large else (10_000,)
    for embedder in ("hashing", "minilm"):
        for stored in sizes:
            rows.extend(_latency_rows(embedder, stored))
    return rows
