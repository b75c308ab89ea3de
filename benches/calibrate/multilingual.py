"""Requests in other languages against a memory recorded in English (and the reverse), replayed
offline through the served formula: docs/ranking.md, Other languages.

`python -m benches.calibrate.multilingual [--check]`: the dev set's executions (../shared/devset)
are the memory, one pattern per group; every query is scored against every group with the served
formula (semantic part = the group's three best intent cosines weighted 1, 0.25, 0.0625; BM25
from the real `LexicalIndex` over the same pattern documents the engine builds; noisy-or
fusion; `min_match` applied, so a request whose expected capability falls below it misses),
as `benches/calibrate/replay_semantic.py` does, so no ANN miss. Vectors come from
`benches/harness/quality_vectors.py` (each text embedded once per model, cached in benches/.cache).

For each option (an embedder, or MiniLM with a cross-lingual companion) it reports English
hit@1 / MRR on all 923 dev queries, and on the multilingual probe
(benches/data/multilingual/probe.json) hit@1 / hit@5 per language against the same requests in
English, plus the reverse cases (executions recorded in another language, the dev set's English
queries). Without `--check` only the probe's `tune` part is read; `--check` reads the held-apart
part too (do it once, after choosing).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benches.harness.devset import DevExecution, DevQuery, load
from benches.harness.quality_vectors import vectors
from pml_server.embedding.bridge import bridged, shipped_map
from pml_server.embedding.language import is_english
from pml_server.ranking import LexicalIndex, RankingConfig
from pml_server.service._companion import lexical_text

PROBE = Path(__file__).resolve().parents[1] / "data" / "multilingual" / "probe.json"
LANGUAGES = ("fr", "de", "es", "zh")
LEXICAL_LIMIT = 40  # k * overfetch, as served
WEIGHTS = np.array([1.0, 0.25, 0.0625])  # the semantic part's (docs/ranking.md, The formula)
K = 5
# The companion as served: USE through the bridge to MiniLM's geometry
BRIDGED = "use>minilm"

Array = NDArray[np.float64]


@dataclass(frozen=True)
class Option:
    """How a request and an intent are compared: `primary` alone, or `companion`'s cosine
    for every intent when the request is not English (`mode="switch"`, as served), or the
    mean of both always (`mode="mean"`)."""

    name: str
    primary: str
    companion: str | None = None
    mode: str = "switch"
    min_match: float = 0.3
    semantic_weight: float = 1.0
    lexical_weight: float = 0.9
    # the lexical weight of a request that is not English (with a companion, `switch` mode):
    # its words rarely match English documents, and when they do it is mostly by accident
    other_lexical_weight: float = 0.9
    # an English request compared with intents that are not English in the companion's space
    # (the reverse direction, as served); False: by the primary model, as before
    mixed: bool = True
    # a request that is not English searches the lexical index with its accents folded
    # (service/_companion.py, `lexical_text`)
    fold: bool = False
    # the lexical weight of an English request over a memory holding intents that are not
    # English (`mixed`), at most
    mixed_lexical_weight: float = 0.9
    # added to the companion's cosine of an intent that is not English for an English request
    # (`mixed`; served before the bridge at 0.1)
    mixed_shift: float = 0.0


def probe() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(PROBE.read_text())
    return loaded


class Memory:
    """The dev-set executions as the engine would hold them: one pattern per group. `entries`:
    (group, intent text, tools) per execution."""

    def __init__(self, entries: Sequence[tuple[str, str, Sequence[str]]]) -> None:
        groups = sorted({g for g, _, _ in entries})
        self.index_of = {g: i for i, g in enumerate(groups)}
        ordered = sorted(entries, key=lambda e: self.index_of[e[0]])
        self.texts = [text for _, text, _ in ordered]
        self.english = np.array([is_english(t) for t in self.texts])
        self.group_of = np.array([self.index_of[g] for g, _, _ in ordered])
        self.sizes = np.bincount(self.group_of, minlength=len(groups))
        # each group's intents as a row of positions (padded with len(texts): a -inf column)
        self.members = np.full((len(groups), int(self.sizes.max())), len(self.texts))
        filled = np.zeros(len(groups), dtype=np.int64)
        for position, group in enumerate(self.group_of):
            self.members[group, filled[group]] = position
            filled[group] += 1
        self.lexical = LexicalIndex()
        seen: set[str] = set()
        for group, text, tools in ordered:
            first = group not in seen
            self.lexical.add_terms(group, f"{' '.join(tools)} {text}" if first else text)
            seen.add(group)

    @classmethod
    def of(cls, executions: Sequence[DevExecution], replaced: dict[str, str]) -> Memory:
        """The dev set's executions, those named in `replaced` under another intent text."""
        return cls([(e.group, replaced.get(e.id, e.intent), e.tools) for e in executions])

    @property
    def groups(self) -> int:
        return len(self.sizes)

    def semantic(self, cosines: Array) -> Array:
        """Per query and group: the weighted mean of the group's three best cosines, >= 0."""
        out = np.zeros((cosines.shape[0], self.groups))
        for first in range(0, cosines.shape[0], 64):
            rows = cosines[first : first + 64]
            padded = np.concatenate([rows, np.full((rows.shape[0], 1), -np.inf)], axis=1)
            best = -np.sort(-padded[:, self.members], axis=2)[:, :, :3]
            present = np.isfinite(best)
            weights = WEIGHTS[: best.shape[2]] * present
            summed = (np.where(present, best, 0.0) * weights).sum(axis=2)
            out[first : first + 64] = np.maximum(summed / weights.sum(axis=2), 0.0)
        return out

    def bm25(self, queries: Sequence[str]) -> Array:
        out = np.zeros((len(queries), self.groups))
        for i, q in enumerate(queries):
            for group, score in self.lexical.search(q, LEXICAL_LIMIT):
                out[i, self.index_of[group]] = score
        return out


