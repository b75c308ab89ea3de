"""A tenant that records and asks in one language other than English (docs/ranking.md, Lexical
index; benches/README.md, Same-language probe).

`python -m benches.calibrate.same_language [LANGUAGE ...]` (default `zh`; `zh fr` for both): an
in-process engine (default settings: MiniLM and its USE companion, RocksDB, `fast` durability)
records the dev set's executions, except that each group of the multilingual probe
(benches/data/multilingual/probe.json) holds instead one execution per probe request, on the
group's own code, whose intent is that request in one language; then the dev set's other
requests of those groups (116, the probe's "reverse other" requests) ask for them, in English and
translated by hand (benches/data/multilingual/same_language.json). Printed: hit@1, hit@5 and MRR
of each pairing of memory language and request language, the memory recorded in English first
(the baseline: the same tenant in English, asked in English and in each language) then in each
language (asked in English and in that language). About 6 minutes a memory language on an idle
2-core machine.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from benches.calibrate.multilingual import PROBE, probe
from benches.harness.devset import DevExecution, as_record, load
from benches.harness.fill import record_all
from benches.harness.quality_vectors import vectors
from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, SuggestQuery, ToolCall
from pml_server.service import Engine

SAME_LANGUAGE = PROBE.parent / "same_language.json"
K = 10


def _figures(ranks: Sequence[int]) -> str:
    n = len(ranks)
    hit1 = sum(r == 1 for r in ranks) / n
    hit5 = sum(0 < r <= 5 for r in ranks) / n
    mrr = sum(1 / r for r in ranks if r) / n
    return f"hit@1 {hit1:.3f} hit@5 {hit5:.3f} MRR {mrr:.3f} ({n} requests)"


def measure(memory_language: str, request_languages: Sequence[str]) -> dict[str, str]:
    """The figures of the requests in each of `request_languages` ("en": the dev set's own text)
    over the memory whose probe groups are recorded in `memory_language`."""
    items = probe()["queries"]
    executions, queries = load("default")
    probe_groups = {q["expected_group"] for q in items}
    probe_ids = {q["id"] for q in items}
    translated = {q["id"]: q for q in json.loads(SAME_LANGUAGE.read_text())["queries"]}
    asked = [q for q in queries if q.group in probe_groups and q.id not in probe_ids]
    kept = [e for e in executions if e.group not in probe_groups]
    first_of: dict[str, DevExecution] = {}
    for e in executions:
        first_of.setdefault(e.group, e)
    rows = vectors("minilm", [e.intent for e in kept])
    records = [as_record(i, e, rows[i]) for i, e in enumerate(kept)]
    recorded = [first_of[q["expected_group"]] for q in items]
    records += [
        ExecutionRecord(
            request_id=f"probe{n}",
            intent=q[memory_language],
            code=e.code,
            language=e.language,
            tool_calls=tuple(ToolCall(t) for t in e.tools),
        )
        for n, (q, e) in enumerate(zip(items, recorded, strict=True))
    ]
    with tempfile.TemporaryDirectory(prefix="pml-same-") as tmp:
        engine = Engine.open(EngineConfig(data_dir=Path(tmp), embedder="minilm", durability="fast"))
        try:
            assert engine.admin.wait_ready(120)
            done = record_all(engine, "t", len(records), records.__getitem__, threads=1)
            groups_of: dict[str, set[str]] = {}
            for e, result in zip([*kept, *recorded], done, strict=True):
                groups_of.setdefault(result.capability_id, set()).add(e.group)
            # the first request in another language starts the companion: wait for it
            engine.suggest("t", SuggestQuery("Trouve des restaurants à Dallas", k=1, plan_size=0))
            assert engine.admin.wait_cross_lingual(900)
            out = {}
            for language in request_languages:
                ranks = []
                for q in asked:
                    text = q.intent if language == "en" else translated[q.id][language]
                    found = engine.suggest("t", SuggestQuery(text, k=K, plan_size=0)).suggestions
                    ranks.append(
                        next(
                            (
                                n
                                for n, s in enumerate(found, 1)
                                if q.group in groups_of.get(s.capability_id, ())
                            ),
                            0,
                        )
                    )
                out[language] = _figures(ranks)
            return out
        finally:
            engine.close()


def main(argv: Sequence[str]) -> None:
    languages = [language for language in argv or ("zh",) if language != "en"]  # en: always
    for memory_language in ("en", *languages):
        asked = ("en", *languages) if memory_language == "en" else ("en", memory_language)
        for language, figures in measure(memory_language, asked).items():
            print(f"memory {memory_language}, requests {language}: {figures}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
