"""Plans for requests in other languages, asked of a served engine: the yardstick for
composing plans in the companion's space (docs/history/ranking-experiments.md, "Plans in other
languages"). Today a request in another language gets ranked suggestions and no plan
(docs/ranking.md, Other languages), so its rows show what the top suggestion alone gives.

Compose: the multi-step set's executions (../shared/devset/multistep, Seal-Tools) are captured
into a fresh store (default model, the companion on), then each request of the compose probe
(benches/data/multilingual/compose_probe.json: 15 of the set's compose requests, translated for
pml into French, German and Chinese) is asked in English and in each language with plans on;
per language: the top plan's tools in order against the expected tools, its expected-tool
recall, the answer's recall (the top plan, else the top suggestion) and how often a plan was
offered, over all and by `bench_plans.held_apart`.

False plans: the dev set's executions in a second store, each single-tool request of the
multilingual probe (benches/data/multilingual/probe.json) asked in each language with plans on;
a false plan is a plan offered while the right capability is among the suggestions.

    .venv/bin/python -m benches.calibrate.multilingual_plans [languages=fr,de]
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benches.bench_plans import _recall, fill_multistep, held_apart
from benches.calibrate.multilingual import PROBE, probe
from benches.harness.devset import as_record, load
from benches.harness.fill import record_all
from benches.harness.quality_vectors import vectors
from pml_server.config import EngineConfig
from pml_server.domain.model import SuggestQuery
from pml_server.embedding.language import is_english
from pml_server.service import Engine

COMPOSE_PROBE = PROBE.parent / "compose_probe.json"
TENANT = "bench"


def compose_items() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(COMPOSE_PROBE.read_text())["queries"]
    return data


def _engine(data_dir: Path) -> Engine:
    engine = Engine.open(EngineConfig(data_dir=data_dir, embedder="minilm", durability="fast"))
    assert engine.admin.wait_ready(600)
    return engine


def _warm(engine: Engine, tenant: str, text: str) -> None:
    """The first request in another language starts the companion: wait until it has
    embedded the tenant's intents, so every request is answered in its space."""
    engine.suggest(tenant, SuggestQuery(text, k=1, plan_size=0))
    assert engine.admin.wait_cross_lingual(900)


def compose(languages: Sequence[str]) -> dict[str, dict[str, float]]:
    items = compose_items()
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="pml-mlplans-") as tmp:
        engine = _engine(Path(tmp))
        try:
            fill_multistep(engine)
            _warm(engine, TENANT, items[0]["fr"])
            for language in ("en", *languages):
                rows: dict[str, list[tuple[float, ...]]] = {"all": [], "tune": [], "held": []}
                for q in items:
                    expected = list(q["expected_tools"])
                    result = engine.suggest(TENANT, SuggestQuery(q[language], k=5))
                    single = result.suggestions[0].pattern.tools_used if result.suggestions else ()
                    if result.plans:
                        top = result.plans[0].tools
                        recall = _recall(expected, top)
                        row = (float(list(top) == expected), recall, 1.0, recall)
                    else:
                        row = (0.0, 0.0, 0.0, _recall(expected, single))
                    rows["all"].append(row)
                    rows["held" if held_apart(q["id"]) else "tune"].append(row)
                for split, got in rows.items():
                    n = max(len(got), 1)
                    out[f"{language} {split}"] = {
                        "queries": len(got),
                        "in order": sum(r[0] for r in got) / n,
                        "plan recall": sum(r[1] for r in got) / n,
                        "offered": sum(r[2] for r in got) / n,
                        "answer recall": sum(r[3] for r in got) / n,
                    }
        finally:
            engine.close()
    return out


def false_plans(languages: Sequence[str]) -> dict[str, dict[str, float]]:
    executions, _ = load("default")
    items = [q for q in probe()["queries"] if len(q["expected_tools"]) == 1]
    rows = vectors("minilm", [e.intent for e in executions])
    records = [as_record(i, e, rows[i]) for i, e in enumerate(executions)]
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="pml-mlplans-") as tmp:
        engine = _engine(Path(tmp))
        try:
            groups_of: dict[str, set[str]] = {}
            done = record_all(engine, "t", len(records), records.__getitem__, threads=1)
            for e, result in zip(executions, done, strict=True):
                groups_of.setdefault(result.capability_id, set()).add(e.group)
            _warm(engine, "t", items[0]["fr"])
            for language in ("en", *languages):
                false = offered = 0
                for q in items:
                    result = engine.suggest("t", SuggestQuery(q[language], k=5))
                    found = any(
                        q["expected_group"] in groups_of.get(s.capability_id, ())
                        for s in result.suggestions
                    )
                    offered += bool(result.plans)
                    false += bool(result.plans) and found
                out[language] = {
                    "queries": len(items),
                    "false plans": false / len(items),
                    "offered": offered / len(items),
                }
        finally:
            engine.close()
    return out


def main(argv: Sequence[str]) -> None:
    pairs = dict(a.split("=", 1) for a in argv if "=" in a)
    default = ",".join(json.loads(COMPOSE_PROBE.read_text())["languages"])
    languages = tuple(pairs.get("languages", default).split(","))
    items = compose_items()
    for language in languages:
        english = sum(is_english(q[language]) for q in items)
        print(f"{language}: {english}/{len(items)} compose requests read as English")
    for key, figures in compose(languages).items():
        print(f"compose {key}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()))
    for key, figures in false_plans(languages).items():
        print(f"single-tool {key}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
