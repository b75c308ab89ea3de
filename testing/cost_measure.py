"""Measures what an expensive tenant costs its neighbour (issue 18), for `test_hostile_valid.py`
and `benches/bench_tenant_cost.py`.

One server process with two tenants. `heavy` holds ten giant patterns (120,000 literals in
240 KB of code each, bounded by the normalizer to 256 parameters) and, from a process of its own
(`testing.cost_load`, its own GIL), runs 4 concurrent Suggests (page_size 100) and
dry-run RunRetentions over them, back to back. `light` holds one ordinary pattern and times its
Suggest from this process, one call at a time, checking every answer. Each trial has two phases
in alternating order, `alone` (heavy idle) and `loaded`; the p50 and p99 of each phase are over
all its calls in every trial, so both ratios compare figures of the same run.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.api.admission.quotas import CPU_SHARE
from pml_server.api.security.auth import Role, add_key
from testing.line_process import LineProcess
from testing.server_process import ServerProcess

OK = resources_pb2.EXECUTION_STATUS_SUCCESS
GIANT_LITERALS = 120_000
GIANT_PATTERNS = 10
HEAVY_THREADS = 4
WARM_UP_CALLS = 20
RAMP_SECONDS = 0.5  # after every heavy thread had an answer, before timing the neighbour
PLAIN_INTENT = "read the JSON config file"


def giant_code(i: int, language: str) -> str:
    ones = ",".join(["1"] * GIANT_LITERALS)
    if language == "python":
        return f"x = [{ones}]\nmcp.giant_tool_{i}(data=x)\n"
    return f"const x = [{ones}];\nawait mcp.giant_tool_{i}({{data: x}});\n"


def giant_record(i: int, salt: str = "") -> resources_pb2.ExecutionRecord:
    """A valid record whose code has 120,000 literals, with a tool of its own."""
    language = "python" if i % 2 == 0 else "javascript"
    return resources_pb2.ExecutionRecord(
        request_id=f"giant-{salt}{i}",
        intent=f"load the giant table number {i}",
        code=giant_code(i, language),
        language=language,
        tool_calls=[resources_pb2.ToolCall(tool=f"giant_tool_{i}", ok=True)],
        status=OK,
    )


def plain_record(request_id: str) -> resources_pb2.ExecutionRecord:
    return resources_pb2.ExecutionRecord(
        request_id=request_id,
        intent=PLAIN_INTENT,
        code="await mcp.read_file({path: 'config.json'})",
        language="javascript",
        tool_calls=[resources_pb2.ToolCall(tool="read_file", ok=True)],
        status=OK,
    )


def start_server(tmp_path: Path, *flags: str) -> tuple[ServerProcess, dict[str, str]]:
    """A server (with `flags`) with the tenants `heavy` and `light` (keys returned), `heavy`'s
    ten giant patterns and `light`'s one pattern recorded."""
    path = tmp_path / "keys.json"
    keys = {t: add_key(path, t, Role.ADMIN) for t in ("heavy", "light")}
    flags = ("--durability", "fast", "--keys-file", str(path), *flags)
    server = ServerProcess(tmp_path / "data", *flags)
    server.start()
    try:
        options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
        with grpc.insecure_channel(server.target, options=options) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            assert server.proc is not None
            cpu_before, started = cpu_seconds(server.proc.pid), time.monotonic()
            for tenant, records in (
                ("light", [plain_record("light-1")]),
                ("heavy", [giant_record(i, "h") for i in range(GIANT_PATTERNS)]),
            ):
                metadata = (("authorization", f"Bearer {keys[tenant]}"),)
                for record in records:
                    stub.RecordExecution(
                        pml_pb2.RecordExecutionRequest(record=record),
                        metadata=metadata,
                        timeout=120,
                    )
        # The giant captures are served calls: their CPU time is `heavy`'s debt, which drains at
        # CPU_SHARE a second. Left owing it, `heavy` would have every call of the first phases
        # refused (a CI run: 22 of 22, after setup on a slow machine). The server's CPU time over
        # the setup bounds that debt from above.
        owed = cpu_seconds(server.proc.pid) - cpu_before
        time.sleep(max(0.0, owed / CPU_SHARE - (time.monotonic() - started)))
    except BaseException:
        server.kill()
        raise
    return server, keys


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads), from /proc."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


class HeavyLoad(LineProcess):
    """The `cost_load` process: the expensive tenant's calls, from its own process."""

    def __init__(self, key: str, target: str, threads: int) -> None:
        super().__init__("testing.cost_load", [key, target, str(threads)], 60)


