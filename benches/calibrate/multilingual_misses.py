"""Where requests in other languages lose their capability, asked of a real engine
(docs/ranking.md, Other languages, "Served, request by request").

`python -m benches.calibrate.multilingual_misses [--variant NAME ...]`: an in-process engine
(default settings: MiniLM and its USE companion, RocksDB, `fast` durability) records the dev
set's executions (MiniLM's vectors from the bench cache as `intent_embedding`, so only the
companion runs), then every probe request (benches/data/multilingual/probe.json) is asked in
English and in each other language through `Engine.suggest` (k = 10, no plans). Printed: hit@1
and hit@5 per language as served (what the replay of `benches/calibrate/multilingual.py` cannot
see: the ANN, the step fit, the tool profiles of English requests, capture's grouping), and
each request missed in another language but found in English, with the expected capability's
rank and the score parts (semantic, lexical, steps) of it and of the first suggestion.
`languages=it,pt,nl,pl,tr,ru` asks those instead of fr, de, es and zh: the same 52 requests
translated into six more languages USE reads (`probe_more.json` beside the probe, joined by
id); `languages=all` asks all ten. Each language's line also says how many of its requests
the language guess (`embedding/language.py`) reads as English, i.e. sends to MiniLM.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from benches.calibrate.multilingual import LANGUAGES, PROBE, probe
from benches.harness.devset import as_record, load
from benches.harness.fill import record_all
from benches.harness.quality_vectors import vectors
from pml_server.config import EngineConfig
from pml_server.domain.model import SuggestQuery
from pml_server.embedding.language import is_english
from pml_server.ranking import RankingConfig
from pml_server.service import Engine, _companion

# the probe's requests in six more languages USE reads, translated for pml (benches/README.md,
# Multilingual probe): Italian, Portuguese, Dutch, Polish, Turkish, Russian
PROBE_MORE = PROBE.parent / "probe_more.json"
MORE_LANGUAGES = ("it", "pt", "nl", "pl", "tr", "ru")
K = 10


def probe_items() -> list[dict[str, Any]]:
    """The probe's requests, each with its translations into `MORE_LANGUAGES` too."""
    more = {q["id"]: q for q in json.loads(PROBE_MORE.read_text())["queries"]}
    return [more[q["id"]] | q for q in probe()["queries"]]


def served(
    show_misses: bool = True,
    ranking: dict[str, float] | None = None,
    languages: Sequence[str] = LANGUAGES,
) -> dict[str, tuple[float, float]]:
    """hit@1 / hit@5 per language of the probe's requests asked of a served engine;
    `ranking`: settings changed from the default ranking's (`[engine.ranking]`);
    `languages`: those asked besides English."""
    items = probe_items()
    out: dict[str, tuple[float, float]] = {}
    with filled_engine(ranking) as (engine, groups_of):
        ranks: dict[str, list[int]] = {}
        detail: dict[str, list[str]] = {}
        for language in ("en", *languages):
            ranks[language] = []
            detail[language] = []
            for q in items:
                found = engine.suggest(
                    "t", SuggestQuery(q[language], k=K, plan_size=0, explain=True)
                ).suggestions
                rank = next(
                    (
                        n
                        for n, s in enumerate(found, 1)
                        if q["expected_group"] in groups_of.get(s.capability_id, ())
                    ),
                    0,
                )
                ranks[language].append(rank)
                parts = []
                for s in [*found[:1], *(found[rank - 1 : rank] if rank > 1 else [])]:
                    sc = s.score
                    parts.append(
                        f"match {sc.match:.3f} sem {sc.semantic:.3f} lex {sc.lexical:.3f}"
                        f" steps {sc.steps:.2f} total {sc.total:.3f}"
                    )
                detail[language].append(" | ".join(parts))
            hit1 = sum(r == 1 for r in ranks[language]) / len(items)
            hit5 = sum(0 < r <= 5 for r in ranks[language]) / len(items)
            out[language] = (hit1, hit5)
            for part in ("tune", "check"):
                at = [r for r, q in zip(ranks[language], items, strict=True) if q["split"] == part]
                out[f"{language} {part}"] = (
                    sum(r == 1 for r in at) / len(at),
                    sum(0 < r <= 5 for r in at) / len(at),
                )
        if show_misses:
            for language in languages:
                print(f"## {language}: missed (rank > 5) but found in English")
                for n, q in enumerate(items):
                    r, e = ranks[language][n], ranks["en"][n]
                    if 0 < e <= 5 and not 0 < r <= 5:
                        guess = "en" if is_english(q[language]) else "other"
                        print(
                            f"  {q['split']} en rank {e}, {language} rank {r or '>10'}"
                            f" (guess {guess}): {detail[language][n]} :: {q[language][:70]}"
                        )
        return out


@contextmanager
def filled_engine(
    ranking: dict[str, float] | None = None,
) -> Iterator[tuple[Engine, dict[str, set[str]]]]:
    """An in-process engine (default settings but `ranking`: MiniLM and its USE companion,
    RocksDB, `fast` durability) holding the dev set's executions (MiniLM's vectors from the
    bench cache), its companion filled, and the dev-set groups of each capability."""
    executions, _ = load("default")
    rows = vectors("minilm", [e.intent for e in executions])
    records = [as_record(i, e, rows[i]) for i, e in enumerate(executions)]
    with tempfile.TemporaryDirectory(prefix="pml-mm-") as tmp:
        config = EngineConfig(
            data_dir=Path(tmp),
            embedder="minilm",
            durability="fast",
            ranking=replace(RankingConfig(), **ranking) if ranking else None,
        )
        engine = Engine.open(config)
        try:
            assert engine.admin.wait_ready(120)
            groups_of: dict[str, set[str]] = {}
            done = record_all(engine, "t", len(records), records.__getitem__, threads=1)
            for e, result in zip(executions, done, strict=True):
                groups_of.setdefault(result.capability_id, set()).add(e.group)
            # the first request in another language starts the companion: wait for it
            engine.suggest("t", SuggestQuery("Trouve des restaurants à Dallas", k=1, plan_size=0))
            assert engine.admin.wait_cross_lingual(900)
            yield engine, groups_of
        finally:
            engine.close()


def main(argv: Sequence[str]) -> None:
    """`key=value` arguments change the ranking's settings (e.g. step_profile_weight=0);
    `other_lexical=W` the lexical weight of requests in other languages; `languages=it,pt`
    (or `all`) the languages asked besides English."""
    pairs = dict(a.split("=", 1) for a in argv if "=" in a)
    chosen = pairs.pop("languages", ",".join(LANGUAGES))
    languages = (*LANGUAGES, *MORE_LANGUAGES) if chosen == "all" else tuple(chosen.split(","))
    changed = {k: float(v) for k, v in pairs.items()}
    if "other_lexical" in changed:
        _companion.OTHER_LANGUAGE_LEXICAL_WEIGHT = changed.pop("other_lexical")
    figures = served(ranking=changed, languages=languages)
    items = probe_items()
    for language, (hit1, hit5) in figures.items():
        en5 = figures[" ".join(["en", *language.split()[1:]])][1]
        english = sum(is_english(q[language]) for q in items) if " " not in language else 0
        print(
            f"{language}: hit@1 {hit1:.3f} hit@5 {hit5:.3f} ({hit5 / en5:.2f}x English's hit@5)"
            + (f", {english}/{len(items)} read as English" if " " not in language else "")
        )


if __name__ == "__main__":
    main(sys.argv[1:])
