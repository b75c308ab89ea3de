"""Served ranking against match only, one signal at a time (docs/ranking.md, "Served against
match only: the signals ablated").

`python -m benches.calibrate.ablate collect {default,skewed,synthetic} {minilm,hashing}` fills a
store like the quality bench (the dev set through a real `pml serve` with the step gate off,
`[engine.ranking] step_gate = 0`, so the recorded step factor is the ungated fit; the synthetic
set of benches/data in process, the same way) and asks every query with explain at min_match 0,
recording every candidate's score parts, plus each query's expected step count (the
cosine-weighted mean tool count of the groups of its 10 nearest intents, exact search over the
same vectors; docs/ranking.md, Steps, "Gate"). It pickles them under $PML_ABLATE_DIR
(default /tmp/pml-ablate). Then `python -m benches.calibrate.ablate report NAME...` (NAME as
`default-minilm`) replays, per slice (tune / check, dev / held-out, multi / single): the served
formula before the gate and with it, each without usage, without the step fit and match alone;
the step weight under the gate; and the fusion variants of the same section. No failures and
no old patterns in these sets: reliability and recency are 1 for every candidate (the report
counts the exceptions).
"""

from __future__ import annotations

import hashlib
import math
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from benches.harness.quality_devset import Server

OUT = Path(os.environ.get("PML_ABLATE_DIR", "/tmp/pml-ablate"))
K = 5
NEIGHBOURS = 10  # ranking STEP_NEIGHBOURS
PROBE_STEP_WEIGHT = 0.3  # the default step_weight the fits are recovered at
PROBE_USAGE_WEIGHT = 0.002
PROBE_HALF = 10.0


@dataclass(frozen=True)
class Cand:
    group: str
    pattern: str
    semantic: float
    lexical: float  # normalized at the default half score
    usage: float
    recency: float
    reliability: float
    steps: float  # ungated
    match: float


@dataclass
class Case:
    id: str
    split: str  # tune / check (dev set) or dev / held-out (synthetic set)
    multi: bool
    group: str
    cands: list[Cand]
    expected_steps: float = 1.0
    extra: dict[str, float] = field(default_factory=dict)


def _cand(group: str, pattern: str, sc: object) -> Cand:
    g = sc.__getattribute__
    return Cand(
        group,
        pattern,
        g("semantic"),
        g("lexical"),
        g("usage"),
        g("recency"),
        g("reliability"),
        g("steps"),
        g("match"),
    )


# ---------------------------------------------------------------- collection


def _expected_steps(
    store: NDArray[np.float32],
    tools_of: Sequence[int],
    queries: NDArray[np.float32],
) -> list[float]:
    """Per query, the cosine-weighted mean tool count of its NEIGHBOURS nearest intents."""

    def unit(m: NDArray[np.float32]) -> NDArray[np.float32]:
        return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)

    store, queries = unit(np.asarray(store)), unit(np.asarray(queries))
    counts = np.asarray(tools_of, dtype=np.float64)
    out = []
    for i in range(0, len(queries), 256):
        sims = queries[i : i + 256] @ store.T
        for row in range(sims.shape[0]):
            top = np.argsort(-sims[row])[:NEIGHBOURS]
            w = np.maximum(sims[row, top], 0.0)
            out.append(float((w * counts[top]).sum() / w.sum()) if w.sum() > 0 else 1.0)
    return out


def _embed(embedder: str, texts: list[str]) -> NDArray[np.float32]:
    if embedder == "minilm":
        from benches.harness.quality_vectors import vectors

        return vectors("minilm", texts)
    from pml_server.embedding import make_embedder

    return np.asarray(make_embedder(embedder).embed(texts), dtype=np.float32)


def collect_devset(variant: str, embedder: str) -> list[Case]:
    from benches.harness.devset import load
    from benches.harness.quality_devset import _fill, _vector_map, split_of

    executions, queries = load(variant)
    vec = _vector_map(embedder, [e.intent for e in executions] + [q.intent for q in queries])
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        server = _ungated_server(Path(tmp), embedder)
        try:
            with server.client() as client:
                store = _fill(client, executions, vec)
                for q in queries:
                    emb = vec[q.intent].tolist() if vec is not None else ()
                    reply = client.suggest(
                        q.intent, K, explain=True, min_match=0.0, intent_embedding=emb
                    )
                    items = [(s.capability, s.pattern.name, s.score) for s in reply.suggestions]
                    items += [
                        (f.capability, f.pattern, f.score)
                        for f in reply.filtered
                        if f.rule in ("same_capability", "beyond_k")
                    ]
                    cands = [_cand(store.group_of.get(c, "?"), p, sc) for c, p, sc in items]
                    cases.append(Case(q.id, split_of(q), q.multi_tool, q.group, cands))
        finally:
            server.stop()
    pairs = sorted({(e.group, e.intent) for e in executions})
    tools = {e.group: len(set(e.tools)) for e in executions}
    steps = _expected_steps(
        _embed(embedder, [t for _, t in pairs]),
        [tools[g] for g, _ in pairs],
        _embed(embedder, [q.intent for q in queries]),
    )
    for case, k in zip(cases, steps, strict=True):
        case.expected_steps = k
    return cases


