"""Why multi-tool requests miss the first place (docs/ranking.md, Steps, "Multi-tool misses").

`collect` fills two in-process stores with the dev set's MiniLM vectors (cached by
benches/harness/quality_vectors.py): the whole dev set (its 923 queries) and the exact
multi-step store (benches/harness/make_exact_multistep.py, its 212 queries). Each store is
asked every query with explain at min_match 0 three times, reopened with three ranking
settings: the defaults (the served step factor), the gate off with only the Dice fit, and the
gate off with only the profile fit; so every candidate's two step factors and the request's
gate are known apart. It pickles them with each candidate's tools and each request's text.

`collect --skewed` does the same for the skewed variant's store and its 4,149 queries (its own
cache; about two minutes), so the signals are also judged where the gate was built for.

`report` replays the served formula from the cache (it must give the served totals: it prints
how many differ), prints the multi-tool misses by cause (`tune`, with `--show N` the first N
requests with the first answer's and the expected pattern's score parts; then `check`), and
replays the signals of "Multi-tool misses" on every slice (`tune` / `check` by
`quality_devset.split_of`; multi- and single-tool; the skewed slices when that cache exists).
About 30 s; a diagnostic, it changes nothing:

    .venv/bin/python -m benches.calibrate.multi_misses collect [--cache PATH]
    .venv/bin/python -m benches.calibrate.multi_misses collect --skewed [--skewed-cache PATH]
    .venv/bin/python -m benches.calibrate.multi_misses report [--show N]
"""

from __future__ import annotations

import argparse
import pickle
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from benches.bench_plans import execution
from benches.harness import devset, make_exact_multistep
from benches.harness.quality_devset import split_of
from benches.harness.quality_engine import open_engine
from benches.harness.quality_vectors import vectors
from pml_server.domain.model import ScoreParts, SuggestQuery
from pml_server.ranking.config import RankingConfig, default_ranking
from pml_server.ranking.lexical import query_terms

CACHE = Path(tempfile.gettempdir()) / "pml-multi-misses.pkl"
SKEWED_CACHE = Path(tempfile.gettempdir()) / "pml-multi-skewed.pkl"
TENANT = "bench"
K = 5


@dataclass(frozen=True)
class Cand:
    group: str
    tools: tuple[str, ...]
    match: float
    semantic: float
    lexical: float
    rest: float  # usage x reliability x recency x superseded penalty
    served: float  # the served step factor (gated Dice x profile)
    dice: float  # 1 - w + w * fit, ungated
    profile: float  # 1 - wp + wp * clamp(cos(T)), ungated
    total: float
    bm25: float = 0.0  # the pattern document's BM25 for the request, whether or not it was
    # among the lexical search's hits (a vector-only candidate's `lexical` is 0)


@dataclass
class Case:
    id: str
    store: str  # "dev" or "exact"
    split: str
    multi: bool
    intent: str
    group: str
    tools: tuple[str, ...]
    gate: float
    cands: list[Cand]


def _ask(
    data: Path,
    ranking: RankingConfig,
    queries: list[tuple[str, str]],
    vec: dict[str, list[float]],
    bm25: dict[str, dict[str, float]] | None = None,
) -> dict[str, list[tuple[str, ScoreParts]]]:
    """Per query, (capability, score parts) of every candidate; with `bm25`, each candidate
    pattern's exact BM25 for the request (`LexicalIndex.search_among` over the candidates)."""
    engine = open_engine(data, "minilm", ranking)
    out: dict[str, list[tuple[str, ScoreParts]]] = {}
    try:
        for qid, text in queries:
            r = engine.suggest(
                TENANT,
                SuggestQuery(
                    text,
                    k=K,
                    min_match=0.0,
                    explain=True,
                    plan_size=0,
                    intent_embedding=tuple(vec[text]),
                ),
            )
            # keyed by capability and pattern: a capability may hold several patterns
            items = [(f"{s.capability_id} {s.pattern.id}", s.score) for s in r.suggestions]
            items += [
                (f"{f.capability_id} {f.pattern_id}", f.score)
                for f in r.filtered
                if f.score is not None
            ]
            out[qid] = items
            if bm25 is not None:
                ids = [key.split(" ")[1] for key, _ in items]
                index = engine._state.indexes.get(TENANT)
                assert index is not None
                got = dict(index.lexical.core.search_among(query_terms(text), len(ids), ids))
                bm25[qid] = {key: got.get(i, 0.0) for (key, _), i in zip(items, ids, strict=True)}
    finally:
        engine.close()
    return out