def _vectors(model: str, texts: Sequence[str]) -> NDArray[np.float32]:
    """One row per text in `model`'s space; `BRIDGED`: USE's vectors through the bridge to
    MiniLM's geometry, as the served companion reads them (pml_server/embedding/bridge.py)."""
    if model == BRIDGED:
        return bridged(vectors("use", texts), shipped_map())
    return vectors(model, texts)


def cosines(option: Option, queries: Sequence[str], memory: Memory) -> Array:
    every = list(dict.fromkeys([*queries, *memory.texts]))
    at = {t: i for i, t in enumerate(every)}

    def space(model: str) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        # "use+e5": each model's unit vectors scaled by 1/sqrt(n) and concatenated, so the
        # cosine is the mean of the models' cosines (benches/results/multilingual.md, Other
        # encoders surveyed)
        parts = model.split("+")
        v = np.concatenate([_vectors(p, every) / np.sqrt(len(parts)) for p in parts], axis=1)
        return v[[at[q] for q in queries]], v[[at[t] for t in memory.texts]]

    q1, m1 = space(option.primary)
    primary = (q1 @ m1.T).astype(np.float64)
    if option.companion is None:
        return primary
    q2, m2 = space(option.companion)
    other = (q2 @ m2.T).astype(np.float64)
    if option.mode == "mean":
        return (primary + other) / 2
    # as served (service/_companion.py): a request that is not English is read in the
    # companion's space; an English one too against intents that are not English (`mixed`)
    english_query = np.array([is_english(q) for q in queries])
    english_pair = english_query[:, None] & (memory.english[None, :] | (not option.mixed))
    shifted = english_query[:, None] & ~memory.english[None, :] & option.mixed
    other = np.where(shifted, np.minimum(other + option.mixed_shift, 1.0), other)
    return np.where(english_pair, primary, other)


def ranks(
    option: Option, queries: Sequence[str], expected: Sequence[str], memory: Memory
) -> NDArray[np.int64]:
    """The expected capability's rank per query (0 = not returned: below min_match or past
    k)."""
    config = RankingConfig()
    sem = memory.semantic(cosines(option, queries, memory))
    folded = option.fold and option.companion is not None and option.mode == "switch"
    raw = memory.bm25([lexical_text(q) if folded and not is_english(q) else q for q in queries])
    lex = raw / (raw + config.lexical_half_score)
    weight = np.full(len(queries), option.lexical_weight)
    if option.companion is not None and option.mode == "switch":
        other = np.array([not is_english(q) for q in queries])
        weight[other] = option.other_lexical_weight
        if option.mixed and not memory.english.all():
            weight[~other] = min(option.lexical_weight, option.mixed_lexical_weight)
    match = 1 - (1 - option.semantic_weight * sem) * (1 - weight[:, None] * lex)
    want = np.array([memory.index_of[g] for g in expected])
    mine = match[np.arange(len(queries)), want]
    rank = (match > mine[:, None]).sum(1) + 1
    rank[mine < option.min_match] = 0
    rank[rank > K] = 0
    out: NDArray[np.int64] = rank.astype(np.int64)
    return out


def figures(rank: NDArray[np.int64]) -> dict[str, float]:
    hit = rank > 0
    return {
        "hit@1": float((rank == 1).mean()),
        "hit@5": float(hit.mean()),
        "MRR": float(np.where(hit, 1.0 / np.maximum(rank, 1), 0.0).mean()),
    }


