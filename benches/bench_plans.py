"""Plans (docs/ranking.md, Plans): composed answers for requests no stored capability covers.

Quality on ../shared/devset/multistep (Seal-Tools; every query there is "compose"): its 1,885
executions are captured into a fresh store (default model), then each query asks Suggest with
plans on; the top plan's tools in order against the expected tools (exact sequence) and its
expected-tool recall; baseline: the best single suggestion's recall (what Suggest answered
before plans). Reported apart for the queries the constants were tuned on and for the third
held apart (`held_apart`, a hash of the query id).

Exact multi-step queries (benches/harness/make_exact_multistep.py, from ../shared/devset): served
hit@1/hit@5/MRR against the TF-IDF baseline, and false plans on them.

False plans on ../shared/devset (MetaTool + NESTFUL): its executions (less the exact queries'
held-apart ones) captured, each single-tool
query asked with plans off and on; a false plan is a plan offered while the right single
capability is among the suggestions; hit@1 with plans on and off (plans never change the
suggestions; this row shows it).

Latency: Suggest p50 at 10k stored intents (the quality suite's cached store,
benches/harness/quality_latency.py) with plans off and on, in the same run, on the quality set's
held-out queries and on the compose queries.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benches.common import Row
from benches.harness import devset, make_exact_multistep
from benches.harness.quality_engine import open_engine
from benches.harness.quality_latency import filled_store
from pml_server.domain.model import ExecutionRecord, SuggestQuery, SuggestResult, ToolCall
from pml_server.service import Engine

SUITE = "plans"
TENANT = "bench"
EMBEDDER = "minilm"
MULTISTEP = devset.DEVSET / "multistep"


def available() -> bool:
    return (MULTISTEP / "queries.jsonl").exists() and devset.available()


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def execution(
    n: int, intent: str, code: str, tools: Sequence[str], vec: Sequence[float] | None = None
) -> ExecutionRecord:
    """The n-th execution of a multi-step store (JavaScript), with its client vector if given."""
    return ExecutionRecord(
        request_id=f"x{n}",
        intent=intent,
        code=code,
        language="javascript",
        tool_calls=tuple(ToolCall(t) for t in tools),
        intent_embedding=None if vec is None else tuple(vec),
    )


def _recall(expected: list[str], got: tuple[str, ...]) -> float:
    return len(set(expected) & set(got)) / len(set(expected))


@dataclass
class ComposeResult:
    queries: int
    exact: float
    plan_recall: float  # top plan's recall, 0 where no plan was offered
    answer_recall: float  # top plan's recall, or the top suggestion's without a plan
    single_recall: float  # the top suggestion's recall (the baseline)
    offered: float
    mean_parts: float


def held_apart(query_id: str) -> bool:
    """The compose queries held apart from tuning (docs/ranking.md, Plans, "Measured"): a
    third of them, by a hash of the query id."""
    return int(hashlib.sha1(f"plans:{query_id}".encode()).hexdigest(), 16) % 3 == 0


def fill_multistep(engine: Engine) -> None:
    executions = _jsonl(MULTISTEP / "executions.jsonl")
    for n, e in enumerate(executions):
        engine.record(TENANT, execution(n, str(e["intent"]), str(e["code"]), list(e["tools"])))


def compose_quality(engine: Engine, queries: list[dict[str, Any]]) -> ComposeResult:
    exact = plan_recall = answer_recall = single_recall = offered = parts = 0.0
    for q in queries:
        expected = list(q["expected_tools"])
        result = engine.suggest(TENANT, SuggestQuery(str(q["intent"]), k=5))
        single = result.suggestions[0].pattern.tools_used if result.suggestions else ()
        single_recall += _recall(expected, single)
        if result.plans:
            top = result.plans[0]
            offered += 1
            parts += len(top.parts)
            exact += list(top.tools) == expected
            plan_recall += _recall(expected, top.tools)
            answer_recall += _recall(expected, top.tools)
        else:
            answer_recall += _recall(expected, single)
    n = len(queries)
    return ComposeResult(
        n,
        exact / n,
        plan_recall / n,
        answer_recall / n,
        single_recall / n,
        offered / n,
        parts / max(offered, 1),
    )


@dataclass
class FalsePlans:
    queries: int
    false_plan: float  # a plan offered while the right capability is among the suggestions
    false_plan_top1: float  # ... while the right capability is the top suggestion
    hit1_off: float
    hit1_on: float


def _groups(result: SuggestResult, group_of: dict[str, str]) -> list[str]:
    out: list[str] = []
    for s in result.suggestions:
        g = group_of.get(s.capability_id, "?")
        if g not in out:
            out.append(g)
    return out


def fill_exact_store(engine: Engine) -> dict[str, str]:
    """The dev set's executions without those the exact queries hold apart; capability id ->
    its majority group."""
    executions, _ = make_exact_multistep.build()
    votes: dict[str, Counter[str]] = {}
    for n, e in enumerate(executions):
        got = engine.record(TENANT, execution(n, e.intent, e.code, list(e.tools)))
        votes.setdefault(got.capability_id, Counter())[e.group] += 1
    return {c: v.most_common(1)[0][0] for c, v in votes.items()}


def false_plans(engine: Engine, group_of: dict[str, str]) -> FalsePlans:
    _, queries = devset.load()
    single = [q for q in queries if not q.multi_tool]
    false_any = false_top = hit_off = hit_on = 0
    for q in single:
        off = engine.suggest(TENANT, SuggestQuery(q.intent, k=5, plan_size=0))
        on = engine.suggest(TENANT, SuggestQuery(q.intent, k=5))
        groups_off, groups_on = _groups(off, group_of), _groups(on, group_of)
        hit_off += bool(groups_off) and groups_off[0] == q.group
        hit_on += bool(groups_on) and groups_on[0] == q.group
        if on.plans and q.group in groups_on:
            false_any += 1
            false_top += groups_on[0] == q.group
    n = len(single)
    return FalsePlans(n, false_any / n, false_top / n, hit_off / n, hit_on / n)


@dataclass
class ExactResult:
    queries: int
    hit1: float
    hit5: float
    mrr: float
    false_plan: float  # a plan offered while the right capability is among the suggestions
    tfidf: dict[str, float]
    # hit@1 by split (`split_of`): "tune" seen while choosing the step fit, "check" held apart
    split_hit1: dict[str, tuple[int, float]]


def exact_quality(engine: Engine, group_of: dict[str, str]) -> ExactResult:
    """The exact multi-step queries (benches/harness/make_exact_multistep.py) against the store it
    leaves, plans on (the suggestions do not change with plans)."""
    store, queries = make_exact_multistep.build()
    hit1 = hit5 = rr = false = 0.0
    by_split: dict[str, list[bool]] = {"tune": [], "check": []}
    for q in queries:
        result = engine.suggest(TENANT, SuggestQuery(q.intent, k=5))
        groups = _groups(result, group_of)
        rank = groups.index(q.expected_group) + 1 if q.expected_group in groups else 0
        hit1 += rank == 1
        hit5 += 0 < rank <= 5
        rr += 1 / rank if rank else 0.0
        false += bool(result.plans) and rank > 0
        by_split[split_of(q.id)].append(rank == 1)
    n = len(queries)
    baseline = make_exact_multistep.tfidf_baseline(store, queries)
    splits = {k: (len(v), sum(v) / max(len(v), 1)) for k, v in by_split.items()}
    return ExactResult(n, hit1 / n, hit5 / n, rr / n, false / n, baseline, splits)


def split_of(query_id: str) -> str:
    """The dev set's split (`quality_devset.split_of`) by query id: `check` (a quarter, held
    apart while the step fit was chosen, docs/ranking.md, Steps) or `tune`."""
    return "check" if hashlib.sha1(("check:" + query_id).encode()).digest()[0] < 64 else "tune"


def latency(engine: Engine, texts: list[str]) -> tuple[float, float]:
    """Suggest p50 in ms with plans off and on, alternating per query; each text gets a
    different suffix per mode so the embedding cache never answers."""
    off: list[float] = []
    on: list[float] = []
    for text in texts:
        for samples, suffix, size in ((off, "now", 0), (on, "please", 3)):
            start = time.perf_counter()
            engine.suggest(TENANT, SuggestQuery(f"{text} {suffix}", k=5, plan_size=size))
            samples.append(time.perf_counter() - start)
    return statistics.median(off) * 1e3, statistics.median(on) * 1e3


def run(large: bool) -> list[Row]:
    if not available():
        return []
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="pml-plans-") as tmp:
        engine = open_engine(Path(tmp) / "multistep", EMBEDDER, None)
        all_queries = _jsonl(MULTISTEP / "queries.jsonl")
        try:
            fill_multistep(engine)
            splits = {
                "tuning": [q for q in all_queries if not held_apart(str(q["id"]))],
                "held apart": [q for q in all_queries if held_apart(str(q["id"]))],
            }
            results = {name: compose_quality(engine, qs) for name, qs in splits.items()}
            compose_texts = [str(q["intent"]) for q in all_queries]
        finally:
            engine.close()
        for name, c in results.items():
            extra = {"queries": c.queries, "plan_offered": round(c.offered, 4)}
            extra["mean_plan_parts"] = round(c.mean_parts, 2)
            rows += [
                Row(SUITE, f"compose ({name}): top plan tools in order == expected", c.exact,
                    "share", extra=extra | {"target": ">= 0.50"}),
                Row(SUITE, f"compose ({name}): top plan expected-tool recall", c.plan_recall,
                    "recall", c.single_recall, "best single suggestion",
                    extra=extra | {"target": ">= 0.80"}),
                Row(SUITE, f"compose ({name}): answer recall (top plan, else top suggestion)",
                    c.answer_recall, "recall", c.single_recall, "best single suggestion",
                    extra=extra),
            ]  # fmt: skip
        engine = open_engine(Path(tmp) / "devset", EMBEDDER, None)
        try:
            group_of = fill_exact_store(engine)
            f = false_plans(engine, group_of)
            x = exact_quality(engine, group_of)
        finally:
            engine.close()
        extra = {"queries": f.queries}
        rows += [
            Row(SUITE, "dev single-tool: false plans (right capability suggested)",
                f.false_plan, "share", extra=extra | {"target": "< 0.05"}),
            Row(SUITE, "dev single-tool: false plans (right capability top-1)",
                f.false_plan_top1, "share", extra=extra),
            Row(SUITE, "dev single-tool: served hit@1 plans on", f.hit1_on, "hit@1",
                f.hit1_off, "plans off", target=1.0, extra=extra),
        ]  # fmt: skip
        extra = {"queries": x.queries}
        rows += [
            Row(SUITE, "exact multi-step: served hit@1", x.hit1, "hit@1", x.tfidf["hit@1"],
                "TF-IDF", target=(x.tfidf["hit@1"] + 0.25) / x.tfidf["hit@1"],
                extra=extra | {"target": "TF-IDF + 0.25"}),
            Row(SUITE, "exact multi-step: served hit@5", x.hit5, "hit@5", x.tfidf["hit@5"],
                "TF-IDF", extra=extra),
            Row(SUITE, "exact multi-step: served MRR", x.mrr, "MRR", x.tfidf["mrr"], "TF-IDF",
                extra=extra),
            Row(SUITE, "exact multi-step: false plans (right capability suggested)",
                x.false_plan, "share", extra=extra | {"target": "< 0.05"}),
        ]  # fmt: skip
        for name, (count, value) in x.split_hit1.items():
            label = "tune, seen while tuning" if name == "tune" else "check, held apart"
            rows.append(
                Row(SUITE, f"exact multi-step ({label}): served hit@1", value, "hit@1",
                    x.tfidf["hit@1"], "TF-IDF (all)", extra={"queries": count})
            )  # fmt: skip
        store, _ = filled_store(Path(tmp), EMBEDDER, 10_000)
        engine = open_engine(store, EMBEDDER, None)
        try:
            from benches.harness.quality_dataset import load

            _, held_out = load()
            texts = [q.text for q in held_out]
            off, on = latency(engine, texts)
            c_off, c_on = latency(engine, compose_texts[:60])
        finally:
            engine.close()
        rows += [
            Row(SUITE, "suggest p50 at 10k intents, plans on (held-out queries)", on, "ms",
                off, "plans off", target=1.5, lower_is_better=True,
                extra={"samples": len(texts)}),
            Row(SUITE, "suggest p50 at 10k intents, plans on (compose queries)", c_on, "ms",
                c_off, "plans off", target=1.5, lower_is_better=True,
                extra={"samples": 60}),
        ]  # fmt: skip
    return rows