def _collect_store(
    name: str,
    executions: Sequence[devset.DevExecution],
    queries: list[tuple[str, str, str, tuple[str, ...]]],  # id, intent, group, tools
    tmp: Path,
) -> list[Case]:
    texts = sorted({e.intent for e in executions} | {q[1] for q in queries})
    vec = {t: v.tolist() for t, v in zip(texts, vectors("minilm", texts), strict=True)}
    data = tmp / name
    base = default_ranking("minilm")
    engine = open_engine(data, "minilm", base)
    votes: dict[str, Counter[str]] = {}
    try:
        for n, e in enumerate(executions):
            got = engine.record(TENANT, execution(n, e.intent, e.code, e.tools, vec[e.intent]))
            votes.setdefault(got.capability_id, Counter())[e.group] += 1
    finally:
        engine.close()
    group_of = {c: v.most_common(1)[0][0] for c, v in votes.items()}
    tools_of = {e.group: e.tools for e in executions}
    asked = [(q[0], q[1]) for q in queries]
    exact: dict[str, dict[str, float]] = {}
    served = _ask(data, base, asked, vec, exact)
    dice = _ask(data, replace(base, step_gate=0.0, step_profile_weight=0.0), asked, vec)
    prof = _ask(data, replace(base, step_gate=0.0, step_weight=0.0), asked, vec)
    cases = []
    for qid, intent, group, tools in queries:
        d = {c: sc.steps for c, sc in dice[qid]}
        p = {c: sc.steps for c, sc in prof[qid]}
        cands = []
        gate = 0.0
        for cap, s in served[qid]:
            g = group_of.get(cap.split(" ")[0], "?")
            rest = s.usage * s.reliability * s.recency * s.superseded_penalty
            product = d[cap] * p[cap]
            if product < 0.999:
                gate = max(gate, (1.0 - s.steps) / (1.0 - product))
            cands.append(
                Cand(
                    g,
                    tools_of.get(g, ()),
                    s.match,
                    s.semantic,
                    s.lexical,
                    rest,
                    s.steps,
                    d[cap],
                    p[cap],
                    s.total,
                    exact[qid][cap],
                )
            )
        multi = len(tools) > 1
        cases.append(
            Case(qid, name, split_of_id(qid), multi, intent, group, tools, min(gate, 1.0), cands)
        )
    return cases


def split_of_id(qid: str) -> str:
    return split_of(devset.DevQuery(qid, "", "", (), ""))


def collect(cache: Path, skewed: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="pml-multi-") as tmp:
        if skewed:  # the skewed variant's store and all its queries (docs/ranking.md, Gate)
            executions, queries = devset.load("skewed")
            asked = [(q.id, q.intent, q.group, q.tools) for q in queries]
            cases = _collect_store("skewed", executions, asked, Path(tmp))
        else:
            executions, queries = devset.load()
            store, exact = make_exact_multistep.build()
            asked = [(q.id, q.intent, q.group, q.tools) for q in queries]
            cases = _collect_store("dev", executions, asked, Path(tmp))
            asked = [(q.id, q.intent, q.expected_group, q.expected_tools) for q in exact]
            cases += _collect_store("exact", store, asked, Path(tmp))
    with open(cache, "wb") as fh:
        pickle.dump(cases, fh)
    print(f"{len(cases)} queries -> {cache}")


