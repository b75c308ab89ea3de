"""Weak matches on the dev set: what raising `min_match` would cost, and how often the
cautions `pml suggest` prints (pml_server/domain/caution.py) land on right and wrong answers.

`python -m benches.calibrate.min_match [minilm|hashing ...]` fills a real `pml serve` with the
default dev set (like the quality bench), asks every query (all 923: `min_match` is a filter,
it cannot reorder, so there is nothing to tune on the tune split alone) for k = 20 at min_match
0 and replays the filter offline: served hit@1 / hit@5 / MRR over the first 5 that pass, the
wrong suggestions shown per query, and the share of answers left empty, per threshold. Then,
at the embedder's default threshold, the shown suggestions (top 5) by match band (how many are
the expected group) and each caution's hits on right and wrong ones. docs/ranking.md, Weak
matches, has the tables and the decision."""

from __future__ import annotations

import itertools
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from benches.harness.devset import load
from benches.harness.quality_devset import K, Server, _fill, _vector_map
from pml_server.domain.caution import WEAK_MATCH, cautions
from pml_server.ranking.config import FAMILY_DEFAULTS, RankingConfig

THRESHOLDS = (0.0, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
BANDS = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.01)


@dataclass(frozen=True)
class Shown:
    group: str
    match: float
    tools: tuple[str, ...]


def collect(embedder: str) -> list[tuple[str, str, list[Shown]]]:
    """(intent, expected group, suggestions best first at min_match 0) per query."""
    executions, queries = load("default")
    vec = _vector_map(embedder, [e.intent for e in executions] + [q.intent for q in queries])
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), embedder)
        try:
            with server.client() as client:
                store = _fill(client, executions, vec)
                for q in queries:
                    emb = vec[q.intent].tolist() if vec is not None else ()
                    reply = client.suggest(q.intent, 20, min_match=0.0, intent_embedding=emb)
                    shown = [
                        Shown(
                            store.group_of.get(s.capability, "?"),
                            s.score.match,
                            tuple(s.pattern.tools_used),
                        )
                        for s in reply.suggestions
                    ]
                    out.append((q.intent, q.group, shown))
        finally:
            server.stop()
    return out


def _first_groups(items: list[Shown]) -> list[Shown]:
    seen: set[str] = set()
    kept = []
    for s in items:
        if s.group not in seen:
            seen.add(s.group)
            kept.append(s)
    return kept[:K]


def report(embedder: str, cases: list[tuple[str, str, list[Shown]]]) -> None:
    default = FAMILY_DEFAULTS.get(embedder, RankingConfig()).min_match
    n = len(cases)
    print(f"\n{embedder}: {n} queries, default min_match {default}")
    print("| min_match | hit@1 | hit@5 | MRR | wrong shown / query | empty answers |")
    print("| --- | --- | --- | --- | --- | --- |")
    for t in THRESHOLDS:
        hit1 = hit5 = rr = wrong = empty = 0.0
        for _, expected, items in cases:
            top = _first_groups([s for s in items if s.match >= t])
            groups = [s.group for s in top]
            if not top:
                empty += 1
            if expected in groups:
                rank = groups.index(expected) + 1
                hit1 += rank == 1
                hit5 += 1
                rr += 1 / rank
            wrong += sum(g != expected for g in groups)
        mark = " (default)" if t == default else ""
        print(
            f"| {t}{mark} | {hit1 / n:.3f} | {hit5 / n:.3f} | {rr / n:.4f} | "
            f"{wrong / n:.2f} | {empty / n:.3f} |"
        )

    bands: dict[tuple[float, float], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    notes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for intent, expected, items in cases:
        top = _first_groups([s for s in items if s.match >= default])
        for rank, s in enumerate(top, 1):
            right = s.group == expected
            band = next((lo, hi) for lo, hi in itertools.pairwise(BANDS) if s.match < hi)
            cell = bands[band]
            cell[0 if right else 1] += 1
            if rank == 1:
                cell[2 if right else 3] += 1
            for c in cautions(intent, s.tools, s.match):
                notes[c.kind][0 if right else 1] += 1
    print(f"\nshown at min_match {default} (top {K}), by match band")
    print("| match | right | wrong | share right | at rank 1: right | wrong |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (lo, hi), (right, wrong_, r1, w1) in sorted(bands.items()):
        share = right / (right + wrong_) if right + wrong_ else 0.0
        band = f"{lo:.1f} to {min(hi, 1.0):.1f}"
        print(f"| {band} | {right} | {wrong_} | {share:.2f} | {r1} | {w1} |")
    print(f"\ncautions on the shown suggestions (weak: match < {WEAK_MATCH})")
    print("| caution | on right answers | on wrong answers |")
    print("| --- | --- | --- |")
    for kind in ("contradicts", "weak"):
        right, wrong_ = notes[kind]
        print(f"| {kind} | {right} | {wrong_} |")


def main(names: list[str]) -> None:
    for embedder in names or ["minilm", "hashing"]:
        report(embedder, collect(embedder))


if __name__ == "__main__":
    main(sys.argv[1:])