def measure(option: Option, check: bool, only: str | None = None) -> dict[str, dict[str, float]]:
    """Every figure of `option`; the probe's `tune` part, both with `check`, or the part
    named by `only`."""
    executions, queries = load("default")
    data = probe()
    out: dict[str, dict[str, float]] = {}
    plain = Memory.of(executions, {})
    if only is None:
        asked, groups = [q.intent for q in queries], [q.group for q in queries]
        out["english, 923 dev queries"] = figures(ranks(option, asked, groups, plain))
        # English requests over English intents of a tenant that also holds intents in other
        # languages: the same, at the lexical weight of such a tenant
        weight = min(option.lexical_weight, option.mixed_lexical_weight)
        mixed = replace(option, lexical_weight=weight)
        out["english, 923, mixed-tenant weight"] = figures(ranks(mixed, asked, groups, plain))
    items = [
        q
        for q in data["queries"]
        if (q["split"] == only if only else check or q["split"] == "tune")
    ]
    expected = [q["expected_group"] for q in items]
    for language in ("en", *LANGUAGES):
        out[f"probe {language}"] = figures(
            ranks(option, [q[language] for q in items], expected, plain)
        )
    out |= reverse_figures(option, executions, queries, data, items)
    if only is not None:
        return out
    reverse = data["reverse"]
    replaced = {x["id"]: x[r["language"]] for r in reverse for x in r["executions"]}
    asked = [(q["en"], r["group"]) for r in reverse for q in r["queries"]]
    texts, groups = [a for a, _ in asked], [g for _, g in asked]
    out["reverse, English memory"] = figures(ranks(option, texts, groups, plain))
    out["reverse, translated memory"] = figures(
        ranks(option, texts, groups, Memory.of(executions, replaced))
    )
    return out


def reverse_figures(
    option: Option,
    executions: Sequence[DevExecution],
    queries: Sequence[DevQuery],
    data: dict[str, Any],
    items: Sequence[dict[str, Any]],
) -> dict[str, dict[str, float]]:
    """The reverse direction on the probe (benches/README.md, Multilingual probe): the probe
    groups' executions are replaced by the probe's requests in one language (the other groups
    stay in English), and English requests ask for them. `reverse same <language>`: the probe's
    own English requests (against their translations); `reverse other <language>`: the dev
    set's other English requests of those groups (paraphrases of other tasks of the same
    tools: harder); with every item, `reverse english <language>`: the dev set's requests of
    the groups still recorded in English (their cost). `<language>` = en is the baseline, the
    same memory recorded in English."""
    every = data["queries"]
    probe_groups = {q["expected_group"] for q in every}
    kept = [(e.group, e.intent, e.tools) for e in executions if e.group not in probe_groups]
    probe_ids = {q["id"] for q in every}
    wanted = {q["expected_group"] for q in items}
    others = [(q.intent, q.group) for q in queries if q.group in wanted and q.id not in probe_ids]
    only_english = (
        [(q.intent, q.group) for q in queries if q.group not in probe_groups]
        if len(items) == len(every)
        else None
    )
    out: dict[str, dict[str, float]] = {}
    for language in ("en", *LANGUAGES):
        recorded = [(q["expected_group"], q[language], q["expected_tools"]) for q in every]
        memory = Memory(kept + recorded)
        out[f"reverse same {language}"] = figures(
            ranks(option, [q["en"] for q in items], [q["expected_group"] for q in items], memory)
        )
        out[f"reverse other {language}"] = figures(
            ranks(option, [t for t, _ in others], [g for _, g in others], memory)
        )
        if only_english is not None:
            # the English requests of the groups still recorded in English, over that memory:
            # what the intents in another language cost them
            out[f"reverse english {language}"] = figures(
                ranks(option, [t for t, _ in only_english], [g for _, g in only_english], memory)
            )
    return out