# ---------------------------------------------------------------- replay

Key = Callable[[Case, Cand], float]


def served(case: Case, c: Cand) -> float:
    return c.match * c.rest * c.served


def ranked_groups(case: Case, key: Key) -> list[str]:
    seen: list[str] = []
    for c in sorted(case.cands, key=lambda c: -key(case, c)):
        if c.group not in seen:
            seen.append(c.group)
    return seen


def rank(case: Case, key: Key) -> int:
    seen = ranked_groups(case, key)[:K]
    return seen.index(case.group) + 1 if case.group in seen else 0


def metrics(cases: Sequence[Case], key: Key) -> tuple[float, float]:
    ranks = [rank(c, key) for c in cases]
    n = max(len(ranks), 1)
    return sum(r == 1 for r in ranks) / n, sum(1 / r for r in ranks if r) / n


SYNONYM_COSINE = 0.7  # two tools' profiles this close count as near-synonyms


def profiles() -> dict[str, NDArray[np.float32]]:
    """Each dev-set tool's profile: the unit mean of its intents' unit vectors (as the ranking
    table sums them, docs/ranking.md, Steps, "Tool profiles")."""
    executions, _ = devset.load()
    texts = sorted({e.intent for e in executions})
    vec = dict(zip(texts, vectors("minilm", texts), strict=True))
    sums: dict[str, NDArray[np.float32]] = {}
    for e in executions:
        v = vec[e.intent] / np.linalg.norm(vec[e.intent])
        for t in set(e.tools):
            sums[t] = sums.get(t, np.zeros_like(v)) + v
    return {t: v / np.linalg.norm(v) for t, v in sums.items()}


def _name_words(tool: str) -> set[str]:
    return {w for w in tool.split("_") if w not in ("tool", "get", "search", "find")}


def near_synonyms(a: str, b: str, prof: dict[str, NDArray[np.float32]]) -> bool:
    """Two tools sharing a name word (trip_tool, trip_advice_tool) or whose profiles are at
    least SYNONYM_COSINE apart."""
    if _name_words(a) & _name_words(b):
        return True
    return a in prof and b in prof and float(prof[a] @ prof[b]) >= SYNONYM_COSINE


def cause(case: Case, first: Cand, prof: dict[str, NDArray[np.float32]]) -> str:
    """Why `first` beat the expected candidate: its tools against the expected ones."""
    want, got = set(case.tools), set(first.tools)
    if got < want:
        return "subset"
    if got > want:
        return "superset"
    if got == want:
        return "order"
    miss, extra = want - got, got - want
    if len(got) == len(want) and all(any(near_synonyms(m, x, prof) for x in extra) for m in miss):
        return "near-synonym"
    if got & want:
        return "overlap"
    return "fewer steps, none shared" if len(got) < len(want) else "other tools"


def load(cache: Path) -> list[Case]:
    with open(cache, "rb") as fh:
        got: list[Case] = pickle.load(fh)
    return got


def slices(cases: list[Case]) -> dict[str, list[Case]]:
    dev = [c for c in cases if c.store == "dev"]
    ex = [c for c in cases if c.store == "exact"]
    sk = [c for c in cases if c.store == "skewed"]
    more = {
        "skewed single tune": [c for c in sk if not c.multi and c.split == "tune"],
        "skewed single check": [c for c in sk if not c.multi and c.split == "check"],
        "skewed multi": [c for c in sk if c.multi],
    }
    return {
        "dev all": dev,
        "dev single": [c for c in dev if not c.multi],
        "dev multi tune": [c for c in dev if c.multi and c.split == "tune"],
        "dev multi check": [c for c in dev if c.multi and c.split == "check"],
        "exact tune": [c for c in ex if c.split == "tune"],
        "exact check": [c for c in ex if c.split == "check"],
    } | (more if sk else {})


