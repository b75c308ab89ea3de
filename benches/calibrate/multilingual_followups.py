"""Follow-up requests in other languages, asked of a real engine (docs/ranking.md, Sessions,
"Follow-up requests").

`python -m benches.calibrate.multilingual_followups [languages=fr,de] [key=value ...]`: an
in-process engine (default settings: MiniLM and its USE companion, RocksDB, `fast` durability)
records the dev set's executions (MiniLM's vectors from the bench cache, so only the companion
runs); then each multilingual probe request (benches/data/multilingual/probe.json, with
probe_more.json) whose expected capability is one tool and whose English text names something
(`benches.bench_followups.names`: a quoted string, a number, capitalized words) that its
translation keeps verbatim ("Netlify", "Denver", "2022") becomes an elliptical follow-up in
each language, one of seven forms per language (the English suite's, translated here) chosen by
the request id's SHA-1. Each follow-up is asked (k = 5, no plans, the server embeds it) with its
tool as `previous_tools` and without a context; the probe's whole translated requests are asked
after an unrelated tool (drawn by a generator seeded once) and without a context (the harm).
Printed per language: follow-up hit@1 with the step against without a context, how many were
read as follow-ups, and the whole requests' hit@1 after an unrelated step against without.
`key=value` changes the ranking's settings (`follow_up_weight=0`: each request read alone).
A small synthetic probe of one kind of follow-up (the same step again with other arguments).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Sequence
from typing import Any

from benches.bench_followups import names
from benches.calibrate.multilingual import LANGUAGES, PROBE
from benches.calibrate.multilingual_misses import MORE_LANGUAGES, filled_engine, probe_items
from benches.harness.devset import load
from pml_server.domain.model import SuggestContext, SuggestQuery
from pml_server.embedding.language import is_english

K = 5
SEED = 7
# the English suite's seven forms (benches/bench_followups.py, TEMPLATES), in each language
FORMS: dict[str, list[str]] = json.loads(
    (PROBE.parent / "followup_forms.json").read_text(encoding="utf-8")
)["forms"]


def follow_up(item: dict[str, Any], language: str) -> str | None:
    """The follow-up made of the probe request `item` in `language`: the names its English text
    gives that its translation keeps verbatim (None when there are none)."""
    kept = [n for n in names(item["en"]) if n in item[language]]
    if not kept:
        return None
    h = int(hashlib.sha1(item["id"].encode()).hexdigest(), 16)
    x = " and ".join(kept[:2]) if len(kept) > 1 and h % 3 == 0 else kept[0]
    if language != "en" and " and " in x:
        x = x.replace(" and ", ", ")
    forms = FORMS[language]
    return forms[h % len(forms)].format(X=x)


def measure(
    languages: Sequence[str], ranking: dict[str, float] | None = None
) -> dict[str, dict[str, list[bool]]]:
    """Per language, per arm, whether each request's first suggestion is its capability."""
    executions, _ = load("default")
    tools_of: dict[str, tuple[str, ...]] = {}
    for e in executions:
        tools_of.setdefault(e.group, tuple(e.tools))
    items = [q for q in probe_items() if len(tools_of.get(q["expected_group"], ())) == 1]
    all_tools = sorted({t for ts in tools_of.values() if len(ts) == 1 for t in ts})
    rng = random.Random(SEED)
    other = {
        q["id"]: rng.choice([t for t in all_tools if (t,) != tools_of[q["expected_group"]]])
        for q in items
    }
    out: dict[str, dict[str, list[bool]]] = {}
    with filled_engine(ranking) as (engine, groups_of):

        def first(text: str, previous: tuple[str, ...] | None) -> tuple[str, bool]:
            context = SuggestContext(previous_tools=previous) if previous else None
            result = engine.suggest("t", SuggestQuery(text, k=K, plan_size=0, context=context))
            found = result.suggestions
            cap = found[0].capability_id if found else ""
            return cap, result.read_as_follow_up

        for language in ("en", *languages):
            arms = out.setdefault(language, {})
            for q in items:
                right = groups_of_right(groups_of, q["expected_group"])
                tool = tools_of[q["expected_group"]]
                text = follow_up(q, language)
                if text is not None:
                    cap, read = first(text, tool)
                    arms.setdefault("follow-up, with the step", []).append(cap in right)
                    arms.setdefault("read as follow-up", []).append(read)
                    cap, _ = first(text, None)
                    arms.setdefault("follow-up, no context", []).append(cap in right)
                    arms.setdefault("follow-up read as English", []).append(is_english(text))
                whole = q[language]
                cap, read = first(whole, (other[q["id"]],))
                arms.setdefault("whole, after another step", []).append(cap in right)
                arms.setdefault("whole read as follow-up", []).append(read)
                cap, _ = first(whole, None)
                arms.setdefault("whole, no context", []).append(cap in right)
    return out


def groups_of_right(groups_of: dict[str, set[str]], group: str) -> set[str]:
    """The capabilities whose executions carry the dev set's `group`."""
    return {cap for cap, groups in groups_of.items() if group in groups}


def main(argv: Sequence[str]) -> None:
    pairs = dict(a.split("=", 1) for a in argv if "=" in a)
    chosen = pairs.pop("languages", ",".join(LANGUAGES))
    languages = (*LANGUAGES, *MORE_LANGUAGES) if chosen == "all" else tuple(chosen.split(","))
    out = measure(languages, {k: float(v) for k, v in pairs.items()} or None)
    for language, arms in out.items():
        n = len(arms.get("follow-up, with the step", []))
        hit = {a: sum(v) / max(len(v), 1) for a, v in arms.items()}
        print(
            f"{language}: {n} follow-ups, hit@1 with the step {hit['follow-up, with the step']:.3f}"
            f" (no context {hit['follow-up, no context']:.3f}; read as follow-ups"
            f" {sum(arms['read as follow-up'])}/{n}, guessed English"
            f" {sum(arms['follow-up read as English'])});"
            f" whole {len(arms['whole, no context'])}: after another step"
            f" {hit['whole, after another step']:.3f}, no context {hit['whole, no context']:.3f}"
            f" (read as follow-ups {sum(arms['whole read as follow-up'])})"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
