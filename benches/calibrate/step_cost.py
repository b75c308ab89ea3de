"""The step fit's cost, paired (docs/ranking.md, Steps, "Cost, made cheaper").

`python -m benches.calibrate.step_cost [ROUNDS]` opens the quality latency store (10k intents,
MiniLM, `benches/harness/quality_latency.py`) twice, once with the step fit on (the default)
and once with both step weights at 0, and asks both every latency query with its client vector,
alternating query by query (the order flipped each round), so drift on a shared machine touches
both alike (`quality_latency.step_fit_samples`, the quality suite's row with two rounds). Prints
each configuration's p50 and their ratio."""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from benches.harness.quality_dataset import load
from benches.harness.quality_latency import filled_store, step_fit_samples


def main(rounds: int) -> None:
    _, held_out = load()
    texts = [f"{q.text} {suffix}" for q in held_out for suffix in ("", "now", "please")]
    with tempfile.TemporaryDirectory(prefix="pml-step-cost-") as tmp:
        store, _ = filled_store(Path(tmp), "minilm", 10000)
        samples = step_fit_samples(store, "minilm", texts, rounds)
    p50 = {name: statistics.median(values) * 1e3 for name, values in samples.items()}
    print(
        f"on {p50['on']:.4f} ms, off {p50['off']:.4f} ms, ratio {p50['on'] / p50['off']:.3f} "
        f"({len(samples['on'])} samples each)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4)
