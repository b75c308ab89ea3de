"""The service and peer benchmarks run end to end in a tiny configuration, so they cannot rot.

Real processes on loopback (our server, the null servicer, the load clients, `chroma run`),
a few hundred intents, half-second load points. Only the shape of the results is checked,
never a timing: speed lives in `make bench`.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benches.harness import service_harness as harness
from benches.harness import service_workload as work
from benches.harness.service_harness import Plan

pytestmark = pytest.mark.slow


def _check_rows(rows: list[object]) -> None:
    for row in rows:
        value = row.value  # type: ignore[attr-defined]
        assert math.isfinite(value), row
        # At the quick plan's few hundred intents, a store's memory is within the RSS noise of
        # two server processes (about 1 MB of 275 MB): the difference may come out negative.
        if not row.metric.startswith("resident memory per intent"):  # type: ignore[attr-defined]
            assert value >= 0, row
        baseline = row.baseline  # type: ignore[attr-defined]
        assert baseline is None or (math.isfinite(baseline) and baseline > 0), row


def test_workload_is_deterministic_and_distinct() -> None:
    assert work.intent_text(5) == work.intent_text(5)
    assert len({work.intent_text(i) for i in range(2000)}) == 2000
    assert len({tuple(work.tools_for(i)) for i in range(5000)}) == 5000
    whole = work.stored_vectors(25_000)
    assert whole.shape == (25_000, work.DIM)
    # any slice regenerates exactly, so the load client and the store agree
    assert (work.stored_vectors(300, 9_900) == whole[9_900:10_200]).all()
    norms = (whole**2).sum(axis=1)
    assert abs(norms - 1).max() < 1e-4
    # far below the duplicate/grouping thresholds: the store holds one pattern per execution
    sims = whole[:500] @ whole[:500].T
    assert sims[~(sims > 0.999)].max() < 0.8


def test_stream_budget_runs_a_spending_point() -> None:
    from benches.profile import stream_budget

    point = stream_budget.measure("100:50", Plan.quick())
    assert (point["python_us"], point["native_us"]) == (100, 50)
    for name in ("rate", "ratio", "server_cpu_ms", "null_before", "null_after"):
        assert math.isfinite(point[name]), point
        assert point[name] > 0, point


def test_backup_pause_runs_on_a_small_store() -> None:
    from benches.profile import backup_pause

    figures = backup_pause.measure(2000, backups=2)
    assert figures["keys"] == 2000
    for name in ("first_backup_ms", "later_backups_ms", "longest_pause_ms"):
        assert math.isfinite(figures[name]), figures
        assert figures[name] > 0, figures


def test_service_bench_runs_a_tiny_plan() -> None:
    from benches import bench_service

    rows = bench_service.run_plan(Plan.quick())
    metrics = {r.metric for r in rows}
    assert any(m.startswith("Suggest QPS, client vectors") for m in metrics)
    assert any(m.startswith("Suggest QPS, hashing embedder") for m in metrics)
    assert any(m.startswith("streaming vs unary capture") for m in metrics)
    assert any(m.startswith("sync capture/s") for m in metrics)
    assert any(m.startswith("resident memory per intent") for m in metrics)
    assert any(m.startswith("startup to SERVING") for m in metrics)
    _check_rows(rows)


def test_service_bench_scale_only_measures_the_biggest_store() -> None:
    from benches import bench_service

    plan = Plan.quick()
    big = plan.store_sizes[-1]
    rows = bench_service.run_scale_only(plan, big)
    metrics = {r.metric for r in rows}
    assert f"startup to SERVING, {big} intents" in metrics
    assert f"resident memory per intent, {big} intents" in metrics
    assert f"Suggest QPS, client vectors, {big} intents, {plan.concurrency[0]} callers" in metrics
    assert not any("hashing" in m or "capture" in m for m in metrics)  # the skipped parts
    _check_rows(rows)


def test_null_server_is_stopped_after_use() -> None:
    with harness.server("null") as null:
        pid = null.process.pid
        result = harness.load(null.target, "suggest", 2, Plan.quick(), "vector")
        assert result["count"] > 0
        assert result["errors"] == 0
    assert null.process.poll() is not None
    assert not Path(f"/proc/{pid}").exists() or null.process.returncode is not None


@pytest.mark.model
def test_embed_only_servicer_embeds_what_the_server_would() -> None:
    """The MiniLM rows' ceiling: its Suggest and RecordExecution answer, and the model ran
    for every query and every successful record's intent (the cache counts its misses)."""
    from benches.harness.service_server import EmbedOnlyServicer
    from pml_server._proto.pml.v1 import pml_pb2, resources_pb2

    servicer = EmbedOnlyServicer()
    before = servicer._embedder.misses
    servicer.Suggest(pml_pb2.SuggestRequest(intent="parse the csv export"), None)  # type: ignore[arg-type]
    ok = resources_pb2.ExecutionRecord(
        intent="load the json file", status=resources_pb2.EXECUTION_STATUS_SUCCESS
    )
    failed = resources_pb2.ExecutionRecord(
        intent="write the log archive", status=resources_pb2.EXECUTION_STATUS_FAILURE
    )
    for record in (ok, failed):
        reply = servicer.RecordExecution(pml_pb2.RecordExecutionRequest(record=record), None)  # type: ignore[arg-type]
        assert reply.result.outcome == resources_pb2.CAPTURE_OUTCOME_SAVED
    assert servicer._embedder.misses - before == 2  # the query and the successful run only
    with harness.server("embed-only") as server:
        result = harness.load(server.target, "suggest", 2, Plan.quick(), "text")
        assert result["count"] > 0
        assert result["errors"] == 0


