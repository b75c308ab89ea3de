"""Capture in-process on real intents (the development set's, benches/harness/devset_workload.py),
with the default model: the model itself before and after (int8 arithmetic one text a call against
the float graph, padded batches in file order and one text a call), the engine's batch path
(`record_many`, what StreamTraces calls) against the model alone on the same texts, group commit
(8 threads vs one fsync per capture; sync vs fast) and embedding-cache hits."""

from __future__ import annotations

import os
import tempfile
import time
from functools import partial
from pathlib import Path

from benches.common import Row, best_of
from benches.harness import devset_workload, embedding_quality, model_alone
from benches.harness.closed_loop import run_timed
from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, ToolCall
from pml_server.embedding import CachedEmbedder
from pml_server.embedding.minilm import MiniLMEmbedder
from pml_server.service import Engine
from testing.engine import Clock

SUITE = "capture"


def _records(tag: str, n: int) -> list[ExecutionRecord]:
    rows = devset_workload.executions()
    step = max(1, len(rows) // n)
    return [
        ExecutionRecord(
            request_id=f"{tag}-{row['id']}",
            intent=str(row["intent"]),
            code=str(row["code"]),
            language=str(row["language"]),
            tool_calls=tuple(ToolCall(str(t)) for t in row["tools"]),  # type: ignore[attr-defined]
        )
        for row in rows[::step][:n]
    ]


def _open(tmp: str, durability: str) -> Engine:
    engine = Engine.open(EngineConfig(data_dir=Path(tmp), durability=durability), Clock())
    engine.admin.wait_ready(60)
    return engine


def _captures_per_second(durability: str, threads: int, records: list[ExecutionRecord]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        engine = _open(tmp, durability)
        share = [records[n::threads] for n in range(threads)]

        def worker(mine: list[ExecutionRecord]) -> None:
            for record in mine:
                engine.record("t", record)

        elapsed = run_timed([partial(worker, mine) for mine in share])
        engine.close()
    return len(records) / elapsed


def _record_many_rate(records: list[ExecutionRecord]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        engine = _open(tmp, "sync")
        start = time.perf_counter()
        for i in range(0, len(records), 32):
            engine.record_many("t", records[i : i + 32])
        elapsed = time.perf_counter() - start
        engine.close()
    return len(records) / elapsed


def run(large: bool) -> list[Row]:
    # 300 executions: the ratios of 600 within the noise, in half the time
    n = 60 if os.environ.get("PML_BENCH_QUICK") else 2000 if large else 300
    records = _records("cap", n)
    texts = [r.intent for r in records]
    model = model_alone.rates(texts)
    best_name, best = model_alone.fastest(model)
    default = "int8, batches of 32 on 2 workers (the default)"
    rows = [
        Row(
            SUITE,
            f"MiniLM texts/s, dev-set intents ({n}), {default}",
            model[default],
            "texts/s",
            model["float, padded batches of 32 in file order"],
            "previous default: float graph, padded batches of 32 in file order",
            extra={"model_alone": model},
        ),
        Row(
            SUITE,
            f"MiniLM texts/s, dev-set intents ({n}), int8, one text a call, 1 thread",
            model["int8, one text a call"],
            "texts/s",
            model["float, one text a call"],
            "float graph, one text a call, 1 thread",
        ),
    ]
    before = model_alone.rate(model_alone.configuration(best_name, texts), n)
    batched = _record_many_rate(records)
    after = model_alone.rate(model_alone.configuration(best_name, texts), n)
    rows.append(
        Row(
            SUITE,
            f"record_many captures/s (batches of 32, sync), dev-set executions ({n})",
            batched,
            "captures/s",
            (before + after) / 2,
            f"model alone, {best_name}, timed before and after",
            target=0.8,
            extra={"fastest_scan": best},
        )
    )
    serial_sync = _captures_per_second("sync", 1, records[: n // 2])
    grouped_sync = _captures_per_second("sync", 8, records)
    grouped_fast = _captures_per_second("fast", 8, records)
    rows += [
        Row(
            SUITE,
            "sync captures/s, 8 threads (group commit), dev-set executions, default model",
            grouped_sync,
            "captures/s",
            serial_sync,
            "sync, 1 thread (one fsync per capture)",
        ),
        Row(
            SUITE,
            "fast captures/s, 8 threads, dev-set executions, default model",
            grouped_fast,
            "captures/s",
            grouped_sync,
            "sync, 8 threads",
        ),
    ]
    plain = MiniLMEmbedder()
    batch = texts[:32]
    miss = best_of(3, lambda: plain.embed(batch))
    cached = CachedEmbedder(plain)
    cached.embed(batch)
    hit = best_of(3, lambda: cached.embed(batch))
    rows.append(
        Row(
            SUITE,
            "embedding cache hits, batch of 32 dev-set intents",
            32 / hit,
            "texts/s",
            32 / miss,
            "MiniLM call",
        )
    )
    if not os.environ.get("PML_BENCH_QUICK"):
        rows += _quality_rows()
    return rows


def _quality_rows() -> list[Row]:
    """The int8 default must lose nothing: hit@1 and MRR within 0.005 of the float graph's."""
    before = embedding_quality.cached_scores("float")
    after = embedding_quality.cached_scores("int8")
    return [
        Row(
            SUITE,
            f"dev-set semantic-only {name}, int8 default",
            after[name],
            name,
            before[name],
            "float graph (previous default)",
            target=(before[name] - 0.005) / before[name],
        )
        for name in ("hit@1", "mrr")
    ]
