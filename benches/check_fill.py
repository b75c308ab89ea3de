"""Is the batched fill (benches/fill.py) the same store as the old one-`record`-at-a-time fill,
and how much faster is it? Run as:

    python -m benches.check_fill COUNT [COUNT ...]

For each COUNT, fills two fresh stores with the service bench's executions 0..COUNT (client
vectors): one by `record` calls in two threads (the fill before record_many), one by
`service_server.populate`; prints both fill times (wall and this process's CPU), then fails
unless both stores hold the same numbers of patterns, capabilities and intents, and prints how
many of fixed Suggest queries get the same answers (pattern code hashes and semantic scores): the
vector index is approximate and its graph depends on insertion order, so two old-style fills
(two racing threads) already disagree on about one query in twenty at 500 intents."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from benches import service_workload as work
from benches.service_server import TENANT, _record, populate
from pml_server.capture.normalize import normalize
from pml_server.config import EngineConfig
from pml_server.domain.model import SuggestQuery
from pml_server.service import Engine

QUERIES = 20


def sequential_fill(data_dir: Path, count: int) -> None:
    """The fill as it was: one `record` (one durability wait) per execution, two threads."""
    engine = _open(data_dir)
    vectors = work.stored_vectors(count)
    try:

        def worker(first: int) -> None:
            for i in range(first, count, 2):
                engine.record(TENANT, _record(i, tuple(vectors[i].tolist())))

        pool = [threading.Thread(target=worker, args=(t,)) for t in range(2)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        engine.close()


def batched_fill(data_dir: Path, count: int) -> None:
    populate(data_dir, count, "minilm", with_vectors=True)


def _open(data_dir: Path) -> Engine:
    config = EngineConfig(data_dir=data_dir, embedder="minilm", durability="fast")
    engine = Engine.open(config, normalizer=normalize)
    if not engine.wait_ready(600):
        raise RuntimeError("engine index did not become ready")
    return engine


Answer = list[tuple[str, float]]


def store_summary(data_dir: Path) -> tuple[tuple[int, int, int, int], list[Answer]]:
    """(patterns, capabilities, intents, executions) and, for each fixed query vector, the
    suggested patterns' code hashes with their semantic scores (sorted: suggestions with equal
    scores come in storage order, which the old two-thread fill never fixed either)."""
    engine = _open(data_dir)
    try:
        s = engine.stats(TENANT)
        answers = []
        for j, vector in enumerate(work.query_vectors(QUERIES)):
            query = SuggestQuery(
                work.query_text(j), k=5, intent_embedding=tuple(vector.tolist()), min_match=0.0
            )
            answers.append(
                sorted(
                    (x.pattern.code_hash, round(x.score.semantic, 5))
                    for x in engine.suggest(TENANT, query).suggestions
                )
            )
        return (s.patterns, s.capabilities, s.intents, s.executions), answers
    finally:
        engine.close()


def _timed(fill: Callable[[Path, int], None], data_dir: Path, count: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fill(data_dir, count)
    return time.perf_counter() - wall, time.process_time() - cpu


def main(counts: list[int]) -> None:
    for count in counts:
        with tempfile.TemporaryDirectory(prefix="pml-fill-") as tmp:
            old, new = Path(tmp) / "sequential", Path(tmp) / "batched"
            old_wall, old_cpu = _timed(sequential_fill, old, count)
            new_wall, new_cpu = _timed(batched_fill, new, count)
            print(
                f"{count} intents: record x1 {old_wall:.1f} s wall {old_cpu:.1f} s CPU; "
                f"record_many {new_wall:.1f} s wall {new_cpu:.1f} s CPU; "
                f"wall ratio {old_wall / new_wall:.1f}x, CPU ratio {old_cpu / new_cpu:.1f}x",
                flush=True,
            )
            old_summary, new_summary = store_summary(old), store_summary(new)
            if old_summary[0] != new_summary[0]:
                raise SystemExit(f"counts differ: {old_summary[0]} vs {new_summary[0]}")
            same = sum(a == b for a, b in zip(old_summary[1], new_summary[1], strict=True))
            print(f"  same counts {new_summary[0]}; {same} of {QUERIES} Suggest answers equal")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [5000])