def _ungated_server(data_dir: Path, embedder: str) -> Server:
    """`pml serve` as the quality bench runs it, plus `[engine.ranking] step_gate = 0`."""
    config = data_dir / "ungated.toml"
    config.write_text("[engine.ranking]\nstep_gate = 0.0\n")
    return _ConfiguredServer(data_dir / "store", embedder, config)


class _ConfiguredServer(Server):
    def __init__(self, data_dir: Path, embedder: str, config: Path) -> None:
        cmd = [
            sys.executable,
            "-m",
            "pml_server.cli",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
            "--embedder",
            embedder,
            "--durability",
            "fast",
            "--log-level",
            "warning",
            "--config",
            str(config),
        ]
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = self._wait_for_port()


def collect_synthetic(embedder: str) -> list[Case]:
    from dataclasses import replace

    from benches.harness.quality_dataset import load
    from benches.harness.quality_engine import TENANT, capture_labelled, open_engine
    from pml_server.domain.model import SuggestQuery
    from pml_server.ranking.config import default_ranking

    executions, held_out = load()
    _, dev = load(split="dev_queries")
    cases = []
    ungated = replace(default_ranking(embedder), step_gate=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        engine = open_engine(Path(tmp), embedder, ungated)
        try:
            label_of = capture_labelled(engine, executions)
            for split, qs in (("dev", dev), ("held-out", held_out)):
                for i, q in enumerate(qs):
                    probe = SuggestQuery(q.text, k=K, min_match=0.0, min_success=0.0, explain=True)
                    result = engine.suggest(TENANT, probe)
                    cands = [
                        _cand(label_of.get(s.capability_id, "?"), s.pattern.id, s.score)
                        for s in result.suggestions
                    ]
                    cands += [
                        _cand(label_of.get(f.capability_id, "?"), f.pattern_id, f.score)
                        for f in result.filtered
                        if f.score is not None
                    ]
                    cases.append(Case(f"{split}{i}", split, False, q.label, cands))
        finally:
            engine.close()
    pairs = sorted({(e.label, e.intent) for e in executions})
    tools = {e.label: len(set(e.tools)) for e in executions}
    steps = _expected_steps(
        _embed(embedder, [t for _, t in pairs]),
        [tools[g] for g, _ in pairs],
        _embed(embedder, [q.text for q in dev] + [q.text for q in held_out]),
    )
    for case, k in zip(cases, steps, strict=True):
        case.expected_steps = k
    return cases


# ---------------------------------------------------------------- replay

Key = Callable[[Case, Cand], float]


def _fit(c: Cand) -> float:
    return (c.steps - (1.0 - PROBE_STEP_WEIGHT)) / PROBE_STEP_WEIGHT


def _gate(case: Case) -> float:
    return min(max(case.expected_steps - 1.0, 0.0), 1.0)


def _raw(lexical: float) -> float:
    return 0.0 if lexical <= 0 else PROBE_HALF * lexical / (1.0 - lexical)


def step(case: Case, c: Cand, weight: float = PROBE_STEP_WEIGHT, gated: bool = True) -> float:
    g = _gate(case) if gated else 1.0
    return 1.0 - g * weight * (1.0 - _fit(c))


def _rank(case: Case, key: Key) -> int:
    seen: list[str] = []
    for c in sorted(case.cands, key=lambda c: (-key(case, c), c.pattern)):
        if c.group not in seen:
            seen.append(c.group)
    return seen.index(case.group) + 1 if case.group in seen[:K] else 0


def metrics(cases: Sequence[Case], key: Key) -> tuple[float, float]:
    ranks = [_rank(c, key) for c in cases]
    n = max(len(ranks), 1)
    return sum(r == 1 for r in ranks) / n, sum(1 / r for r in ranks if r) / n


def _slices(cases: list[Case], name: str) -> dict[str, list[Case]]:
    out = {"all": cases}
    for split in sorted({c.split for c in cases}, reverse=True):
        out[split] = [c for c in cases if c.split == split]
    if not name.startswith("synthetic"):
        out["multi-tool"] = [c for c in cases if c.multi]
        out["single-tool"] = [c for c in cases if not c.multi]
    if name.startswith("skewed"):  # the bench's 1,000 queries (by id hash) and their check part
        ids = sorted(cases, key=lambda q: hashlib.sha1(q.id.encode()).hexdigest())[:1000]
        keep = {c.id for c in ids}
        out["bench 1,000"] = [c for c in cases if c.id in keep]
        out["bench check"] = [c for c in out["bench 1,000"] if c.split == "check"]
    return out


def _table(title: str, cases: list[Case], name: str, keys: dict[str, Key]) -> None:
    sl = _slices(cases, name)
    print(f"\n{title}: hit@1 / MRR")
    print("| mode | " + " | ".join(f"{k} {len(v)}" for k, v in sl.items()) + " |")
    print("| --- " * (len(sl) + 1) + "|")
    for mode, key in keys.items():
        cells = [f"{h:.4f} / {m:.4f}" for h, m in (metrics(v, key) for v in sl.values())]
        print(f"| {mode} | " + " | ".join(cells) + " |")


def _fused(
    semantic_weight: float, lexical_weight: float, confidence: Callable[[Case], float]
) -> Key:
    def key(case: Case, c: Cand) -> float:
        b = _raw(c.lexical)
        lex = b / (b + PROBE_HALF) if b > 0 else 0.0
        lw = lexical_weight * confidence(case)
        return (1 - (1 - semantic_weight * c.semantic) * (1 - lw * lex)) * c.usage * step(case, c)

    return key


def _peak(case: Case) -> float:
    """How peaked the query's BM25 is: (best - second best) / best over its capabilities."""
    best: dict[str, float] = {}
    for c in case.cands:
        best[c.group] = max(best.get(c.group, 0.0), _raw(c.lexical))
    top = [*sorted(best.values(), reverse=True), 0.0, 0.0]
    return (top[0] - top[1]) / top[0] if top[0] > 0 else 0.0


def _rrf(semantic_share: float) -> Key:
    def key(case: Case, c: Cand) -> float:
        sem = sorted({x.group: x.semantic for x in case.cands}.items(), key=lambda g: -g[1])
        lex = sorted({x.group: x.lexical for x in case.cands}.items(), key=lambda g: -g[1])
        rs = [g for g, _ in sem].index(c.group) + 1
        rl = [g for g, _ in lex].index(c.group) + 1
        return (semantic_share / (60 + rs) + (1 - semantic_share) / (60 + rl)) * step(case, c)

    return key


def _weighted(weight: float) -> Key:
    return lambda k, c: c.match * c.usage * step(k, c, weight)


def report(name: str) -> None:
    with open(OUT / f"{name}.pkl", "rb") as fh:
        cases: list[Case] = pickle.load(fh)
    odd = sum(c.recency != 1.0 or c.reliability != 1.0 for k in cases for c in k.cands)
    print(f"\n## {name}: {len(cases)} queries; candidates with recency or reliability != 1: {odd}")
    _table(
        "served, one signal left out at a time",
        cases,
        name,
        {
            "served before (step fit ungated)": lambda k, c: (
                c.match * c.usage * step(k, c, gated=False)
            ),
            "served now (step fit gated)": lambda k, c: c.match * c.usage * step(k, c),
            "now without usage": lambda k, c: c.match * step(k, c),
            "now without the step fit (usage only)": lambda k, c: c.match * c.usage,
            "match only": lambda k, c: c.match,
        },
    )
    _table(
        "step_weight, gated",
        cases,
        name,
        {f"step_weight {w}": _weighted(w) for w in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)},
    )
    ws = 0.5 if "hashing" in name else 1.0
    one: Callable[[Case], float] = lambda k: 1.0  # noqa: E731
    _table(
        "fusion (step fit gated)",
        cases,
        name,
        {
            f"noisy-or {ws} / 0.9 (default)": _fused(ws, 0.9, one),
            "embedding only": _fused(ws, 0.0, one),
            "lexical only": _fused(0.0, 1.0, one),
            "lexical weight x BM25 peak": _fused(ws, 0.9, _peak),
            "lexical weight x sqrt(BM25 peak)": _fused(ws, 0.9, lambda k: math.sqrt(_peak(k))),
            "lexical weight 0.7": _fused(ws, 0.7, one),
            "lexical weight 1.0": _fused(ws, 1.0, one),
            "reciprocal-rank fusion, semantic share 0.5": _rrf(0.5),
            "reciprocal-rank fusion, semantic share 0.3": _rrf(0.3),
        },
    )


def main(argv: list[str]) -> None:
    if argv[:1] == ["collect"]:
        variant, embedder = argv[1], argv[2]
        OUT.mkdir(parents=True, exist_ok=True)
        got = (
            collect_synthetic(embedder)
            if variant == "synthetic"
            else collect_devset(variant, embedder)
        )
        with open(OUT / f"{variant}-{embedder}.pkl", "wb") as fh:
            pickle.dump(got, fh)
        print(f"{variant}-{embedder}: {len(got)} queries", file=sys.stderr)
    elif argv[:1] == ["report"]:
        for name in argv[1:]:
            report(name)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