@dataclass
class Neighbour:
    """`light`: Suggest calls one at a time whose answer must be its own pattern."""

    stub: pml_pb2_grpc.PmlServiceStub
    key: str
    errors: Counter[str] = field(default_factory=Counter)
    wrong_answers: int = 0
    calls: int = 0

    def latencies(self, calls: int) -> list[float]:
        request = pml_pb2.SuggestRequest(intent=PLAIN_INTENT)
        metadata = (("authorization", f"Bearer {self.key}"),)
        out = []
        for _ in range(calls):
            started = time.perf_counter()
            try:
                reply = self.stub.Suggest(request, metadata=metadata, timeout=30)
            except grpc.RpcError as err:
                self.errors[err.code().name] += 1  # type: ignore[attr-defined]
                continue
            out.append(time.perf_counter() - started)
            self.calls += 1
            if [tuple(s.pattern.tools_used) for s in reply.suggestions][:1] != [("read_file",)]:
                self.wrong_answers += 1
        return out


def _ms(seconds: float) -> float:
    return round(seconds * 1e3, 3)


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def _load_average() -> float:
    return round(os.getloadavg()[0], 2)


def measure(
    server: ServerProcess, keys: dict[str, str], *, trials: int, calls: int
) -> dict[str, Any]:
    """The neighbour's latency figures alone and under the heavy load, and the load's counts."""
    assert server.proc is not None
    times: dict[str, list[float]] = {"alone": [], "loaded": []}
    p50s: dict[str, list[float]] = {"alone": [], "loaded": []}
    heavy_codes: Counter[str] = Counter()
    server_cpu: dict[str, float] = {"alone": 0.0, "loaded": 0.0}
    wall: dict[str, float] = {"alone": 0.0, "loaded": 0.0}
    load_averages = [_load_average()]
    with grpc.insecure_channel(server.target) as channel:
        neighbour = Neighbour(pml_pb2_grpc.PmlServiceStub(channel), keys["light"])
        neighbour.latencies(WARM_UP_CALLS)
        heavy = HeavyLoad(keys["heavy"], server.target, HEAVY_THREADS)
        try:
            for trial in range(trials):
                for phase in ("alone", "loaded") if trial % 2 == 0 else ("loaded", "alone"):
                    if phase == "loaded":
                        heavy.command("start")
                        time.sleep(RAMP_SECONDS)
                    cpu_before, started = cpu_seconds(server.proc.pid), time.perf_counter()
                    try:
                        during = neighbour.latencies(calls)
                    finally:
                        wall[phase] += time.perf_counter() - started
                        server_cpu[phase] += cpu_seconds(server.proc.pid) - cpu_before
                        if phase == "loaded":
                            heavy_codes.update(json.loads(heavy.command("stop"))["codes"])
                    times[phase] += during
                    p50s[phase].append(statistics.median(during))
                load_averages.append(_load_average())
        finally:
            heavy.close()
    p50 = {p: statistics.median(v) for p, v in times.items()}
    p99 = {p: _p99(v) for p, v in times.items()}
    return {
        "trials": trials,
        "calls_per_phase": calls,
        "heavy_threads": HEAVY_THREADS,
        "neighbour_p50_ms": {p: _ms(v) for p, v in p50.items()},
        "neighbour_p99_ms": {p: _ms(v) for p, v in p99.items()},
        "neighbour_p50_ms_per_trial": {p: [_ms(x) for x in v] for p, v in p50s.items()},
        "p50_ratio": round(p50["loaded"] / p50["alone"], 3),
        "p99_ratio": round(p99["loaded"] / p99["alone"], 3),
        "neighbour_calls": neighbour.calls,
        "neighbour_errors": dict(neighbour.errors),
        "neighbour_wrong_answers": neighbour.wrong_answers,
        "heavy_codes": dict(heavy_codes),
        "server_cpu_share": {p: round(server_cpu[p] / max(wall[p], 1e-9), 2) for p in wall},
        "load_average_1min": load_averages,
    }


def main() -> None:
    """`python -m testing.cost_measure [TRIALS CALLS]`: one measurement, as JSON."""
    import tempfile

    trials, calls = (int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (4, 150)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        server, keys = start_server(Path(tmp))
        setup = time.perf_counter() - started
        try:
            figures = measure(server, keys, trials=trials, calls=calls)
        finally:
            server.kill()
    figures["setup_seconds"] = round(setup, 1)
    figures["seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