def table(cases: list[Case], keys: dict[str, Key]) -> None:
    sl = slices(cases)
    print("| formula | " + " | ".join(f"{k} {len(v)}" for k, v in sl.items()) + " |")
    print("| --- " * (len(sl) + 1) + "|")
    for name, key in keys.items():
        cells = [f"{h:.4f} / {m:.4f}" for h, m in (metrics(v, key) for v in sl.values())]
        print(f"| {name} | " + " | ".join(cells) + " |")


def misses(cases: list[Case], show: int, split: str = "tune") -> None:
    prof = profiles()
    tune = [c for c in cases if c.multi and c.split == split]
    for store in ("dev", "exact"):
        by: Counter[str] = Counter()
        pos: Counter[int] = Counter()
        inside: Counter[str] = Counter()
        shown = 0
        for case in (c for c in tune if c.store == store):
            r = rank(case, served)
            if r == 1:
                continue
            order = sorted(case.cands, key=lambda c: -served(case, c))
            first = order[0]
            kind = cause(case, first, prof)
            by[kind] += 1
            pos[r] += 1
            inside[kind] += r > 0
            if shown < show:
                shown += 1
                right = next((c for c in order if c.group == case.group), None)
                print(
                    f"\n[{store} {case.id}] {kind}, rank {r}, gate {case.gate:.2f}: {case.intent}"
                )
                for label, c in (("first", first), ("right", right)):
                    if c is None:
                        print(f"  {label}: not retrieved ({'>'.join(case.tools)})")
                        continue
                    print(
                        f"  {label}: {'>'.join(c.tools)} total {served(case, c):.4f} match"
                        f" {c.match:.4f} (sem {c.semantic:.3f} lex {c.lexical:.3f}) steps"
                        f" {c.served:.4f} dice {c.dice:.4f} profile {c.profile:.4f}"
                    )
        n = sum(1 for c in tune if c.store == store)
        print(
            f"\n{store} multi-tool {split}: {n} queries, {sum(by.values())} misses: "
            f"{dict(by.most_common())}; right one at rank {dict(sorted(pos.items()))} "
            "(0: not in top 5); "
            f"of them in the top 5: {dict(inside.most_common())}"
        )


# ---------------------------------------------------------------- signals tried

_ASK = re.compile(
    r"\b(and|then|also|plus|additionally|afterwards?|as well|along with)\b|[,;]|[.?!]\s+\w"
)


def asked_parts(text: str) -> int:
    """The request's number of asked actions, read from its words: 1 + its conjunctions and
    clause or sentence breaks ('and', 'then', commas, a new sentence), at most 6."""
    return min(1 + len(_ASK.findall(text.lower())), 6)


def _steps(c: Cand) -> int:
    return max(len(set(c.tools)), 1)


def text_count(weight: float, gated: bool) -> Key:
    """A candidate with fewer steps than the request's asked actions loses `weight` x the
    missing share (x the gate when `gated`)."""

    def key(case: Case, c: Cand) -> float:
        n = asked_parts(case.intent)
        g = case.gate if gated else 1.0
        return served(case, c) * (1 - weight * g * max(n - _steps(c), 0) / n)

    return key


def neighbour_count(weight: float) -> Key:
    """The same with the neighbours' expected step count (1 + gate) as the asked count."""

    def key(case: Case, c: Cand) -> float:
        e = 1.0 + case.gate
        return served(case, c) * (1 - weight * max(e - _steps(c), 0) / e)

    return key


def subset_penalty(weight: float, need: float) -> Key:
    """A candidate whose tools are a strict subset of another retrieved candidate's with a
    match at least 0.9 of its own loses `weight` when the gate is at least `need`."""

    def key(case: Case, c: Cand) -> float:
        if case.gate < need:
            return served(case, c)
        mine = set(c.tools)
        bigger = any(set(x.tools) > mine and x.match >= 0.9 * c.match for x in case.cands)
        return served(case, c) * (1 - weight if bigger else 1.0)

    return key


