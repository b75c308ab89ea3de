"""Measures what a flooding tenant costs its neighbour, for `test_flooding.py` and
`benches/bench_flood.py`.

Two server processes run: `shared` (the neighbour's server) and `control` (an unrelated one). One
flooder process (`testing.flood`, its own GIL) floods either of them; meanwhile the
neighbour, a sequential client in this process, times its Suggest calls on `shared`. Each trial
has three phases in a rotating order: no flood, flood on `shared`, flood on `control`. The
control phase shows what machine contention alone costs (on 2 cores the flooder's own client
eats about one), so the neighbour's latency is reported raw (flood on its server / no flood)
and against that control (flood on its server / flood elsewhere); figures are medians of the
per-trial ratios. A last phase pins the flooder's call slots with open streams and floods again,
so every call is refused: the server's CPU time over the calls gives the cost of one refusal.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.api.security.auth import Role, add_key
from testing.line_process import LineProcess
from testing.server_process import ServerProcess

PHASES = ("alone", "same_server", "other_server")
RAMP_SECONDS = 0.3  # after every flood thread had an answer, before timing the neighbour
REFUSAL_FLOOD_SECONDS = 2.0


def start_pair(tmp_path: Path, tenant_limit: int) -> tuple[ServerProcess, ServerProcess, dict]:
    """The neighbour's server and an unrelated control server, same flags, both started; and
    the API keys of the tenants `flood` and `calm`, valid on both."""
    path = tmp_path / "keys.json"
    keys = {t: add_key(path, t, Role.WRITE) for t in ("flood", "calm")}
    flags = ("--durability", "fast", "--keys-file", str(path))
    flags += ("--tenant-max-in-flight", str(tenant_limit))
    shared = ServerProcess(tmp_path / "shared", *flags)
    control = ServerProcess(tmp_path / "control", *flags)
    try:
        shared.start()
        control.start()
    except BaseException:
        shared.kill()
        control.kill()
        raise
    return shared, control, keys


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads), from /proc."""
    after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")


class Flooder(LineProcess):
    """The flood process: one tenant's flood of calls, from its own process."""

    def __init__(self, key: str, threads: int, max_seconds: float = 60.0) -> None:
        super().__init__("testing.flood", [key, str(threads), str(max_seconds)], 30)


@dataclass
class Neighbour:
    """A well-behaved tenant: one capture, then Suggest calls whose answer must stay the one
    capture (so a leak or a wrong answer under load is seen), never refused."""

    stub: pml_pb2_grpc.PmlServiceStub
    key: str
    pattern: str = ""
    errors: Counter[str] = field(default_factory=Counter)
    wrong_answers: int = 0
    calls: int = 0

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.key}"),)

    def capture(self) -> None:
        record = resources_pb2.ExecutionRecord(
            request_id="calm-1",
            intent="summarize the quarterly report",
            language="javascript",
            code="await mcp.summarize({q: 3});",
            tool_calls=[resources_pb2.ToolCall(tool="summarize", ok=True)],
        )
        reply = self.stub.RecordExecution(
            pml_pb2.RecordExecutionRequest(record=record), metadata=self.metadata, timeout=30
        )
        self.pattern = reply.result.pattern

    def latencies(self, calls: int) -> list[float]:
        request = pml_pb2.SuggestRequest(intent="summarize the quarterly report")
        out = []
        for _ in range(calls):
            started = time.perf_counter()
            try:
                reply = self.stub.Suggest(request, metadata=self.metadata, timeout=30)
            except grpc.RpcError as err:
                self.errors[err.code().name] += 1  # type: ignore[attr-defined]
                continue
            out.append(time.perf_counter() - started)
            self.calls += 1
            answer = [(s.pattern.name, tuple(s.pattern.tools_used)) for s in reply.suggestions]
            if answer != [(self.pattern, ("summarize",))]:
                self.wrong_answers += 1
        return out


def _p50_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1e3, 3)


def _run_phase(
    phase: str, flooder: Flooder, neighbour: Neighbour, targets: dict[str, str], calls: int
) -> tuple[list[float], dict[str, Any] | None]:
    if phase == "alone":
        return neighbour.latencies(calls), None
    flooder.command(f"flood {targets[phase]}")
    try:
        time.sleep(RAMP_SECONDS)
        during = neighbour.latencies(calls)
    finally:
        counts: dict[str, Any] = json.loads(flooder.command("stop"))
    return during, counts


