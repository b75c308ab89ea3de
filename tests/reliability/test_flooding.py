"""A tenant flooding the server (its own process, many threads) is limited with
RESOURCE_EXHAUSTED by the per-tenant quota (calls in flight), while its neighbour keeps being
served. The neighbour's latency during the flood, as a ratio to its baseline, is reported in
the figures (not asserted: timings on a shared 2-core machine are not a test's business)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from pml_server._proto.pml.v1 import pml_pb2, pml_pb2_grpc, resources_pb2
from pml_server.api.auth import Role, add_key
from tests.reliability.harness import ROOT, ServerProcess, report

FLOOD_THREADS = 24
TENANT_LIMIT = 4


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "keys.json"
    return {t: add_key(path, t, Role.WRITE) for t in ("flood", "calm")}


@pytest.fixture
def server(tmp_path: Path, keys: dict[str, str]) -> Iterator[ServerProcess]:
    process = ServerProcess(
        tmp_path / "data",
        "--durability",
        "fast",
        "--keys-file",
        str(tmp_path / "keys.json"),
        "--tenant-max-in-flight",
        str(TENANT_LIMIT),
    )
    process.start()
    yield process
    process.kill()


def _latencies(stub: pml_pb2_grpc.PmlServiceStub, key: str, calls: int) -> list[float]:
    metadata = (("authorization", f"Bearer {key}"),)
    out = []
    for _ in range(calls):
        started = time.perf_counter()
        stub.Suggest(
            pml_pb2.SuggestRequest(intent="summarize the quarterly report"),
            metadata=metadata,
            timeout=30,
        )
        out.append(time.perf_counter() - started)
    return out


def _during_flood(
    flood_target: str, flood_key: str, stub: pml_pb2_grpc.PmlServiceStub, calm_key: str
) -> tuple[list[float], dict[str, int]]:
    """The neighbour's latencies while a flood process hammers `flood_target`."""
    flood = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.reliability.flood",
            flood_target,
            flood_key,
            str(FLOOD_THREADS),
            "60",
        ],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert flood.stdout is not None
    assert flood.stdout.readline().strip() == "flooding"
    time.sleep(1.0)  # let the flood ramp up
    during = _latencies(stub, calm_key, 150)
    out, _ = flood.communicate(input="", timeout=60)  # stdin closed: the flood stops
    return during, json.loads(out.strip().splitlines()[-1])


def _p50_ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1e3, 2)


@pytest.mark.slow
def test_flooding_tenant_is_limited_and_neighbour_is_served(
    server: ServerProcess, keys: dict[str, str], tmp_path: Path
) -> None:
    """Also floods a second, unrelated server process on this machine: the neighbour's latency
    then shows what CPU contention alone costs, apart from sharing the server."""
    calm = (("authorization", f"Bearer {keys['calm']}"),)
    other = ServerProcess(
        tmp_path / "other", "--durability", "fast", "--keys-file", str(tmp_path / "keys.json")
    )
    other.start()
    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = pml_pb2_grpc.PmlServiceStub(channel)
            record = resources_pb2.ExecutionRecord(
                request_id="calm-1",
                intent="summarize the quarterly report",
                language="javascript",
                code="await mcp.summarize({q: 3});",
                tool_calls=[resources_pb2.ToolCall(tool="summarize", ok=True)],
            )
            stub.RecordExecution(
                pml_pb2.RecordExecutionRequest(record=record), metadata=calm, timeout=30
            )
            _latencies(stub, keys["calm"], 20)  # warm up
            baseline = _latencies(stub, keys["calm"], 150)
            shared, codes = _during_flood(server.target, keys["flood"], stub, keys["calm"])
            apart, _ = _during_flood(other.target, keys["flood"], stub, keys["calm"])
    finally:
        other.kill()
    figures = {
        "flood_threads": FLOOD_THREADS,
        "tenant_limit": TENANT_LIMIT,
        "flood_codes": codes,
        "neighbour_calls": len(baseline) + len(shared) + len(apart),
        "neighbour_errors": 0,
        "neighbour_p50_ms": {
            "alone": _p50_ms(baseline),
            "flood_same_server": _p50_ms(shared),
            "flood_other_server": _p50_ms(apart),
        },
        "p50_ratio_same_server": round(statistics.median(shared) / statistics.median(baseline), 2),
        "p50_ratio_other_server": round(statistics.median(apart) / statistics.median(baseline), 2),
    }
    summary = report("tenant_flooding", figures)
    assert codes.get("RESOURCE_EXHAUSTED", 0) > 0, summary
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, summary
