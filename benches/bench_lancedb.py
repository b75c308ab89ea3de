"""Peer: pml against LanceDB, the embedded store agent frameworks ship as their default memory
(CrewAI's among others): a Rust core, vector search, full-text search (tantivy-style BM25) and
a reranker for hybrid queries.

Quality, on the development set (../shared/devset, its README's hit@1): the same executions
and held-apart requests, the same MiniLM vectors (benches/harness/quality_vectors.py, computed once
and cached). LanceDB holds one row per execution (its group, its vector, `text` = the intent and the
tool names, with an FTS index on it) and is queried as its users write it: vector only, FTS
only, hybrid with its default reranker (RRF) and hybrid with its linear-combination reranker;
each answer's rows are ranked by group, a group at its best row (50 rows fetched, so a group
that a near-duplicate row pushed past the top 5 still ranks). pml is the served Suggest of a
real `pml serve` with default settings (benches/harness/quality_devset.py, the same run). Rows:
hit@1, hit@5 and MRR on all queries and on the multi-tool slice; pml's against LanceDB's best mode.

Speed, on the service bench's store of 10k executions (its clustered vectors and texts):
query QPS, p50 and p99 at 1 and 8 callers for LanceDB hybrid and vector (in-process), pml over
gRPC (Suggest with the text and its vector: pml's own hybrid) and pml's engine in-process; one
record per call inserts at 1 caller (LanceDB `add`, pml's engine `record`); resident memory per
stored intent at 100k for both. Each side runs in its own process
(benches/harness/service_lancedb.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from benches.common import Row
from benches.harness import quality_devset as devset_quality
from benches.harness import service_harness as harness
from benches.harness.devset import DevExecution, DevQuery
from benches.harness.service_harness import ROOT, Plan

SUITE = "lancedb"
FETCH = 50  # rows fetched per LanceDB query, ranked by group (a group at its best row)
MODES = ("vector", "FTS", "hybrid (RRF, default)", "hybrid (linear combination)")


# ---------------------------------------------------------------- quality


def _lancedb_ranks(
    executions: Sequence[DevExecution],
    queries: Sequence[DevQuery],
    vec: dict[str, NDArray[np.float32]],
    path: Path,
) -> dict[str, list[int]]:
    import lancedb
    from lancedb.index import FTS
    from lancedb.rerankers import LinearCombinationReranker, RRFReranker

    db = lancedb.connect(str(path))
    table = db.create_table(
        "devset",
        data=[
            {
                "group": e.group,
                "text": f"{e.intent} {' '.join(e.tools)}",
                "vector": vec[e.intent],
            }
            for e in executions
        ],
    )
    table.create_index("text", config=FTS(), replace=True)
    rrf, linear = RRFReranker(), LinearCombinationReranker()
    ranks: dict[str, list[int]] = {mode: [] for mode in MODES}
    for q in queries:
        v = vec[q.intent]
        answers = {
            "vector": table.search(v).limit(FETCH).to_list(),
            "FTS": _fts(table, q.intent),
            "hybrid (RRF, default)": table.search(query_type="hybrid")
            .vector(v)
            .text(q.intent)
            .rerank(rrf)
            .limit(FETCH)
            .to_list(),
            "hybrid (linear combination)": table.search(query_type="hybrid")
            .vector(v)
            .text(q.intent)
            .rerank(linear)
            .limit(FETCH)
            .to_list(),
        }
        for mode, rows in answers.items():
            ranks[mode].append(devset_quality._rank([r["group"] for r in rows], q.group))
    return ranks


def _fts(table: object, text: str) -> list[dict[str, object]]:
    try:
        rows: list[dict[str, object]] = (
            table.search(text, query_type="fts").limit(FETCH).to_list()  # type: ignore[attr-defined]
        )
    except ValueError:  # a request of stop words only: LanceDB refuses it; no answer
        return []
    return rows


def quality_rows(max_queries: int | None) -> list[Row]:
    ev = devset_quality.evaluate("default", "minilm", inject=False, max_queries=max_queries)
    executions, _ = devset_quality.load("default")
    queries = ev.queries
    vec = devset_quality._vector_map(
        "minilm", [e.intent for e in executions] + [q.intent for q in queries]
    )
    assert vec is not None
    with tempfile.TemporaryDirectory(prefix="pml-lancedb-quality-") as tmp:
        peer = _lancedb_ranks(executions, queries, vec, Path(tmp))
    slices = {
        "all": list(range(len(queries))),
        "multi-tool": [i for i, q in enumerate(queries) if q.multi_tool],
    }
    rows: list[Row] = []
    for name, idx in slices.items():
        ours = devset_quality.metrics([ev.ranks["served"][i] for i in idx])
        theirs = {m: devset_quality.metrics([peer[m][i] for i in idx]) for m in MODES}
        extra: dict[str, object] = {"queries": len(idx)}
        for mode in MODES:
            extra.update({f"LanceDB {mode} {k}": round(v, 4) for k, v in theirs[mode].items()})
        for metric in ("hit@1", "hit@5", "MRR"):
            best = max(MODES, key=lambda m: theirs[m][metric])
            rows.append(
                Row(
                    SUITE,
                    f"devset {name} pml served {metric} vs LanceDB's best mode",
                    ours[metric],
                    "",
                    theirs[best][metric],
                    f"LanceDB {best}",
                    1.0 if metric in ("hit@1", "MRR") else None,
                    extra=extra,
                )
            )
    return rows


# ---------------------------------------------------------------- speed and memory


def _side(target: str, op: str, callers: int, plan: Plan, offset: int = 0) -> dict[str, float]:
    return harness.load(
        target, op, callers, plan, "vector", offset, "benches.harness.service_lancedb"
    )


def _populate_lancedb(path: Path, count: int) -> float:
    done = subprocess.run(
        harness.python_module("benches.harness.service_lancedb", "populate", str(path), str(count)),
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=1800 + count * 0.01,
    )
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def _lancedb_memory(path: Path, count: int) -> dict[str, float]:
    done = subprocess.run(
        harness.python_module("benches.harness.service_lancedb", "memory", str(path), str(count)),
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def speed_rows(plan: Plan) -> list[Row]:
    small, big = plan.store_sizes[0], plan.store_sizes[-1]
    callers = tuple(c for c in (1, 8) if c in plan.concurrency) or plan.concurrency
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="pml-lancedb-speed-") as tmp:
        scratch = Path(tmp)
        ours_dir, _ = harness.filled_store(plan, scratch, small, "minilm", vectors=True)
        peer_dir = scratch / "lancedb"
        _populate_lancedb(peer_dir, small)
        sweeps: dict[str, dict[int, dict[str, float]]] = {}
        for name, target, op in (
            ("LanceDB hybrid", f"lancedb:{peer_dir}", "hybrid"),
            ("LanceDB vector", f"lancedb:{peer_dir}", "vector"),
            ("pml engine", f"engine:{ours_dir}", "suggest"),
        ):
            sweeps[name] = {c: _side(target, op, c, plan) for c in callers}
        with harness.server("serve", str(ours_dir), "minilm", "fast") as srv:
            sweeps["pml gRPC"] = {
                c: harness.load(srv.target, "suggest", c, plan, "vector") for c in callers
            }
        inserts = {
            "LanceDB add": _side(f"lancedb:{peer_dir}", "add", 1, plan, 20_000_000),
            "pml engine record": _side(f"engine:{ours_dir}", "record", 1, plan, 20_000_000),
        }
        peer = sweeps["LanceDB hybrid"]
        for c in callers:
            for ours, target in (("pml engine", 1.5), ("pml gRPC", 1.0 if c == 8 else None)):
                rows.append(
                    Row(
                        SUITE,
                        f"{ours} Suggest vs LanceDB hybrid QPS, {c} callers, {small} stored",
                        sweeps[ours][c]["qps"],
                        "req/s",
                        peer[c]["qps"],
                        "LanceDB hybrid, in-process",
                        target,
                        extra={"LanceDB vector qps": round(sweeps["LanceDB vector"][c]["qps"], 1)},
                    )
                )
                for pct in ("p50", "p99"):
                    rows.append(
                        Row(
                            SUITE,
                            f"{ours} Suggest vs LanceDB hybrid {pct}, {c} callers",
                            sweeps[ours][c][f"{pct}_ms"],
                            "ms",
                            peer[c][f"{pct}_ms"],
                            "LanceDB hybrid, in-process",
                            1.0 if pct == "p99" else None,
                            lower_is_better=True,
                        )
                    )
        rows.append(
            Row(
                SUITE,
                "pml engine record vs LanceDB add, 1 record a call, 1 caller",
                inserts["pml engine record"]["qps"],
                "rec/s",
                inserts["LanceDB add"]["qps"],
                "LanceDB add, in-process",
                extra={
                    "pml p50_ms": round(inserts["pml engine record"]["p50_ms"], 3),
                    "LanceDB p50_ms": round(inserts["LanceDB add"]["p50_ms"], 3),
                },
            )
        )
        rows.append(_memory_row(plan, scratch, big))
    return rows


def _memory_row(plan: Plan, scratch: Path, size: int) -> Row:
    """Resident bytes per stored intent: pml's server on a filled store minus an empty one;
    LanceDB's process after opening the table and answering hybrid queries minus before."""
    ours_dir, _ = harness.filled_store(plan, scratch, size, "minilm", vectors=True)
    empty = scratch / "empty"
    with harness.server("serve", str(empty), "minilm", "fast") as srv:
        empty_rss = srv.rss_bytes()
    with harness.server("serve", str(ours_dir), "minilm", "fast") as srv:
        # the same 200 queries first: what a serving process holds, as on LanceDB's side
        harness.load(srv.target, "suggest", 1, Plan((size,), (1,), 30.0, 200), "vector")
        ours_rss = srv.rss_bytes()
    peer_dir = scratch / f"lancedb-{size}"
    _populate_lancedb(peer_dir, size)
    peer = _lancedb_memory(peer_dir, size)
    ours = (ours_rss - empty_rss) / size
    theirs = (peer["rss_after"] - peer["rss_before"]) / size
    return Row(
        SUITE,
        f"resident memory per intent, {size} stored",
        ours,
        "bytes",
        theirs,
        "LanceDB, table opened and queried",
        1.0,
        lower_is_better=True,
        extra={"pml rss": ours_rss, "pml empty rss": empty_rss, **peer},
    )


def run(large: bool) -> list[Row]:
    quick = bool(os.environ.get("PML_BENCH_QUICK"))
    rows = quality_rows(60 if quick else None)
    rows += speed_rows(Plan.for_run(large))
    return rows


if __name__ == "__main__":
    plan = Plan.quick() if "--quick" in sys.argv else Plan.for_run(False)
    for row in (
        quality_rows(60 if "--quick" in sys.argv else None)
        if "quality" in sys.argv
        else speed_rows(plan)
    ):
        print(json.dumps(row.as_dict()), flush=True)