# The served default (service/_companion.py): MiniLM, and USE for requests not in English with
# their lexical weight at 0.3 (chosen on the probe's tune part among 0, 0.3, 0.5, 0.7, 0.9)
# and their accents folded for the lexical search; English requests read intents in other
# languages in USE's space too (`mixed`), with the lexical weight at 0.5 over such a memory
# (chosen on the reverse probes' tune part, the English figure of that weight replayed
# over the 923 dev queries: "english, 923, mixed-tenant weight").
# USE's vectors are read through the bridge to MiniLM's geometry (docs/ranking.md, Other
# languages, "The bridge to MiniLM's geometry"), so foreign intents' cosines for an English
# request are not shifted (without the bridge: 0.1, the last option of that loop below).
SERVED = (
    "minilm + use bridged to minilm for other languages, lexical weight 0.3, accents folded,"
    " English requests over other languages lexical weight 0.5"
)
OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        Option("minilm", "minilm"),
        Option(
            "before: minilm + use for other languages, lexical weight 0.3, English requests"
            " by minilm alone",
            "minilm",
            "use",
            other_lexical_weight=0.3,
            mixed=False,
        ),
        Option("e5", "e5"),
        Option("use", "use"),
        *(
            Option(
                f"minilm + {c} for other languages, lexical weight {w}",
                "minilm",
                c,
                other_lexical_weight=w,
            )
            for c in ("use", "e5")
            for w in (0.0, 0.3, 0.5, 0.7, 0.9)
        ),
        Option(
            "minilm + use for other languages, lexical weight 0.3, accents folded",
            "minilm",
            "use",
            other_lexical_weight=0.3,
            fold=True,
        ),
        *(
            Option(
                "minilm + use for other languages, lexical weight 0.3, accents folded, English"
                f" requests over other languages lexical weight {w}",
                "minilm",
                "use",
                other_lexical_weight=0.3,
                fold=True,
                mixed_lexical_weight=w,
            )
            for w in (0.7, 0.6, 0.5, 0.4, 0.3)
        ),
        *(
            Option(
                "minilm + use for other languages, lexical weight 0.3, accents folded, English"
                f" requests over other languages lexical weight 0.5, their cosines shifted {d}",
                "minilm",
                "use",
                other_lexical_weight=0.3,
                fold=True,
                mixed_lexical_weight=0.5,
                mixed_shift=d,
            )
            for d in (0.05, 0.1, 0.15)
        ),
        Option(
            SERVED,
            "minilm",
            BRIDGED,
            other_lexical_weight=0.3,
            fold=True,
            mixed_lexical_weight=0.5,
        ),
        Option(
            "e5 alone, lexical weight 0.3 for other languages", "e5", "e5", other_lexical_weight=0.3
        ),
        Option(
            "use alone, lexical weight 0.3 for other languages",
            "use",
            "use",
            other_lexical_weight=0.3,
        ),
        Option(
            "minilm + mean(use, e5) for other languages, otherwise as served",
            "minilm",
            "use+e5",
            other_lexical_weight=0.3,
            fold=True,
            mixed_lexical_weight=0.5,
            mixed_shift=0.1,
        ),
        Option("mean(minilm, e5) always", "minilm", "e5", mode="mean"),
        Option("mean(minilm, use) always", "minilm", "use", mode="mean"),
    )
}


def table(results: dict[str, dict[str, dict[str, float]]], line: Callable[[str], None]) -> None:
    line(
        "| option | English 923 hit@1 / MRR (at a mixed tenant's lexical weight)"
        " | probe en hit@1 / hit@5 | "
        + " | ".join(f"{lang} hit@1 / hit@5" for lang in LANGUAGES)
        + " | reverse, 8 hand-translated groups (en memory -> translated) hit@1 / hit@5"
        + " | reverse: English-recorded groups' requests, hit@1 en / fr / de / es / zh"
        + " | reverse same, hit@5 en / fr / de / es / zh"
        + " | reverse other, hit@5 en / fr / de / es / zh |"
    )
    line("| --- " * (7 + len(LANGUAGES)) + "|")
    for name, r in results.items():
        en, mixed = r["english, 923 dev queries"], r["english, 923, mixed-tenant weight"]
        cells = [f"{en['hit@1']:.3f} / {en['MRR']:.4f} ({mixed['hit@1']:.3f} / {mixed['MRR']:.4f})"]
        for lang in ("en", *LANGUAGES):
            p = r[f"probe {lang}"]
            cells.append(f"{p['hit@1']:.3f} / {p['hit@5']:.3f}")
        a, b = r["reverse, English memory"], r["reverse, translated memory"]
        cells.append(f"{a['hit@1']:.2f} / {a['hit@5']:.2f} -> {b['hit@1']:.2f} / {b['hit@5']:.2f}")
        english = [r.get(f"reverse english {lang}") for lang in ("en", *LANGUAGES)]
        cells.append(
            " / ".join(f"{e['hit@1']:.3f}" for e in english if e is not None) or "(with --check)"
        )
        for kind in ("same", "other"):
            cells.append(
                " / ".join(
                    f"{r[f'reverse {kind} {lang}']['hit@5']:.2f}" for lang in ("en", *LANGUAGES)
                )
            )
        line(f"| {name} | " + " | ".join(cells) + " |")


def main(argv: Sequence[str]) -> None:
    check = "--check" in argv
    names = [a for a in argv if not a.startswith("--")] or list(OPTIONS)
    results = {n: measure(OPTIONS[n], check) for n in names}
    print(f"probe part: {'tune + check' if check else 'tune only'}")
    table(results, print)


if __name__ == "__main__":
    main(sys.argv[1:])