class Toward:
    """Each request's unit vector against each tool's profile (`profiles`)."""

    def __init__(self, cases: list[Case]) -> None:
        self.prof = profiles()
        texts = sorted({c.intent for c in cases})
        rows = vectors("minilm", texts)
        self.q = {t: r / np.linalg.norm(r) for t, r in zip(texts, rows, strict=True)}
        self.names = sorted(self.prof)
        self.matrix = np.stack([self.prof[t] for t in self.names])
        self.spread: dict[str, tuple[float, float]] = {}

    def _relative(self, text: str, tool: str) -> float:
        """q . u_t between the request's median tool (0) and its best tool (1), at least 0."""
        if text not in self.spread:
            s = self.matrix @ self.q[text]
            self.spread[text] = (float(np.max(s)), float(np.median(s)))
        best, median = self.spread[text]
        x = float(self.q[text] @ self.prof[tool]) if tool in self.prof else median
        return max(0.0, (x - median) / max(best - median, 1e-9))

    def missing_step(self, weight: float, gated: bool = True) -> Key:
        """A subset penalty only when the request clearly asks for more: a candidate whose
        tools are a strict subset of another retrieved candidate's loses `weight` x (gate) x
        the request's evidence for the missing tools (their weakest `_relative`)."""

        def key(case: Case, c: Cand) -> float:
            mine, evidence = set(c.tools), 0.0
            for x in case.cands:
                extra = set(x.tools) - mine
                if extra and set(x.tools) > mine:
                    evidence = max(evidence, min(self._relative(case.intent, t) for t in extra))
            g = case.gate if gated else 1.0
            return served(case, c) * (1 - weight * g * evidence)

        return key

    def weakest(self, weight: float) -> Key:
        """Per-step coverage, the weakest step: min over the tools of q . u_t against the best;
        a multi-step candidate loses `weight` x gate x (1 - min / max)."""

        def key(case: Case, c: Cand) -> float:
            xs = [float(self.q[case.intent] @ self.prof[t]) for t in set(c.tools) if t in self.prof]
            if len(xs) < 2 or max(xs) <= 0:
                return served(case, c)
            return served(case, c) * (1 - weight * case.gate * (1 - max(min(xs), 0) / max(xs)))

        return key

    def assignment(self, weight: float) -> Key:
        """Each step must claim its own share of the request: greedy, the best tool takes its
        projection, the next is judged on what is left; the weakest claim against the first."""

        def key(case: Case, c: Cand) -> float:
            left = [t for t in set(c.tools) if t in self.prof]
            if len(left) < 2:
                return served(case, c)
            r = self.q[case.intent].copy()
            gains = []
            while left:
                best = max(left, key=lambda t: float(r @ self.prof[t]))
                g = float(r @ self.prof[best])
                gains.append(max(g, 0.0))
                r = r - g * self.prof[best]
                left.remove(best)
            cover = min(gains) / gains[0] if gains[0] > 0 else 0.0
            return served(case, c) * (1 - weight * case.gate * (1 - cover))

        return key


def weights(w: float, wp: float, power: float = 1.0) -> Key:
    """The served formula at other step weights (the fit and cosine recovered from the
    ungated factors at 0.3 / 0.8), the gated factor raised to `power`."""

    def key(case: Case, c: Cand) -> float:
        fit, cos = (c.dice - 0.7) / 0.3, (c.profile - 0.2) / 0.8
        s = 1 - case.gate * (1 - (1 - w + w * fit) * (1 - wp + wp * cos))
        return float(c.match * c.rest * s**power)

    return key


