"""The quality suite's engine: opened in-process on a data directory, and the labelled
executions captured into it (benches/bench_quality.py and its latency rows,
benches/harness/quality_latency.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from benches.harness.devset import as_record
from benches.harness.quality_dataset import LabelledExecution
from pml_server.config import EngineConfig
from pml_server.ranking import RankingConfig
from pml_server.service import Engine

SUITE = "quality"
TENANT = "bench"


def open_engine(data_dir: Path, embedder: str, ranking: RankingConfig | None) -> Engine:
    config = EngineConfig(data_dir=data_dir, embedder=embedder, durability="fast", ranking=ranking)
    engine = Engine.open(config)
    if not engine.admin.wait_ready(timeout=600):
        raise RuntimeError("engine index did not become ready")
    return engine


def capture_labelled(engine: Engine, executions: Sequence[LabelledExecution]) -> dict[str, str]:
    """Capability id -> label (the majority label of the executions it holds)."""
    votes: dict[str, Counter[str]] = {}
    for i, execution in enumerate(executions):
        result = engine.record(TENANT, as_record(i, execution))
        votes.setdefault(result.capability_id, Counter())[execution.label] += 1
    return {cap: counter.most_common(1)[0][0] for cap, counter in votes.items()}
