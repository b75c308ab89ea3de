"""Replicas over PostgreSQL against the embedded RocksDB server, same workload, same run.

Servers are real `pml serve` processes (hashing embedder: this measures the store and the
replicas, not the model; durability sync / fsync on in PostgreSQL). For each setup (embedded
RocksDB; 1 replica over PostgreSQL; 2 replicas over the same database) 8 callers capture for a
fixed time, and 8 callers Suggest.
The callers are goroutines of one Go process (`clients/go/cmd/pml-load`, built at the start):
on a 2-core machine Python callers took about as much CPU as the servers they measured, so two
replicas could not use the cores. Without Go the Python callers (`cluster_load`) are used, and
the rows say so (`load` in the JSON). Suggest on 1 and 2 replicas runs over the same data,
after both capture runs, with the same 8 callers (spread round-robin over the targets),
alternated 1, 2, 2, 1 in halves of the run time.
Targets (issue 21): 2 replicas' Suggest QPS >= 1.4x one replica's; capture over PostgreSQL >=
0.5x embedded. Follower lag: read from the replicas' /metrics after the 2-replica capture run
and a short one whose every capture adds an intent (an op log entry the other replica follows).
Run alone: `python -m benches cluster`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benches.common import Row
from benches.harness.cluster_load import Job, run_load
from pml_server.client import PmlClient, PmlClientError
from testing.postgres_cluster import PostgresCluster, free_port

SUITE = "cluster"
ROOT = Path(__file__).resolve().parent.parent
CALLERS = 8
CALLER_PROCESSES = 2


class _Server:
    def __init__(self, data_dir: Path, dsn: str | None) -> None:
        env = dict(os.environ)
        env.pop("PML_STORE", None)
        if dsn:
            env["PML_STORE"] = dsn
        self.metrics_port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "pml_server.cli", "serve", "--listen", "127.0.0.1:0",
                "--data-dir", str(data_dir), "--embedder", "hashing", "--log-format", "json",
                "--log-level", "warning", "--metrics-port", str(self.metrics_port),
            ],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        match = re.search(r"\(port (\d+)\)", self.proc.stdout.readline())
        assert match, "server announced no port"
        self.target = f"127.0.0.1:{match.group(1)}"
        with PmlClient(self.target, timeout=5) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    client.suggest("warm up")
                    break
                except PmlClientError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

    def metric(self, name: str, labels: str = "") -> float | None:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" ([0-9.e+-]+)"
        match = re.search(pattern, text)
        return float(match.group(1)) if match else None

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _go_load(into: Path) -> Path | None:
    """The Go load generator built into `into`, or None without a Go toolchain."""
    go = shutil.which("go")
    if go is None:
        return None
    binary = into / "pml-load"
    subprocess.run(
        [go, "build", "-o", str(binary), "./cmd/pml-load"],
        cwd=ROOT / "clients" / "go", check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return binary


def _measure(
    load: Path | None,
    targets: list[str],
    kind: str,
    seconds: float,
    tag: str,
    fresh_intents: bool = False,
) -> tuple[float, dict[str, float]]:
    if load is not None:
        done = subprocess.run(
            [
                str(load), "-kind", kind, "-targets", ",".join(targets),
                "-callers", str(CALLERS), "-seconds", str(seconds), "-tag", tag,
                *(["-fresh-intents"] if fresh_intents else []),
            ],
            check=True, capture_output=True, text=True, timeout=seconds + 120,
        )  # fmt: skip
        report = json.loads(done.stdout)
        return report["calls"] / seconds, {
            "p50_ms": float(report["p50_ms"]),
            "p99_ms": float(report["p99_ms"]),
            "calls": float(report["calls"]),
            "errors": float(sum(report["errors"].values())),
        }
    job = Job(kind, tuple(targets), CALLERS // CALLER_PROCESSES, seconds, tag)
    latencies, errors, _ = run_load(job, CALLER_PROCESSES)
    rate = len(latencies) / seconds
    return rate, {
        "p50_ms": _percentile(latencies, 0.5) * 1000,
        "p99_ms": _percentile(latencies, 0.99) * 1000,
        "calls": float(len(latencies)),
        "errors": float(len(errors)),
    }


def _combined(parts: list[tuple[float, dict[str, float]]]) -> tuple[float, dict[str, float]]:
    """Equal-length measurements as one: the mean rate, the worst p50 and p99."""
    return sum(rate for rate, _ in parts) / len(parts), {
        "p50_ms": max(extra["p50_ms"] for _, extra in parts),
        "p99_ms": max(extra["p99_ms"] for _, extra in parts),
        "calls": sum(extra["calls"] for _, extra in parts),
        "errors": sum(extra["errors"] for _, extra in parts),
    }


def run(large: bool) -> list[Row]:
    seconds = 1.5 if os.environ.get("PML_BENCH_QUICK") else 12.0 if large else 6.0
    root = Path(tempfile.mkdtemp(prefix="pml-bench-cluster-"))
    os.chmod(root, 0o755)
    cluster = PostgresCluster(root / "pg")
    cluster.root.mkdir()
    os.chmod(cluster.root, 0o755)
    load = _go_load(root)
    cluster.init()
    cluster.start()
    results: dict[str, tuple[float, dict[str, float]]] = {}
    lag: dict[str, float] = {}
    try:
        embedded = _Server(root / "embedded", None)
        try:
            results["capture embedded"] = _measure(load, [embedded.target], "capture", seconds, "e")
            results["suggest embedded"] = _measure(load, [embedded.target], "suggest", seconds, "e")
        finally:
            embedded.stop()
        dsn = cluster.create_database()
        first = _Server(root / "r1", dsn)
        try:
            results["capture 1 replica"] = _measure(load, [first.target], "capture", seconds, "p1")
            second = _Server(root / "r2", dsn)
            try:
                both = [first.target, second.target]
                results["capture 2 replicas"] = _measure(load, both, "capture", seconds, "p2")
                # Suggest on 1 and 2 replicas over the same data (no capture in between),
                # alternated 1, 2, 2, 1 in halves so that a drift of the machine's load
                # weighs on both alike.
                halves: dict[str, list[tuple[float, dict[str, float]]]] = {"1": [], "2": []}
                for count in ("1", "2", "2", "1"):
                    targets = both[: int(count)]
                    halves[count].append(_measure(load, targets, "suggest", seconds / 2, "s"))
                for count, name in (("1", "suggest 1 replica"), ("2", "suggest 2 replicas")):
                    results[name] = _combined(halves[count])
                if load is not None:  # every capture a new intent: op log entries to follow
                    _measure(load, both, "capture", min(seconds, 3.0), "lag", fresh_intents=True)
                for name, server in (("a", first), ("b", second)):
                    for q in ("0.5", "0.99"):
                        value = server.metric("pml_follower_lag_seconds", f'quantile="{q}"')
                        lag[f"{name} p{q}"] = (value or 0.0) * 1000
            finally:
                second.stop()
        finally:
            first.stop()
    finally:
        try:
            cluster.stop("fast")
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def row(metric: str, key: str, base: str | None, target: float | None) -> Row:
        value, extra = results[key]
        baseline = results[base][0] if base else None
        return Row(
            SUITE,
            metric,
            value,
            "1/s",
            baseline=baseline,
            baseline_name=base or "",
            target=target,
            extra={
                **extra,
                "load": "go" if load is not None else "python",
                **({"baseline": results[base][1]} if base else {}),
            },
        )

    rows = [
        row("captures/s, 8 callers, embedded RocksDB (sync)", "capture embedded", None, None),
        row("captures/s, 8 callers, 1 replica over PostgreSQL", "capture 1 replica",
            "capture embedded", 0.5),
        row("captures/s, 8 callers, 2 replicas over PostgreSQL", "capture 2 replicas",
            "capture embedded", None),
        row("Suggest QPS, 8 callers, embedded RocksDB", "suggest embedded", None, None),
        row("Suggest QPS, 8 callers, 1 replica over PostgreSQL", "suggest 1 replica",
            "suggest embedded", None),
        row("Suggest QPS, 8 callers, 2 replicas over PostgreSQL", "suggest 2 replicas",
            "suggest 1 replica", 1.4),
    ]  # fmt: skip
    for quantile in ("0.5", "0.99"):
        worst = max(lag[f"a p{quantile}"], lag[f"b p{quantile}"])
        rows.append(
            Row(
                SUITE,
                f"follower lag p{float(quantile) * 100:g}, commit to applied (2 replicas)",
                worst,
                "ms",
                extra={k: v for k, v in lag.items() if k.endswith(quantile)},
            )
        )
    return rows
