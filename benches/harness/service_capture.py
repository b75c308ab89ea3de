"""Only the capture rows of the service suite, for iterating on capture speed:

    python -m benches.harness.service_capture [--repeat N] [--seconds S]

Same processes, stores (the cached 10k ones) and load client as `bench_service`, same 8
callers: unary RecordExecution vs StreamTraces with client vectors and with the hashing
embedder, against the null servicer, all in one run. Beside the rates it prints the server
process's CPU seconds per capture (from /proc), which a loaded machine disturbs less than the
wall-clock rates. Writes nothing to benches/results.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from dataclasses import replace
from pathlib import Path

from benches.harness import service_harness as harness
from benches.harness.service_harness import Plan, ServerProc

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def measured(srv: ServerProc, op: str, callers: int, plan: Plan, query: str, offset: int) -> dict:
    before = cpu_seconds(srv.process.pid)
    result = harness.load(srv.target, op, callers, plan, query, offset)
    spent = cpu_seconds(srv.process.pid) - before
    result["server_cpu_ms_per_capture"] = 1000.0 * spent / max(1, result["count"])
    return result


def run_once(plan: Plan, callers: int, root: Path, first_offset: int) -> dict[str, dict]:
    out: dict[str, dict] = {}
    offset = first_offset
    with harness.server("null") as null_server:
        out["null unary"] = measured(null_server, "record", callers, plan, "vector", 0)
        out["null stream"] = measured(null_server, "stream", callers, plan, "vector", 0)
    small = plan.store_sizes[0]
    for label, embedder, vectors, query in (
        ("client vectors", "minilm", True, "vector"),
        ("hashing", "hashing", False, "text"),
    ):
        store, _ = harness.filled_store(plan, root / label, small, embedder, vectors)
        with harness.server("serve", str(store), embedder, "fast") as srv:
            for op, name in (("record", "unary"), ("stream", "stream")):
                out[f"{label} {name}"] = measured(srv, op, callers, plan, query, offset)
                offset += plan.max_requests
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=None, help="per load point")
    parser.add_argument("--callers", type=int, default=8)
    args = parser.parse_args()
    plan = Plan.for_run(large=False)
    if args.seconds is not None:
        plan = replace(plan, seconds=args.seconds)
    for run in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="pml-capture-bench-") as tmp:
            first = 20_000_000 + run * 10 * plan.max_requests
            out = run_once(plan, args.callers, Path(tmp), first)
        print(f"run {run + 1}, loadavg {os.getloadavg()[0]:.2f}")
        for name, r in out.items():
            print(
                f"  {name:22} {r['qps']:8.1f} exec/s  p50 {r['p50_ms']:7.1f} ms  "
                f"server CPU {r['server_cpu_ms_per_capture']:.3f} ms/capture  "
                f"errors {r['errors']}"
            )
        for label in ("client vectors", "hashing"):
            unary, stream = out[f"{label} unary"], out[f"{label} stream"]
            print(f"  stream/unary, {label}: {stream['qps'] / unary['qps']:.2f}x")
        print(json.dumps({"run": run + 1, "results": out}), flush=True)


if __name__ == "__main__":
    main()
