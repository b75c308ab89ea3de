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


@pytest.mark.slow
def test_flooding_tenant_is_limited_and_neighbour_is_served(
    server: ServerProcess, keys: dict[str, str]
) -> None:
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
            pml_pb2.RecordExecutionRequest(record=record),
            metadata=(("authorization", f"Bearer {keys['calm']}"),),
            timeout=30,
        )
        _latencies(stub, keys["calm"], 20)  # warm up
        baseline = _latencies(stub, keys["calm"], 150)
        flood = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.reliability.flood",
                server.target,
                keys["flood"],
                str(FLOOD_THREADS),
                "30",
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert flood.stdout is not None
        assert flood.stdout.readline().strip() == "flooding"
        time.sleep(1.0)  # let the flood ramp up
        during = _latencies(stub, keys["calm"], 150)
        out, _ = flood.communicate(input="", timeout=60)  # stdin closed: the flood stops
    codes = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    figures = {
        "flood_threads": FLOOD_THREADS,
        "tenant_limit": TENANT_LIMIT,
        "flood_codes": codes,
        "neighbour_calls": len(baseline) + len(during),
        "neighbour_errors": 0,
        "neighbour_p50_ms": [round(statistics.median(x) * 1e3, 2) for x in (baseline, during)],
        "neighbour_p90_ms": [
            round(statistics.quantiles(x, n=10)[-1] * 1e3, 2) for x in (baseline, during)
        ],
        "p50_ratio": round(statistics.median(during) / statistics.median(baseline), 2),
    }
    summary = report("tenant_flooding", figures)
    assert codes.get("RESOURCE_EXHAUSTED", 0) > 0, summary
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, summary
