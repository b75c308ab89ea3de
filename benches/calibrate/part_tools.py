"""Which tools a multi-tool request points to, from its one vector against from its parts'
vectors (docs/ranking.md, Steps, "Per-part vectors").

`python -m benches.calibrate.part_tools` builds each tool's profile from the dev set's
executions (the unit mean of the MiniLM vectors of every intent calling it, as the ranking
table sums them) and, for each of the dev set's multi-tool queries, reports the share of its
expected tools covered by: the whole request's best two and best |T| tools; the union of each
request part's best tool (`plans.split_request_spans`), with the part's vector pooled from the
request's one model run (`plans.pooled_part_vectors`, what the plans use), its raw mean token
state, or the part embedded alone (a model run per part); and the whole request's best tool
added to the pooled parts' union. A diagnostic: it reads every multi-tool query, `tune` and
`check` alike, and tunes nothing.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from numpy.typing import NDArray

from benches.harness.devset import load
from benches.harness.quality_devset import split_of
from benches.harness.quality_vectors import vectors
from pml_server.embedding import make_embedder
from pml_server.embedding.base import EmbedderWrapper
from pml_server.ranking.plans import pooled_part_vectors, split_request_spans


def _best(profiles: NDArray[np.float32], tools: list[str], row: NDArray[np.float32]) -> str:
    return tools[int(np.argmax(profiles @ row))]


def main() -> None:
    executions, queries = load()
    texts = sorted({e.intent for e in executions})
    vector = dict(zip(texts, vectors("minilm", texts), strict=True))
    sums: dict[str, NDArray[np.float32]] = {}
    for e in executions:
        for t in set(e.tools):
            sums[t] = sums.get(t, 0) + vector[e.intent]
    tools = sorted(sums)
    profiles = np.stack([sums[t] / np.linalg.norm(sums[t]) for t in tools]).astype(np.float32)
    embedder = make_embedder("minilm", cache_size=64)
    assert isinstance(embedder, EmbedderWrapper)
    cover: dict[str, list[float]] = defaultdict(list)
    split: list[bool] = []
    tune: list[bool] = []
    for q in queries:
        if not q.multi_tool:
            continue
        expected = set(q.tools)
        parts, _, spans = split_request_spans(q.intent)
        pools = embedder.embed_spans(q.intent, spans)
        assert pools is not None
        order = np.argsort(-(profiles @ (pools.vector / np.linalg.norm(pools.vector))))
        parted_rows = pooled_part_vectors(pools.mean, pools.spans)
        pooled = {
            _best(profiles, tools, row)
            for row, ok in zip(parted_rows, pools.found, strict=True)
            if ok and np.any(row)
        }
        raw = {
            _best(profiles, tools, row / np.linalg.norm(row)) for row in pools.spans if np.any(row)
        }
        alone = {_best(profiles, tools, row) for row in embedder.embed(list(parts))}
        chosen = {
            "whole request, best 2": {tools[i] for i in order[:2]},
            "whole request, best |T|": {tools[i] for i in order[: len(expected)]},
            "parts pooled (plans), each part's best": pooled,
            "parts' raw token mean, each part's best": raw,
            "parts embedded alone, each part's best": alone,
            "parts pooled + whole request's best": pooled | {tools[order[0]]},
        }
        for name, found in chosen.items():
            cover[name].append(len(expected & found) / len(expected))
        split.append(len(parts) > 1)
        tune.append(split_of(q) == "tune")
    parted = np.array(split)
    print(f"multi-tool queries {len(split)}, split into 2+ parts {int(parted.sum())}")
    print("| tools chosen | all | split into 2+ parts | one part | tune |")
    print("| --- | --- | --- | --- | --- |")
    for name, shares in cover.items():
        a = np.array(shares)
        print(
            f"| {name} | {a.mean():.3f} | {a[parted].mean():.3f} | {a[~parted].mean():.3f} | "
            f"{a[np.array(tune)].mean():.3f} |"
        )


if __name__ == "__main__":
    main()
