"""Requests in French, German, Spanish and Chinese against a memory recorded in English, and
the reverse (docs/ranking.md, Other languages).

Rows:

- `probe hit@5 <language>` (and hit@1): the multilingual probe's requests
  (benches/data/multilingual/probe.json, translations of dev-set requests written for this
  project) against the dev-set memory, with the default settings (MiniLM plus its USE
  companion for requests that are not English), baseline: the same requests in English, same
  run. Target: hit@5 >= 0.9x English. Replayed offline through the served formula
  (`benches/calibrate/multilingual.py`: every group scored, min_match applied), tune and check parts
  together; `extra` has each part.
- `served probe hit@5 <language>`: the same probe asked of a real engine (the dev set recorded
  through `record_many`, each request through `Engine.suggest`: ANN, grouping, the step factor
  and its tool profiles), baseline: the same requests in English, served. Target 0.9x.
  Also for Italian, Portuguese, Dutch, Polish, Turkish and Russian (the same 52 requests,
  `probe_more.json`), no target: they say whether languages the probe was not tuned on reach
  the companion (`extra` says how many the language guess reads as English).
- `english hit@1 (923 dev queries)`: the same replay of every dev query, baseline MiniLM alone
  (the companion must not move English: target ratio >= 0.985, i.e. within 0.01 of 0.70).
- `reverse hit@5 <language>`: the reverse direction (benches/README.md, Multilingual probe):
  the probe groups recorded in that language (each holds the probe's requests of it, in
  translation; every other group stays in English), asked in English by the probe's own
  requests (`same`) or by the dev set's other requests of those groups (`other`: harder, no
  translation pair), baseline: the same groups recorded in English. Target 0.9x.
- `reverse: hit@1 of the English-recorded groups' ...`: what the groups recorded in another
  language cost the others, whose 755 dev requests are asked over the same memories.
- `reverse hit@5 (8 groups ...)`: the dev set's English queries of 8 groups whose executions
  were hand-translated, baseline: the same queries against the English recordings.
- `embedding texts/s`: one real dev request a call (the capture path's shape), the companion
  against MiniLM; `model memory`: resident MiB a fresh process gains loading and running each.
- `capture ms`: unary captures of real dev executions into an in-process engine (RocksDB,
  `fast` durability), against `cross_lingual = "none"` in the same run: for a tenant that
  only asks in English (the companion computes nothing for it) and for one that uses the
  companion (timed until the companion's thread has embedded every capture too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benches.calibrate.multilingual import LANGUAGES, OPTIONS, SERVED, measure
from benches.calibrate.multilingual_misses import MORE_LANGUAGES, probe_items, served
from benches.common import Row
from benches.harness.devset import available, load
from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, SuggestQuery, ToolCall
from pml_server.embedding.language import is_english
from pml_server.service import Engine

SUITE = "multilingual"
ENGLISH_ONLY = "minilm"
# the served option before English requests read intents in other languages in the
# companion's space (the reverse direction)
BEFORE = next(name for name, option in OPTIONS.items() if not option.mixed)


def quality_rows() -> list[Row]:
    served = measure(OPTIONS[SERVED], check=True)
    english_only = measure(OPTIONS[ENGLISH_ONLY], check=True)
    before_reverse = measure(OPTIONS[BEFORE], check=True)
    parts = {part: measure(OPTIONS[SERVED], check=True, only=part) for part in ("tune", "check")}
    rows = []
    for language in LANGUAGES:
        for metric in ("hit@5", "hit@1"):
            rows.append(
                Row(
                    SUITE,
                    f"probe {metric} {language} (52 requests)",
                    served[f"probe {language}"][metric],
                    "",
                    served["probe en"][metric],
                    "the same requests in English",
                    target=0.9 if metric == "hit@5" else None,
                    extra={
                        part: {
                            language: figures[f"probe {language}"][metric],
                            "en": figures["probe en"][metric],
                        }
                        for part, figures in parts.items()
                    }
                    | {"minilm alone": english_only[f"probe {language}"][metric]},
                )
            )
    english = served["english, 923 dev queries"]
    before = english_only["english, 923 dev queries"]
    rows.append(
        Row(
            SUITE,
            "english hit@1 (923 dev queries)",
            english["hit@1"],
            "",
            before["hit@1"],
            "minilm alone",
            target=0.985,
            extra={"MRR": english["MRR"], "MRR minilm alone": before["MRR"]},
        )
    )
    mixed = served["english, 923, mixed-tenant weight"]
    rows.append(
        Row(
            SUITE,
            "english hit@1 (923 dev queries) at the lexical weight of a tenant holding intents"
            " in other languages",
            mixed["hit@1"],
            "",
            before["hit@1"],
            "minilm alone",
            target=0.985,
            extra={"MRR": mixed["MRR"], "MRR minilm alone": before["MRR"]},
        )
    )
    for language in LANGUAGES:
        for kind, what in (
            ("same", "the probe's English requests, 52"),
            ("other", "the dev set's other English requests of those groups"),
        ):
            key = f"reverse {kind}"
            rows.append(
                Row(
                    SUITE,
                    f"reverse hit@5 {language}: probe groups recorded in {language}, {what}",
                    served[f"{key} {language}"]["hit@5"],
                    "",
                    served[f"{key} en"]["hit@5"],
                    "the same groups recorded in English",
                    target=0.9,
                    extra={
                        "hit@1": served[f"{key} {language}"]["hit@1"],
                        "hit@1 English recordings": served[f"{key} en"]["hit@1"],
                        "before (English requests by minilm alone)": before_reverse[
                            f"{key} {language}"
                        ]["hit@5"],
                    }
                    | {
                        part: {
                            language: figures[f"{key} {language}"]["hit@5"],
                            "en": figures[f"{key} en"]["hit@5"],
                        }
                        for part, figures in parts.items()
                    },
                )
            )
    costs = {language: served[f"reverse english {language}"]["hit@1"] for language in LANGUAGES}
    rows.append(
        Row(
            SUITE,
            "reverse: hit@1 of the English-recorded groups' dev requests beside groups recorded"
            " in another language (worst language)",
            min(costs.values()),
            "",
            served["reverse english en"]["hit@1"],
            "the probe groups recorded in English",
            target=0.985,
            extra=costs,
        )
    )
    rows.append(
        Row(
            SUITE,
            "reverse hit@5 (8 groups' executions hand-translated, 8 English queries)",
            served["reverse, translated memory"]["hit@5"],
            "",
            served["reverse, English memory"]["hit@5"],
            "English recordings",
            extra={
                "hit@1": served["reverse, translated memory"]["hit@1"],
                "minilm alone": english_only["reverse, translated memory"]["hit@5"],
            },
        )
    )
    return rows


_MODEL_COST = """
import json, resource, sys, time
from benches.harness.devset import load
from pml_server.embedding import make_embedder
name, n = sys.argv[1], int(sys.argv[2])
_, queries = load("default")
texts = [q.intent for q in queries][:n]
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
before = rss()
started = time.perf_counter()
embedder = make_embedder(name, cache_size=1)
loaded = time.perf_counter() - started
started, cpu = time.perf_counter(), time.process_time()
for text in texts:
    embedder.embed([text])
seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
print(json.dumps({"rate": len(texts) / seconds, "cpu_ms": 1000 * cpu / len(texts),
                  "load_s": loaded, "mib": rss() - before}))
"""


def _model_cost(name: str, texts: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", _MODEL_COST, name, str(texts)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    ).stdout
    cost: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return cost


def model_rows(texts: int) -> list[Row]:
    minilm, use = _model_cost("minilm", texts), _model_cost("use", texts)
    return [
        Row(
            SUITE,
            "embedding texts/s, one real request a call (use)",
            use["rate"],
            "texts/s",
            minilm["rate"],
            "minilm",
            extra={"cpu ms a text": use["cpu_ms"], "minilm cpu ms": minilm["cpu_ms"]},
        ),
        Row(
            SUITE,
            "model memory (use)",
            use["mib"],
            "MiB",
            minilm["mib"],
            "minilm",
            lower_is_better=True,
            extra={"load s": use["load_s"], "minilm load s": minilm["load_s"]},
        ),
    ]


def _capture_ms(cross_lingual: str, count: int, active: bool) -> float:
    """Milliseconds a unary capture of real dev executions, in-process; with `active`, the
    tenant uses the companion (a request in another language came first) and the time runs
    until its thread has embedded every capture too."""
    executions, _ = load("default")
    chosen = executions[:: max(1, len(executions) // (count + 1))][: count + 1]
    records = [
        ExecutionRecord(
            request_id=f"x{i}",
            intent=e.intent,
            code=e.code,
            language=e.language,
            tool_calls=tuple(ToolCall(t) for t in e.tools),
        )
        for i, e in enumerate(chosen)
    ]
    with tempfile.TemporaryDirectory(prefix="pml-ml-") as tmp:
        config = EngineConfig(
            data_dir=Path(tmp), embedder="minilm", durability="fast", cross_lingual=cross_lingual
        )
        engine = Engine.open(config)
        try:
            assert engine.admin.wait_ready(120)
            engine.record("bench", records[0])
            if active:
                engine.suggest("bench", SuggestQuery("Trouve des restaurants à Dallas", k=1))
            started = time.perf_counter()
            for record in records[1:]:
                engine.record("bench", record)
            assert engine.admin.wait_cross_lingual(600)
            return 1000 * (time.perf_counter() - started) / count
        finally:
            engine.close()


def capture_rows(count: int) -> list[Row]:
    without = _capture_ms("none", count, active=False)
    english_only = _capture_ms("use", count, active=False)
    active = _capture_ms("use", count, active=True)
    return [
        Row(
            SUITE,
            f"capture ms, unary, {count} real dev executions, English-only tenant",
            english_only,
            "ms",
            without,
            "cross_lingual none",
            lower_is_better=True,
        ),
        Row(
            SUITE,
            f"capture ms, unary, {count} real dev executions, tenant using the companion"
            " (until its thread has embedded them)",
            active,
            "ms",
            without,
            "cross_lingual none",
            lower_is_better=True,
        ),
    ]


def served_rows() -> list[Row]:
    """The probe asked of a real engine (`benches/calibrate/multilingual_misses.py`: the dev
    set recorded, every probe request asked through `Engine.suggest` in each language), which
    the replay above cannot see: the ANN, capture's grouping and the step factor with its tool
    profiles (in the companion's space for other languages: docs/ranking.md, Other languages,
    "Tool profiles in the companion's space")."""
    figures = served(show_misses=False, languages=(*LANGUAGES, *MORE_LANGUAGES))
    items = probe_items()

    def row(language: str) -> Row:
        # the four languages carry its target; the six more are reported alone, with
        # how many of their requests the language guess reads as English
        first = language in LANGUAGES
        extra: dict[str, object] = {
            "hit@1": figures[language][0],
            "hit@1 English": figures["en"][0],
        }
        if not first:
            extra["read as English by the language guess"] = sum(
                is_english(q[language]) for q in items
            )
        extra |= {
            part: {language: figures[f"{language} {part}"][1], "en": figures[f"en {part}"][1]}
            for part in ("tune", "check")
        }
        what = (
            "52 requests, step factor and tool profiles"
            if first
            else "52 requests translated for pml, no target"
        )
        return Row(
            SUITE,
            f"served probe hit@5 {language} ({what})",
            figures[language][1],
            "",
            figures["en"][1],
            "the same requests in English, served",
            target=0.9 if first else None,
            extra=extra,
        )

    return [row(language) for language in (*LANGUAGES, *MORE_LANGUAGES)]


def run(large: bool) -> list[Row]:
    if not available("default"):
        print("multilingual: ../shared/devset is absent; skipped", file=sys.stderr)
        return []
    quick = os.environ.get("PML_BENCH_QUICK") == "1"
    rows = quality_rows()
    rows += served_rows()
    rows += model_rows(50 if quick else 300)
    rows += capture_rows(20 if quick else 150)
    return rows
