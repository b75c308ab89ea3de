"""Peer: pml against Chroma, what a user would pick instead for agent memory.

The same workload on both, same vectors, same machine, same run, interleaved: capture (our
unary RecordExecution with a client vector; Chroma's upsert of one record) and suggest (our
Suggest with a client vector, top 5; Chroma's query, top 5) at 1, 8 and 32 callers on a store
of 10k executions (100k with --large). The like-for-like peer is Chroma's server (`chroma run`
on a loopback port, over its HTTP client), with a load client in its own process as for ours;
its embedded client (PersistentClient inside the load process, no network) is reported for
reference. Also draws benches/results/suggest_latency.png: latency vs callers, us vs Chroma.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benches.common import Row
from benches.harness import service_harness as harness
from benches.harness.service_harness import ROOT, Plan

SUITE = "peer"
PLOT = ROOT / "benches" / "results" / "suggest_latency.png"
Sweep = dict[int, dict[str, float]]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def chroma_server(path: Path) -> Iterator[str]:
    """`chroma run` on a free loopback port; stopped (SIGTERM, then SIGKILL) on exit."""
    port = _free_port()
    chroma = Path(sys.executable).parent / "chroma"  # the venv's script, beside its python
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    process = subprocess.Popen(
        [str(chroma), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    target = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"chroma run exited with {process.returncode}")
            try:
                with urllib.request.urlopen(f"{target}/api/v2/heartbeat", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError("chroma run did not answer its heartbeat") from None
                time.sleep(0.1)
        yield target
    finally:
        harness.stop_process(process)


def _chroma_load(target: str, op: str, c: int, plan: Plan, offset: int = 0) -> dict[str, float]:
    return harness.load(
        target, op, c, plan, "vector", offset, module="benches.harness.service_chroma"
    )


def run(large: bool) -> list[Row]:
    quick = bool(os.environ.get("PML_BENCH_QUICK"))
    return run_plan(Plan.for_run(large), PLOT.with_name("quick_" + PLOT.name) if quick else PLOT)


def run_plan(plan: Plan, plot: Path | None = PLOT) -> list[Row]:
    size = plan.store_sizes[0]
    mid = 8 if 8 in plan.concurrency else plan.concurrency[-1]
    offset = 20_000_000
    with tempfile.TemporaryDirectory(prefix="pml-peer-") as tmp:
        chroma_dir = Path(tmp) / "chroma"
        ours_dir, _ = harness.filled_store(plan, Path(tmp), size, "minilm", vectors=True)
        subprocess.run(
            harness.python_module(
                "benches.harness.service_chroma", "populate", str(chroma_dir), str(size)
            ),
            cwd=ROOT,
            check=True,
            timeout=1800,
        )
        ours: Sweep = {}
        server: Sweep = {}
        embedded: Sweep = {}
        with harness.server("serve", str(ours_dir), "minilm", "fast") as srv:
            for c in plan.concurrency:
                ours[c] = harness.load(srv.target, "suggest", c, plan, "vector")
            ours_upsert = harness.load(srv.target, "record", mid, plan, "vector", offset)
        with chroma_server(chroma_dir) as target:
            for c in plan.concurrency:
                server[c] = _chroma_load(target, "query", c, plan)
            server_upsert = _chroma_load(target, "upsert", mid, plan, offset)
        embedded_target = f"embedded:{chroma_dir}"
        for c in plan.concurrency:
            embedded[c] = _chroma_load(embedded_target, "query", c, plan)
        embedded_upsert = _chroma_load(
            embedded_target, "upsert", mid, plan, offset + plan.max_requests
        )
    # Issue 20's bars: against the server, p99 (and QPS, p50) at least as good at every
    # concurrency; against the embedded client, which pays no network, QPS at least its own.
    rows = _rows(ours, server, "Chroma server (HTTP)", qps_target=1.0, latency_target=1.0)
    rows += _rows(ours, embedded, "Chroma embedded (in-process)", qps_target=1.0)
    rows.append(
        Row(
            SUITE,
            f"capture/s vs upsert, {mid} callers, {size} stored",
            ours_upsert["qps"],
            "exec/s",
            server_upsert["qps"],
            "Chroma server upsert, 1 record/call",
            target=1.0,
            extra={"p50_ms": ours_upsert["p50_ms"], "chroma_p50_ms": server_upsert["p50_ms"]},
        )
    )
    rows.append(
        Row(
            SUITE,
            f"capture/s vs embedded upsert, {mid} callers",
            ours_upsert["qps"],
            "exec/s",
            embedded_upsert["qps"],
            "Chroma embedded upsert, 1 record/call",
        )
    )
    if plot is not None:
        draw_plot(
            plot,
            {"pml (gRPC)": ours, "Chroma server (HTTP)": server, "Chroma embedded": embedded},
            size,
        )
    return rows


def _rows(
    ours: Sweep,
    peer: Sweep,
    peer_name: str,
    qps_target: float | None,
    latency_target: float | None = None,
) -> list[Row]:
    rows = []
    for c in ours:
        rows.append(
            Row(
                SUITE,
                f"Suggest vs query QPS, {c} callers",
                ours[c]["qps"],
                "req/s",
                peer[c]["qps"],
                peer_name,
                target=qps_target,
            )
        )
        for pct in ("p50", "p99"):
            rows.append(
                Row(
                    SUITE,
                    f"Suggest vs query {pct}, {c} callers",
                    ours[c][f"{pct}_ms"],
                    "ms",
                    peer[c][f"{pct}_ms"],
                    peer_name,
                    target=latency_target,
                    lower_is_better=True,
                )
            )
    return rows


def draw_plot(path: Path, series: dict[str, Sweep], size: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for (name, sweep), colour in zip(
        series.items(), ("tab:blue", "tab:orange", "tab:gray"), strict=False
    ):
        callers = sorted(sweep)
        ax.plot(
            callers, [sweep[c]["p50_ms"] for c in callers], "o-", color=colour, label=f"{name} p50"
        )
        ax.plot(
            callers,
            [sweep[c]["p99_ms"] for c in callers],
            "s--",
            color=colour,
            label=f"{name} p99",
            alpha=0.6,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("concurrent callers")
    ax.set_ylabel("latency (ms)")
    ax.set_title(f"Suggest / query latency, {size} stored, top 5, loopback")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
