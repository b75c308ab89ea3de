"""Only issue 20's MiniLM row of the service suite, for working on it (writes no results):

    python -m benches.profile.service_minilm_suggest [REPEATS]

Each repeat is what `make bench` measures for "Suggest QPS, MiniLM, 8 callers": a fresh server
on a copy of the 10k-intent store, the model alone on the load's very queries right before and
after the Suggest load (the better kept), and the server's CPU outside the model. Every repeat
starts its own server: a second load on one server would find its queries in the embedding
cache. Also printed, from the same server before the MiniLM load: the server's CPU per Suggest
with client vectors (the engine and the API layer without the model), so that a repeat shows
where the CPU outside the model goes. About half a minute a repeat (the store is cached in
benches/.cache after the first fill).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from benches import bench_service as bench
from benches.harness import service_harness as harness
from benches.harness.service_harness import Plan


def measure(plan: Plan, store: Path, callers: int) -> dict[str, float]:
    """One repeat on a fresh server over `store`: the row's figures (rates, CPU ms a request)."""
    with harness.server("serve", str(store), "minilm", "fast") as srv:
        vectors = bench._settled_load(srv, "suggest", callers, plan, "vector")
        srv.wait_idle()
        before = bench.model_texts_per_second(plan, bench.suggest_texts(plan))
        text = bench._settled_load(srv, "suggest", callers, plan, "text")
        after = bench.model_texts_per_second(plan, bench.suggest_texts(plan))
    outside = bench._outside_model_row("", text)
    assert outside.baseline is not None
    return {
        "qps": text["qps"],
        "alone_before": before,
        "alone_after": after,
        "ratio": text["qps"] / max(before, after),
        "outside_model_ms": outside.value,
        "model_ms": outside.baseline,
        "vector_ms": 1000.0 * vectors["server_cpu_seconds"] / vectors["count"],
        "vector_qps": vectors["qps"],
        "p50_ms": text["p50_ms"],
    }


def describe(m: dict[str, float], callers: int) -> str:
    return (
        f"Suggest, MiniLM, {callers} callers: {m['qps']:.1f} req/s, model alone "
        f"{m['alone_before']:.1f} / {m['alone_after']:.1f} texts/s (before / after): "
        f"{m['ratio']:.3f}x; server CPU a request outside the model "
        f"{m['outside_model_ms']:.2f} ms, in it {m['model_ms']:.2f} ms; "
        f"with client vectors {m['vector_ms']:.2f} ms "
        f"({m['vector_qps']:.0f} req/s); p50 {m['p50_ms']:.1f} ms"
    )


def main(argv: list[str]) -> None:
    repeats = int(argv[0]) if argv else 1
    plan = Plan.for_run(large=False)
    small = plan.store_sizes[0]
    with tempfile.TemporaryDirectory(prefix="pml-bench-") as tmp:
        store, _ = harness.filled_store(plan, Path(tmp), small, "minilm", vectors=True)
        for _ in range(repeats):
            print(describe(measure(plan, store, 8), 8), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
