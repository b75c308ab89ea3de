"""The reverse probes (benches/README.md, Multilingual probe) asked of a real engine rather than
replayed: docs/ranking.md, Other languages.

`python -m benches.calibrate.multilingual_served [en fr de es zh]`: for each language, an
in-process engine (default settings: MiniLM and its USE companion, RocksDB, `fast` durability)
records the dev set's executions with the probe's groups replaced by the probe's requests in
that language (MiniLM's vectors come from the bench cache as `intent_embedding`, so only the
companion runs), then every reverse request is asked in English through `Engine.suggest`
(k = 5, no plans); hit@5 counts a suggestion whose capability holds an execution of the
expected group. What the replay (`benches/calibrate/multilingual.py`) cannot see: the ANN, the
fetch limit, capture's grouping.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benches.calibrate.multilingual import LANGUAGES, probe
from benches.harness.devset import load
from benches.harness.quality_vectors import vectors
from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, SuggestQuery, ToolCall
from pml_server.service import Engine

BATCH = 64  # records a record_many call takes at most (domain/limits.py)


def reverse_served(language: str) -> dict[str, float]:
    """hit@5 of the `same` and `other` reverse requests over the memory recorded in
    `language` (en: the baseline)."""
    executions, queries = load("default")
    items = probe()["queries"]
    probe_groups = {q["expected_group"] for q in items}
    probe_ids = {q["id"] for q in items}
    entries = [
        (e.group, e.intent, e.code, e.language, e.tools)
        for e in executions
        if e.group not in probe_groups
    ]
    entries += [
        (
            q["expected_group"],
            q[language],
            f"await mcp.{q['expected_tools'][0]}({{}})",
            "javascript",
            tuple(q["expected_tools"]),
        )
        for q in items
    ]
    rows = vectors("minilm", [text for _, text, *_ in entries])
    records = [
        ExecutionRecord(
            request_id=f"x{i}",
            intent=text,
            code=code,
            language=code_language,
            tool_calls=tuple(ToolCall(t) for t in tools),
            intent_embedding=tuple(float(v) for v in rows[i]),
        )
        for i, (_, text, code, code_language, tools) in enumerate(entries)
    ]
    tune_groups = {q["expected_group"] for q in items if q["split"] == "tune"}
    other = [
        (q.intent, q.group) for q in queries if q.group in probe_groups and q.id not in probe_ids
    ]
    asked = {
        "same": [(q["en"], q["expected_group"]) for q in items],
        "other": other,
        # the reverse probes' parts, as the replay splits them (by the probe item's group)
        "other tune": [(t, g) for t, g in other if g in tune_groups],
        "other check": [(t, g) for t, g in other if g not in tune_groups],
        # hit@1 of the groups still recorded in English (what the others cost them)
        "english hit@1": [(q.intent, q.group) for q in queries if q.group not in probe_groups],
    }
    with tempfile.TemporaryDirectory(prefix="pml-ml-") as tmp:
        config = EngineConfig(data_dir=Path(tmp), embedder="minilm", durability="fast")
        engine = Engine.open(config)
        try:
            assert engine.admin.wait_ready(120)
            groups_of: dict[str, set[str]] = {}
            for first in range(0, len(records), BATCH):
                done = engine.record_many("t", records[first : first + BATCH])
                for entry, result in zip(entries[first : first + BATCH], done, strict=True):
                    if isinstance(result, Exception):
                        raise result
                    groups_of.setdefault(result.capability_id, set()).add(entry[0])
            assert engine.admin.wait_cross_lingual(900)
            out = {}
            for kind, requests in asked.items():
                hits = 0
                top = 1 if kind == "english hit@1" else 5
                for text, group in requests:
                    found = engine.suggest("t", SuggestQuery(text, k=top, plan_size=0))
                    hits += any(
                        group in groups_of.get(s.capability_id, ()) for s in found.suggestions
                    )
                out[kind] = hits / len(requests)
            return out
        finally:
            engine.close()


def main(argv: Sequence[str]) -> None:
    for language in argv or ("en", *LANGUAGES):
        figures = reverse_served(language)
        print(f"{language}: " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
