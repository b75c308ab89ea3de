"""Calibrate the fusion defaults on the dev queries (never on the reported held-out ones).

`python -m benches.calibrate.ranking [hashing|minilm]`: captures the labelled executions once,
records every candidate's semantic and raw lexical score for each dev query (explain, k=5, so
the engine retrieves exactly what the benchmark's queries retrieve), then replays `rank`
offline over a grid of semantic_weight x lexical_weight x lexical_half_score and prints hit@1
and MRR per cell. The chosen cells are the families' defaults in pml_server/ranking/config.py.
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from benches.harness.quality_dataset import HeldOutQuery, load
from benches.harness.quality_engine import TENANT, capture_labelled, open_engine
from pml_server.domain.model import SuggestQuery
from pml_server.ranking import RankingConfig
from pml_server.service import wall_clock_ms
from testing.ranking_oracle import Candidate, rank

PROBE = RankingConfig()
SEMANTIC_WEIGHTS = (1.0, 0.8, 0.6, 0.5, 0.4, 0.3)
WEIGHTS = (0.0, 0.3, 0.5, 0.7, 0.9, 1.0)
HALF_SCORES = (4.0, 6.0, 10.0, 15.0)


def _raw(normalized: float) -> float:
    h = PROBE.lexical_half_score
    return 0.0 if normalized <= 0 else h * normalized / (1.0 - normalized)


def main(embedder: str) -> None:
    executions, queries = load(split="dev_queries")
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(Path(tmp), embedder, PROBE)
        label_of = capture_labelled(engine, executions)
        cases = []
        for q in queries:
            probe = SuggestQuery(q.text, k=5, min_match=0.0, min_success=0.0, explain=True)
            result = engine.suggest(TENANT, probe)
            cands = [
                Candidate(s.capability_id, s.pattern, s.score.semantic, _raw(s.score.lexical))
                for s in result.suggestions
            ]
            for f in result.filtered:
                view = engine.get_pattern(TENANT, f.pattern_id)
                assert f.score is not None
                cands.append(
                    Candidate(f.capability_id, view, f.score.semantic, _raw(f.score.lexical))
                )
            cases.append((q, cands))
        now = wall_clock_ms()  # the engine runs on the wall clock too
        engine.close()
    print(f"{embedder}: {len(cases)} dev queries; hit@1 / MRR; rows lexical_weight, cols half")
    for semantic in SEMANTIC_WEIGHTS:
        print(f"semantic_weight {semantic}")
        print("weight " + " ".join(f"{h:>13}" for h in HALF_SCORES))
        for weight in WEIGHTS:
            cells = []
            for half in HALF_SCORES:
                config = replace(
                    PROBE, semantic_weight=semantic, lexical_weight=weight, lexical_half_score=half
                )
                hit1, mrr = _replay(cases, label_of, config, now)
                cells.append(f"{hit1:.3f} / {mrr:.3f}")
            print(f"{weight:<6} " + " ".join(cells))


def _replay(
    cases: list[tuple[HeldOutQuery, list[Candidate]]],
    label_of: dict[str, str],
    config: RankingConfig,
    now: int,
) -> tuple[float, float]:
    """hit@1 and MRR of `rank` with `config` over the recorded candidates."""
    ranks = []
    for q, cands in cases:
        query = SuggestQuery(q.text, k=5, min_match=0.0, min_success=0.0)
        labels: list[str] = []
        for s in rank(query, cands, config, now).suggestions:
            if (lab := label_of.get(s.capability_id, "?")) not in labels:
                labels.append(lab)
        ranks.append(labels.index(q.label) + 1 if q.label in labels else 0)
    hit1 = sum(r == 1 for r in ranks) / len(ranks)
    mrr = sum(1 / r for r in ranks if r) / len(ranks)
    return hit1, mrr


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "minilm")
