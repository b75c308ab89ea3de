"""Capture throughput (group commit vs one fsync per capture, sync vs fast) and embedding speed
(padding to the longest text vs the published fixed 128 tokens; cache hits vs model calls)."""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path

from benches.common import Row, best_of
from pml_server.config import EngineConfig
from pml_server.embedding import CachedEmbedder
from pml_server.embedding.minilm import MiniLMEmbedder
from pml_server.service import Engine
from tests.support import Clock, make_record

SUITE = "capture"


def _captures_per_second(durability: str, threads: int, per_thread: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        config = EngineConfig(data_dir=Path(tmp), embedder="hashing", durability=durability)
        engine = Engine.open(config, Clock())
        engine.wait_ready(60)
        tools = ["read_file", "parse_json"]
        engine.record("t", make_record("warm", "Read JSON file", tools))

        def worker(n: int) -> None:
            for i in range(per_thread):
                engine.record("t", make_record(f"{n}-{i}", "Read JSON file", tools))

        workers = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - start
        engine.close()
    return threads * per_thread / elapsed


def run(large: bool) -> list[Row]:
    n = 2000 if large else 300
    serial_sync = _captures_per_second("sync", 1, n // 4)
    grouped_sync = _captures_per_second("sync", 8, n // 8)
    grouped_fast = _captures_per_second("fast", 8, n // 8)
    rows = [
        Row(
            SUITE,
            "sync captures/s, 8 threads (group commit)",
            grouped_sync,
            "captures/s",
            serial_sync,
            "sync, 1 thread (one fsync per capture)",
        ),
        Row(
            SUITE,
            "fast captures/s, 8 threads",
            grouped_fast,
            "captures/s",
            grouped_sync,
            "sync, 8 threads",
        ),
    ]
    model = MiniLMEmbedder()
    texts = [f"Read the JSON file number {i} and parse it" for i in range(32)]
    padded_longest = best_of(3, lambda: model.embed(texts))
    model._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]", length=128)
    padded_fixed = best_of(3, lambda: model.embed(texts))
    model._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    rows.append(
        Row(
            SUITE,
            "MiniLM texts/s, batch 32, pad to longest",
            32 / padded_longest,
            "texts/s",
            32 / padded_fixed,
            "pad to fixed 128 (published tokenizer.json)",
        )
    )
    cached = CachedEmbedder(model)
    cached.embed(texts)
    hit = best_of(3, lambda: cached.embed(texts))
    rows.append(
        Row(
            SUITE,
            "embedding cache hits, batch 32",
            32 / hit,
            "texts/s",
            32 / padded_longest,
            "MiniLM call",
        )
    )
    return rows