def _refusal_cost(flooder: Flooder, shared: ServerProcess, slots: int) -> dict[str, Any]:
    """Server CPU per call while every flood call is refused (the tenant's slots are held)."""
    assert shared.proc is not None
    flooder.command(f"hold {shared.target} {slots}")
    try:
        time.sleep(0.5)  # the held streams reach their handlers
        flooder.command(f"flood {shared.target}")
        time.sleep(RAMP_SECONDS)  # connections set up: not a refusal's cost
        before, answered = cpu_seconds(shared.proc.pid), int(flooder.command("count"))
        time.sleep(REFUSAL_FLOOD_SECONDS)
        used = cpu_seconds(shared.proc.pid) - before
        calls = int(flooder.command("count")) - answered
        counts = json.loads(flooder.command("stop"))
    finally:
        flooder.command("release")
    return {
        "calls": counts["calls"],
        "refused": counts["codes"].get("RESOURCE_EXHAUSTED", 0),
        "calls_per_second": round(calls / REFUSAL_FLOOD_SECONDS),
        "server_cpu_seconds": round(used, 3),
        "server_cpu_us_per_call": round(used / max(1, calls) * 1e6, 1),
        "server_cpu_share": round(used / REFUSAL_FLOOD_SECONDS, 3),  # of one core
        "advice": counts,
    }


def measure(
    shared: ServerProcess,
    control: ServerProcess,
    flood_key: str,
    calm_key: str,
    *,
    trials: int,
    calls: int,
    threads: int,
    tenant_slots: int,
) -> dict[str, Any]:
    """The neighbour's latency figures and the flood's outcome counts (see the module doc)."""
    assert shared.proc is not None
    targets = {"same_server": shared.target, "other_server": control.target}
    flood_codes: Counter[str] = Counter()
    advice: Counter[str] = Counter()
    p50s: dict[str, list[float]] = {p: [] for p in PHASES}
    flood_cpu: list[float] = []
    alone_cpu: list[float] = []
    with grpc.insecure_channel(shared.target) as channel:
        neighbour = Neighbour(pml_pb2_grpc.PmlServiceStub(channel), calm_key)
        neighbour.capture()
        neighbour.latencies(20)  # warm up
        flooder = Flooder(flood_key, threads)
        try:
            for trial in range(trials):
                for phase in PHASES[trial % 3 :] + PHASES[: trial % 3]:
                    cpu_before = cpu_seconds(shared.proc.pid)
                    during, counts = _run_phase(phase, flooder, neighbour, targets, calls)
                    p50s[phase].append(statistics.median(during))
                    if counts is not None:
                        advice.update(
                            {k: counts[k] for k in ("with_retry_info", "with_pushback")}
                            | {"refusals_checked": counts["refusals_checked"]}
                        )
                    used = cpu_seconds(shared.proc.pid) - cpu_before
                    if phase == "alone":
                        alone_cpu.append(used / calls * 1e6)
                    if phase == "same_server" and counts is not None:
                        flood_codes.update(counts["codes"])
                        flood_cpu.append(used / max(1, counts["calls"]) * 1e6)
            refusal = _refusal_cost(flooder, shared, tenant_slots)
        finally:
            flooder.close()

    def ratio(top: str, bottom: str) -> float:
        pairs = zip(p50s[top], p50s[bottom], strict=True)
        return round(statistics.median(a / b for a, b in pairs), 3)

    return {
        "trials": trials,
        "calls_per_phase": calls,
        "flood_threads": threads,
        "flood_codes_same_server": dict(flood_codes),
        "flood_refusals_with_advice": dict(advice),
        "neighbour_calls": neighbour.calls,
        "neighbour_errors": dict(neighbour.errors),
        "neighbour_wrong_answers": neighbour.wrong_answers,
        "neighbour_p50_ms_median": {p: _p50_ms(v) for p, v in p50s.items()},
        "neighbour_p50_ms_per_trial": {p: [_p50_ms([x]) for x in v] for p, v in p50s.items()},
        "ratio_raw": ratio("same_server", "alone"),
        "ratio_vs_control": ratio("same_server", "other_server"),
        "control_ratio": ratio("other_server", "alone"),
        "server_cpu_us_per_neighbour_call_alone": round(statistics.median(alone_cpu), 1),
        "server_cpu_us_per_flood_call_same_server": round(statistics.median(flood_cpu), 1),
        "refusal_only": refusal,
    }