def test_peer_bench_runs_a_tiny_plan(tmp_path: Path) -> None:
    pytest.importorskip("chromadb", reason="the bench extra is not installed (make bench)")
    pytest.importorskip("matplotlib", reason="the bench extra is not installed (make bench)")
    from benches import bench_chroma

    plot = tmp_path / "latency.png"
    rows = bench_chroma.run_plan(Plan.quick(), plot=plot)
    assert any(r.baseline_name == "Chroma server (HTTP)" for r in rows)
    assert any(r.baseline_name == "Chroma embedded (in-process)" for r in rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _check_rows(rows)


@pytest.mark.model
def test_minilm_suggest_row_alone_measures_the_row(tmp_path: Path) -> None:
    from benches.profile import service_minilm_suggest as row

    plan = Plan.quick()
    store = tmp_path / "store"
    harness.populate(store, plan.store_sizes[0], "minilm", vectors=True)
    measured = row.measure(plan, store, plan.concurrency[0])
    for name in ("qps", "alone_before", "alone_after", "model_ms", "vector_ms"):
        assert measured[name] > 0, name
    assert measured["ratio"] == measured["qps"] / max(
        measured["alone_before"], measured["alone_after"]
    )
    assert "x; server CPU a request outside the model" in row.describe(measured, 2)


def test_lancedb_peer_runs_a_tiny_plan() -> None:
    from benches import bench_lancedb

    rows = bench_lancedb.speed_rows(Plan.quick())
    names = {r.metric for r in rows}
    assert any(n.startswith("pml engine Suggest vs LanceDB hybrid QPS") for n in names)
    assert any(n.startswith("pml gRPC Suggest vs LanceDB hybrid p99") for n in names)
    assert "pml engine record vs LanceDB add, 1 record a call, 1 caller" in names
    assert any(n.startswith("resident memory per intent") for n in names)
    _check_rows(rows)


def test_lancedb_quality_ranks_each_group_at_its_best_row(tmp_path: Path) -> None:
    """The peer's answers are ranked as the dev set's README defines hit@1: by group, a group at
    its best row. Two rows of group `a` near the query must count once, ahead of `b`."""
    import numpy as np

    from benches import bench_lancedb
    from benches.harness.devset import DevExecution, DevQuery

    def unit(*xs: float) -> np.ndarray:
        v = np.array([*xs, *[0.0] * (8 - len(xs))], dtype=np.float32)
        return v / np.linalg.norm(v)

    executions = [
        DevExecution("1", "read the json file", "", "javascript", ("read_file",), "a", "t"),
        DevExecution("2", "load json from disk", "", "javascript", ("read_file",), "a", "t"),
        DevExecution("3", "send an email to my boss", "", "javascript", ("send",), "b", "t"),
    ]
    queries = [
        DevQuery("q1", "open the json file", "a", ("read_file",), "t"),
        DevQuery("q2", "email my boss", "b", ("send",), "t"),
    ]
    vec = {
        "read the json file": unit(1, 0.1),
        "load json from disk": unit(1, 0.2),
        "send an email to my boss": unit(0, 1),
        "open the json file": unit(1, 0.15),
        "email my boss": unit(0.1, 1),
    }
    ranks = bench_lancedb._lancedb_ranks(executions, queries, vec, tmp_path / "db")
    assert set(ranks) == set(bench_lancedb.MODES)
    assert ranks["vector"] == [1, 1]
    assert ranks["hybrid (RRF, default)"] == [1, 1]
    assert ranks["FTS"][1] == 1  # "email", "my", "boss" only in group b's row
