"""Replay the semantic aggregation offline over the dev set (no server): docs/ranking.md,
"What limits served hit@1".

`python -m benches.calibrate.replay_semantic [default|skewed]`: every group's intent cosines from
the cached vectors (`benches.harness.quality_vectors`), BM25 from the real `LexicalIndex` over the
same pattern documents the engine builds (tool names, then every intent's words), every group
scored (so no ANN miss), fused with the default noisy-or; prints fused hit@1 / MRR on the tune
and check splits (and the bench's 1,000-query sample of the skewed variant) for semantic parts
weighing a group's best three cosines (1, w, w^2) and a few BM25 settings. The dev set's groups
are one pattern each (one code per group), so a group's intents are its pattern's.
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np
from numpy.typing import NDArray

from benches.harness.devset import load
from benches.harness.quality_devset import split_of
from benches.harness.quality_vectors import vectors
from pml_server.ranking import LexicalIndex, RankingConfig

CONFIG = RankingConfig()
LEXICAL_LIMIT = 40  # k * overfetch, as served


def main(variant: str) -> None:
    executions, queries = load(variant)
    sample = None
    if variant == "skewed":
        by_hash = sorted(queries, key=lambda q: hashlib.sha1(q.id.encode()).hexdigest())
        sample = {q.id for q in by_hash[:1000]}
    texts = sorted({e.intent for e in executions} | {q.intent for q in queries})
    vec = dict(zip(texts, vectors("minilm", texts), strict=True))
    groups = sorted({e.group for e in executions})
    index_of = {g: i for i, g in enumerate(groups)}
    ordered = sorted(executions, key=lambda e: index_of[e.group])
    intents = np.stack([vec[e.intent] for e in ordered]).astype(np.float32)
    group_of = np.array([index_of[e.group] for e in ordered])
    starts = np.searchsorted(group_of, np.arange(len(groups)))
    sizes = np.bincount(group_of, minlength=len(groups))
    # per query and group: the three best cosines (NaN where the group has fewer intents)
    top = np.full((len(queries), len(groups), 3), np.nan, dtype=np.float32)
    for i, q in enumerate(queries):
        row = intents @ vec[q.intent]
        best_first = row[np.lexsort((-row, group_of))]
        for r in range(3):
            ok = sizes > r
            top[i, ok, r] = best_first[starts[ok] + r]
    expected = np.array([index_of[q.group] for q in queries])
    tune = np.array([split_of(q) == "tune" for q in queries])
    chosen = np.array([sample is None or q.id in sample for q in queries])

    def bm25(b: float, k1: float) -> NDArray[np.float64]:
        lexical = LexicalIndex(k1, b)
        seen: set[str] = set()
        for e in ordered:
            lexical.add_terms(
                e.group, e.intent if e.group in seen else f"{' '.join(e.tools)} {e.intent}"
            )
            seen.add(e.group)
        out = np.zeros((len(queries), len(groups)))
        for i, q in enumerate(queries):
            for group, score in lexical.search(q.intent, LEXICAL_LIMIT):
                out[i, index_of[group]] = score
        return out

    def semantic(w: float) -> NDArray[np.float64]:
        weights = np.array([1.0, w, w * w])
        present = ~np.isnan(top)
        summed = (np.nan_to_num(top, nan=0.0) * weights).sum(-1)
        return np.maximum(summed / (present * weights).sum(-1), 0.0)

    def report(name: str, sem: NDArray[np.float64], raw: NDArray[np.float64]) -> None:
        lex = raw / (raw + CONFIG.lexical_half_score)
        match = 1 - (1 - sem) * (1 - CONFIG.lexical_weight * lex)
        ranks = (match > match[np.arange(len(queries)), expected][:, None]).sum(1) + 1
        hit = ranks == 1
        rr = np.where(ranks <= 5, 1.0 / ranks, 0.0)
        cells = [f"tune {hit[tune].mean():.3f} ({rr[tune].mean():.4f})"]
        cells.append(f"check {hit[~tune].mean():.3f} ({rr[~tune].mean():.4f})")
        if sample is not None:
            cells.append(f"sample {hit[chosen].mean():.3f} ({rr[chosen].mean():.4f})")
        print(f"{name:<28} " + "  ".join(cells), flush=True)

    print(f"{variant}: {len(queries)} queries, {len(groups)} groups; fused hit@1 (MRR)")
    lexical = bm25(0.75, 1.2)
    for w in (0.0, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5):
        report(f"w {w}", semantic(w), lexical)
    for b, k1 in ((0.5, 1.2), (0.3, 1.2), (0.0, 1.2), (0.75, 2.0)):
        report(f"w 0, BM25 b {b} k1 {k1}", semantic(0.0), bm25(b, k1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "default")
