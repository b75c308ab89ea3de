"""Suggest p50 in process at 10k synthetic intents (client vectors), without a context and,
with `ctx`, with `previous_tools` over a store recorded in sessions of 3 (docs/ranking.md,
Sessions). Prints; writes nothing to results/. Run it on two trees, alternating, to compare
a request without a context before and after a change:

    PYTHONPATH=TREE python benches/profile/sessions_latency.py none|ctx|hub

(the file, not the module: TREE may predate it). `hub`: the store's worst case for the
workflows' followers (docs/ranking.md, Sessions, "Workflows"): every record is a workflow
`search` then one of the 400 tools (about half) or one of those tools alone, and the context
names `search`, which every workflow runs.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, SuggestQuery, ToolCall
from pml_server.service import Engine

INTENTS = 10_000
QUERIES = 600
WARMUP = 100


def main(mode: str) -> dict[str, float]:
    with_context = mode in ("ctx", "hub")
    rng = random.Random(39)
    gen = np.random.default_rng(39)
    tools = [f"tool_{n}" for n in range(400)]
    words = [f"w{n}" for n in range(2000)]

    def vector() -> tuple[float, ...]:
        v = gen.standard_normal(384).astype(np.float32)
        return tuple((v / np.linalg.norm(v)).tolist())

    with tempfile.TemporaryDirectory() as where:
        config = EngineConfig(data_dir=Path(where), embedder="minilm", durability="fast")
        engine = Engine.open(config)
        assert engine.admin.wait_ready(120)
        batch = []
        for i in range(INTENTS):
            tool = rng.choice(tools)
            steps = ("search", tool) if mode == "hub" and i % 2 else (tool,)
            record = ExecutionRecord(
                request_id=f"r{i}",
                intent=" ".join(rng.sample(words, 6)),
                code="\n".join(
                    f"const r{n} = await mcp.{t}({{x: {i}}});" for n, t in enumerate(steps)
                ),
                language="javascript",
                tool_calls=tuple(ToolCall(t) for t in steps),
                intent_embedding=vector(),
            )
            batch.append(replace(record, session_id=f"s{i // 3}") if mode == "ctx" else record)
            if len(batch) == 64:
                engine.record_many("b", batch)
                batch = []
        if batch:
            engine.record_many("b", batch)
        times: dict[str, list[float]] = {"none": [], "previous tools": []}
        for _ in range(QUERIES):
            query = SuggestQuery(" ".join(rng.sample(words, 4)), k=5, intent_embedding=vector())
            asked = [("none", query)]
            if with_context:
                from pml_server.domain.model import SuggestContext

                previous = "search" if mode == "hub" else rng.choice(tools)
                context = SuggestContext(previous_tools=(previous,))
                asked.append(("previous tools", replace(query, context=context)))
            for arm, q in asked:
                began = time.perf_counter()
                engine.suggest("b", q)
                times[arm].append(time.perf_counter() - began)
        engine.close()
    return {arm: statistics.median(t[WARMUP:]) * 1000 for arm, t in times.items() if t}


if __name__ == "__main__":
    for arm, ms in main(sys.argv[1] if len(sys.argv) > 1 else "none").items():
        print(f"{arm}: Suggest p50 {ms:.3f} ms")