def gate_opened(share: float, need: int) -> Key:
    """The gate opened by `share` of what is left when the text asks for `need` actions or more."""

    def key(case: Case, c: Cand) -> float:
        g = case.gate
        if asked_parts(case.intent) >= need:
            g += (1 - g) * share
        return c.match * c.rest * (1 - g * (1 - c.dice * c.profile))

    return key


def every_bm25(case: Case, c: Cand) -> float:
    """The match with every candidate's own BM25, not 0 for a candidate the lexical search did
    not return (its semantic part is already exact for every candidate)."""
    lexical = c.bm25 / (c.bm25 + 10.0) if c.bm25 > 0 else 0.0  # lexical_half_score 10
    return (1 - (1 - c.semantic) * (1 - 0.9 * lexical)) * c.rest * c.served


def oracle_count(weight: float) -> Key:
    """A ceiling, not a signal: the expected tool count known (|n - t| / max(n, t) costs
    `weight`), what the best possible estimate of the asked step count could give."""

    def key(case: Case, c: Cand) -> float:
        n, t = len(set(case.tools)), _steps(c)
        return served(case, c) * (1 - weight * abs(n - t) / max(n, t))

    return key


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=("collect", "report"))
    ap.add_argument("--cache", type=Path, default=CACHE)
    ap.add_argument("--skewed-cache", type=Path, default=SKEWED_CACHE)
    ap.add_argument("--show", type=int, default=0)
    ap.add_argument("--skewed", action="store_true", help="collect: the skewed variant")
    a = ap.parse_args(argv)
    if a.what == "collect":
        collect(a.skewed_cache if a.skewed else a.cache, a.skewed)
        return
    cases = load(a.cache)
    bad = sum(abs(served(k, c) - c.total) > 1e-9 for k in cases for c in k.cands)
    print(f"{len(cases)} queries; replayed totals off the served ones: {bad}")
    misses(cases, a.show)
    misses(cases, 0, "check")
    if a.skewed_cache.exists():
        cases += load(a.skewed_cache)
    print()
    toward = Toward(cases)
    keys: dict[str, Key] = {
        "served": served,
        "match only": lambda k, c: c.match * c.rest,
    }
    keys |= {f"asked actions (text) {w}, gated": text_count(w, True) for w in (0.1, 0.2, 0.3)}
    keys |= {f"asked actions (text) {w}, ungated": text_count(w, False) for w in (0.1, 0.2)}
    keys |= {f"asked actions (neighbours) {w}": neighbour_count(w) for w in (0.1, 0.2, 0.3)}
    keys |= {
        f"subset penalty {w}, gate >= {g}": subset_penalty(w, g)
        for w in (0.05, 0.1, 0.2)
        for g in (0.5, 1.0)
    }
    keys |= {f"missing-step evidence {w}, gated": toward.missing_step(w) for w in (0.05, 0.1, 0.2)}
    keys |= {
        f"missing-step evidence {w}, ungated": toward.missing_step(w, False) for w in (0.05, 0.1)
    }
    keys |= {f"weakest step {w}": toward.weakest(w) for w in (0.1, 0.2, 0.3)}
    keys |= {f"step assignment {w}": toward.assignment(w) for w in (0.1, 0.2)}
    keys |= {
        f"step_weight {w}, profile {wp}": weights(w, wp)
        for w, wp in ((0.3, 0.9), (0.3, 1.0), (0.5, 0.8), (0.5, 1.0), (0.7, 1.0))
    }
    keys |= {f"gated factor ^ {p}": weights(0.3, 0.8, p) for p in (1.5, 2.0, 3.0)}
    keys |= {
        f"gate opened {a} when asked actions >= {n}": gate_opened(a, n)
        for a in (0.25, 0.5)
        for n in (2, 4)
    }
    keys["every candidate's BM25"] = every_bm25
    keys |= {f"ceiling: step count known, {w}": oracle_count(w) for w in (0.2, 0.5, 0.9)}
    table(cases, keys)


if __name__ == "__main__":
    main()
