"""Suggest latency in-process at 10k and 100k stored intents (issue 6), hashing embedder and the
default model. Filling a store takes minutes even in batches (benches/harness/fill.py), so each
filled store is built once and cached in benches/.cache under a fingerprint of the code that wrote
it; later runs copy it."""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from benches.common import Row
from benches.harness import fill, quality_dataset
from benches.harness.fill import record_all
from benches.harness.quality_dataset import filler_intent, load
from benches.harness.quality_engine import SUITE, TENANT, capture_labelled, open_engine
from benches.harness.service_harness import store_code_digest
from pml_server.domain.model import ExecutionRecord, SuggestQuery, ToolCall
from pml_server.embedding import make_embedder
from pml_server.ranking import default_ranking

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "benches" / ".cache"


def _filler_vectors(embedder_name: str, count: int) -> np.ndarray:
    """Realistic (clustered) vectors for the filler intents without embedding each: the model
    embeds a few hundred filler texts up front and each filler intent takes one plus a little
    noise (client-supplied vectors, so the fill never runs the model per intent)."""
    embedder = make_embedder(embedder_name, cache_size=1)
    bases = embedder.embed([filler_intent(n)[0].rsplit(" ", 1)[0] for n in range(256)])
    rng = np.random.default_rng(7)
    picks = bases[np.arange(count) % len(bases)]
    noisy = picks + rng.normal(0.0, 0.03, picks.shape).astype(np.float32)
    return (noisy / np.linalg.norm(noisy, axis=1, keepdims=True)).astype(np.float32)


def _fill(store: Path, embedder_name: str, stored: int) -> float:
    start = time.perf_counter()
    engine = open_engine(store, embedder_name, None)
    try:
        executions, _ = load()
        capture_labelled(engine, executions)
        vectors = _filler_vectors(embedder_name, stored - len(executions))

        def filler(n: int) -> ExecutionRecord:
            text, tools = filler_intent(n)
            return ExecutionRecord(
                request_id=f"f{n}",
                intent=text,
                code="".join(f"await mcp.{t}({{}});\n" for t in tools),
                language="typescript",
                tool_calls=tuple(ToolCall(t) for t in tools),
                intent_embedding=tuple(vectors[n].tolist()),
            )

        record_all(engine, TENANT, len(vectors), filler, threads=1)  # the order decides grouping
    finally:
        engine.close()
    return time.perf_counter() - start


def _fingerprint(embedder_name: str, stored: int) -> str:
    digest = hashlib.sha256(f"{embedder_name}/{stored}".encode())
    digest.update(inspect.getsource(quality_dataset).encode())
    digest.update(quality_dataset.DATA.read_bytes())
    digest.update(inspect.getsource(_fill).encode())
    digest.update(inspect.getsource(fill).encode())
    digest.update(inspect.getsource(_filler_vectors).encode())
    store_code_digest(digest)
    return digest.hexdigest()[:16]


def filled_store(scratch: Path, embedder_name: str, stored: int) -> tuple[Path, float]:
    """A fresh copy of the filled store and the seconds its fill took when it was built."""
    kind = f"quality-{embedder_name}-{stored}"
    built = CACHE / f"{kind}-{_fingerprint(embedder_name, stored)}"
    meta = built / "fill.json"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{kind}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second run waits for the first one's fill
        if not meta.exists():
            for stale in CACHE.glob(f"{kind}-*"):
                shutil.rmtree(stale, ignore_errors=True)
            seconds = _fill(built / "store", embedder_name, stored)
            meta.write_text(json.dumps({"seconds": seconds}))
    copy = scratch / kind
    shutil.copytree(built / "store", copy)
    return copy, float(json.loads(meta.read_text())["seconds"])


def _percentile(samples: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples), q))


def step_fit_samples(
    store: Path, embedder_name: str, texts: Sequence[str], rounds: int
) -> dict[str, list[float]]:
    """Suggest times in seconds with client vectors (the model out of the timing), the step fit
    on (the default) and off (`step_weight` and `step_profile_weight` 0), over two copies of
    `store` opened side by side: each query is asked of both in turn, the order flipped each
    round, so drift on a shared machine touches both alike (docs/ranking.md, Steps, "Cost")."""
    vectors = make_embedder(embedder_name, cache_size=1).embed(list(texts))
    queries = [
        SuggestQuery(text, k=5, intent_embedding=tuple(float(x) for x in vector))
        for text, vector in zip(texts, vectors, strict=True)
    ]
    default = default_ranking(embedder_name)
    off = replace(default, step_weight=0.0, step_profile_weight=0.0)
    other = store.parent / f"{store.name}-step-fit-off"
    shutil.copytree(store, other)
    engines = [
        ("on", open_engine(store, embedder_name, default)),
        ("off", open_engine(other, embedder_name, off)),
    ]
    samples: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for _, engine in engines:
            for query in queries[:20]:  # warm the caches
                engine.suggest(TENANT, query)
        for n in range(rounds):
            for query in queries:
                for name, engine in engines if n % 2 == 0 else engines[::-1]:
                    start = time.perf_counter()
                    engine.suggest(TENANT, query)
                    samples[name].append(time.perf_counter() - start)
    finally:
        for _, engine in engines:
            engine.close()
        shutil.rmtree(other, ignore_errors=True)
    return samples


def _step_fit_rows(store: Path, embedder_name: str, texts: Sequence[str], stored: int) -> list[Row]:
    """Suggest p50 with client vectors, the step fit on against off (`step_fit_samples`, two
    rounds)."""
    samples = step_fit_samples(store, embedder_name, texts, 2)
    on, off = (statistics.median(samples[n]) * 1e3 for n in ("on", "off"))
    return [
        Row(
            SUITE,
            f"{embedder_name} suggest with client vectors at {stored // 1000}k intents p50, "
            "step fit on",
            on,
            "ms",
            off,
            "step fit off (both weights 0), paired query by query",
            1.2,
            lower_is_better=True,
            extra={"samples": len(samples["on"])},
        )
    ]


def latency_rows(embedder_name: str, stored: int) -> list[Row]:
    """Suggest p50/p99 over 369 queries (123 held-out x 3 wordings, so the embedding cache never
    answers); baseline: embedding the query alone with the same model, p50."""
    _, queries = load()
    texts = [f"{q.text} {suffix}" for q in queries for suffix in ("", "now", "please")]
    with tempfile.TemporaryDirectory(prefix="pml-latency-") as tmp:
        store, fill_seconds = filled_store(Path(tmp), embedder_name, stored)
        engine = open_engine(store, embedder_name, None)
        try:
            samples = []
            for text in texts:
                start = time.perf_counter()
                engine.suggest(TENANT, SuggestQuery(text, k=5))
                samples.append(time.perf_counter() - start)
        finally:
            engine.close()
        step_rows = _step_fit_rows(store, embedder_name, texts, stored)
    embedder = make_embedder(embedder_name, cache_size=1)
    embed_samples = []
    for text in texts:
        start = time.perf_counter()
        embedder.embed([text + " again"])
        embed_samples.append(time.perf_counter() - start)
    embed_p50 = statistics.median(embed_samples) * 1e3
    label = f"{embedder_name} suggest at {stored // 1000}k intents"
    extra = {"samples": len(samples), "fill_seconds": round(fill_seconds, 1)}
    return step_rows + [
        Row(
            SUITE,
            f"{label} {name}",
            value * 1e3,
            "ms",
            embed_p50,
            "embed query only p50",
            lower_is_better=True,
            extra=extra,
        )
        for name, value in (
            ("p50", statistics.median(samples)),
            ("p99", _percentile(samples, 99)),
        )
    ]
