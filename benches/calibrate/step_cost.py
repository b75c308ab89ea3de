"""The step fit's cost, paired (docs/ranking.md, Steps, "Cost, made cheaper").

`python -m benches.calibrate.step_cost [ROUNDS]` opens the quality latency store (10k intents,
MiniLM, `benches/harness/quality_latency.py`) twice, once with the step fit on (the default)
and once with both step weights at 0, and asks both every latency query with its client vector,
alternating query by query (the order flipped each round), so drift on a shared machine touches
both alike. Prints each configuration's p50 and their ratio (the quality suite's row runs each
configuration for a whole pass in turn)."""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from benches.bench_quality import TENANT, _open
from benches.harness.quality_dataset import load
from benches.harness.quality_latency import filled_store
from pml_server.domain.model import SuggestQuery
from pml_server.embedding import make_embedder
from pml_server.ranking import default_ranking


def main(rounds: int) -> None:
    _, held_out = load()
    texts = [f"{q.text} {suffix}" for q in held_out for suffix in ("", "now", "please")]
    vectors = make_embedder("minilm", cache_size=1).embed(texts)
    queries = [
        SuggestQuery(text, k=5, intent_embedding=tuple(float(x) for x in vector))
        for text, vector in zip(texts, vectors, strict=True)
    ]
    on = default_ranking("minilm")
    off = replace(on, step_weight=0.0, step_profile_weight=0.0)
    with tempfile.TemporaryDirectory(prefix="pml-step-cost-") as tmp:
        store, _ = filled_store(Path(tmp), "minilm", 10000)
        other = Path(tmp) / "off"
        shutil.copytree(store, other)
        engines = [("on", _open(store, "minilm", on)), ("off", _open(other, "minilm", off))]
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
    p50 = {name: statistics.median(values) * 1e3 for name, values in samples.items()}
    print(
        f"on {p50['on']:.4f} ms, off {p50['off']:.4f} ms, ratio {p50['on'] / p50['off']:.3f} "
        f"({len(samples['on'])} samples each)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
