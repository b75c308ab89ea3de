"""Replay the ranking settings over the dev set's `tune` queries (never the `check` ones).

`python -m benches.calibrate.devset [default|skewed] [minilm|hashing] [--check]`: fills a real
`pml serve` like the quality bench, records every candidate's score parts for each tune query
(explain at min_match 0, so the retrieval is exactly the served one), then replays the formula
offline over lexical_weight x lexical_half_score x usage_weight and prints served hit@1 / MRR
per cell (no failures in the set, so reliability is 1 throughout). With `--check`, after the
choice: the usage-weight row on the held-apart `check` queries and on the multi-tool requests
too. docs/ranking.md, Quality on the development set, has the choice; the tables are in
docs/history/ranking-experiments.md, Usage weight and Replays of the fusion on the tune queries.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from benches.harness.devset import load
from benches.harness.quality_devset import K, Server, _fill, _rank, _vector_map, metrics, split_of
from pml_server.ranking import RankingConfig

PROBE = RankingConfig()
LEXICAL_WEIGHTS = (0.0, 0.5, 0.7, 0.8, 0.9, 1.0)
HALF_SCORES = (5.0, 10.0, 15.0, 25.0)
USAGE_WEIGHTS = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.2)
# the skewed variant (3k tune queries): the usage weights at the fusion defaults only
SKEWED_GRID = ((0.9,), (10.0,))


@dataclass(frozen=True)
class Part:
    group: str
    pattern: str
    semantic: float
    bm25: float
    usage_saturation: float  # min(1, ln(1+n)/ln(1+100)), recovered from the usage part
    success_estimate: float


# per query: its split and source tags, the expected group, every candidate's parts
Tagged = list[tuple[frozenset[str], str, list[Part]]]


def _raw(normalized: float) -> float:
    h = PROBE.lexical_half_score
    return 0.0 if normalized <= 0 else h * normalized / (1.0 - normalized)


def collect(variant: str, embedder: str, slices: tuple[str, ...] = ("tune",)) -> Tagged:
    """Every candidate's parts for the queries of `slices`, each tagged with its split and
    source (single or multi)."""
    executions, queries = load(variant)
    queries = [q for q in queries if split_of(q) in slices or ("multi" in slices and q.multi_tool)]
    vec = _vector_map(embedder, [e.intent for e in executions] + [q.intent for q in queries])
    cases: list[tuple[str, list[Part]]] = []
    tags: list[set[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), embedder)
        try:
            with server.client() as client:
                store = _fill(client, executions, vec)
                w = PROBE.usage_weight
                for q in queries:
                    emb = vec[q.intent].tolist() if vec is not None else ()
                    reply = client.suggest(
                        q.intent, K, explain=True, min_match=0.0, intent_embedding=emb
                    )
                    items = [(s.capability, s.pattern.name, s.score) for s in reply.suggestions]
                    items += [(f.capability, f.pattern, f.score) for f in reply.filtered]
                    parts = [
                        Part(
                            store.group_of.get(cap, "?"),
                            pat,
                            sc.semantic,
                            _raw(sc.lexical),
                            (sc.usage - (1 - w)) / w,
                            sc.success_estimate,
                        )
                        for cap, pat, sc in items
                    ]
                    cases.append((q.group, parts))
                    tags.append({split_of(q), "multi" if q.multi_tool else "single"})
        finally:
            server.stop()
    return [(frozenset(t), g, p) for t, (g, p) in zip(tags, cases, strict=True)]


def _in(tagged: Tagged, tag: str) -> list[tuple[str, list[Part]]]:
    """The cases of one slice (tune, check, multi or single): (expected group, parts)."""
    return [(group, parts) for tags, group, parts in tagged if tag in tags]


def replay(cases: list[tuple[str, list[Part]]], config: RankingConfig) -> dict[str, float]:
    ranks = []
    for expected, parts in cases:
        scored = []
        for p in parts:
            lex = p.bm25 / (p.bm25 + config.lexical_half_score) if p.bm25 > 0 else 0.0
            match = 1 - (1 - config.semantic_weight * p.semantic) * (
                1 - config.lexical_weight * lex
            )
            if match < config.min_match or p.success_estimate < config.min_success:
                continue
            usage = 1 - config.usage_weight + config.usage_weight * p.usage_saturation
            scored.append((-(match * usage), p.pattern, p.group))
        ranks.append(_rank([g for _, _, g in sorted(scored)], expected))
    return metrics(ranks)


def main(variant: str, embedder: str, check: bool) -> None:
    tagged = collect(variant, embedder, ("tune", "check", "multi") if check else ("tune",))
    cases = _in(tagged, "tune")
    base = (
        RankingConfig()
        if embedder != "hashing"
        else RankingConfig(semantic_weight=0.5, min_match=0.15)
    )
    print(f"{variant} {embedder}: {len(cases)} tune queries; served hit@1 / MRR")
    weights, halves = SKEWED_GRID if variant == "skewed" else (LEXICAL_WEIGHTS, HALF_SCORES)
    for usage_weight in USAGE_WEIGHTS:
        print(f"usage_weight {usage_weight}")
        print("lexical_weight " + " ".join(f"{h:>13}" for h in halves))
        for weight in weights:
            cells = []
            for half in halves:
                m = replay(cases, _config(base, weight, half, usage_weight))
                cells.append(f"{m['hit@1']:.3f} / {m['MRR']:.3f}")
            print(f"{weight:<14} " + " ".join(cells), flush=True)
    if check:
        print(
            "usage_weight at the fusion defaults, hit@1 / MRR: tune, check (held apart), multi-tool"
        )
        for usage_weight in USAGE_WEIGHTS:
            config = _config(base, base.lexical_weight, base.lexical_half_score, usage_weight)
            cells = []
            for tag in ("tune", "check", "multi"):
                m = replay(_in(tagged, tag), config)
                cells.append(f"{m['hit@1']:.3f} / {m['MRR']:.3f}")
            print(f"{usage_weight:<8} " + "  ".join(cells), flush=True)


def _config(base: RankingConfig, weight: float, half: float, usage_weight: float) -> RankingConfig:
    return RankingConfig(
        **{
            **base.__dict__,
            "lexical_weight": weight,
            "lexical_half_score": half,
            "usage_weight": usage_weight,
        }
    )


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(
        args[0] if args else "default",
        args[1] if len(args) > 1 else "minilm",
        "--check" in sys.argv,
    )
