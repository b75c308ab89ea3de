"""A tenant flooding the server (its own process, many threads) is limited with
RESOURCE_EXHAUSTED carrying retry advice (google.rpc.RetryInfo and the grpc-retry-pushback-ms
trailer), while its neighbour is never refused and always gets its own, correct answer.

The neighbour's latency under the flood, raw and against a control flood on another server
process, and the server's CPU time per refused call are reported in the figures (see
`flood_measure`), never asserted: timings on a shared 2-core machine are not a test's business;
`benches/bench_flood.py` puts the same ratio in `make bench`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testing.flood_measure import measure, start_pair
from testing.server_process import ServerProcess
from tests.reliability.report import report

FLOOD_THREADS = 24
TENANT_LIMIT = 4


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[ServerProcess, ServerProcess, dict]]:
    shared, other, keys = start_pair(tmp_path, TENANT_LIMIT)
    try:
        yield shared, other, keys
    finally:
        shared.kill()
        other.kill()


@pytest.mark.slow
def test_flooding_tenant_is_limited_and_neighbour_is_served(
    servers: tuple[ServerProcess, ServerProcess, dict],
) -> None:
    shared, other, keys = servers
    figures = measure(
        shared,
        other,
        keys["flood"],
        keys["calm"],
        trials=3,
        calls=150,
        threads=FLOOD_THREADS,
        tenant_slots=TENANT_LIMIT,
    )
    summary = report("tenant_flooding", {"tenant_limit": TENANT_LIMIT, **figures})
    codes = figures["flood_codes_same_server"]
    assert codes.get("RESOURCE_EXHAUSTED", 0) > 0, summary
    assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED"}, summary
    advice = figures["flood_refusals_with_advice"]
    assert advice["refusals_checked"] > 0, summary
    assert advice["with_retry_info"] == advice["refusals_checked"], summary
    assert advice["with_pushback"] == advice["refusals_checked"], summary
    refusal = figures["refusal_only"]
    assert refusal["calls"] > 0, summary
    assert refusal["refused"] == refusal["calls"], summary
    assert figures["neighbour_errors"] == {}, summary
    assert figures["neighbour_wrong_answers"] == 0, summary
    assert figures["neighbour_calls"] == 3 * 3 * 150 + 20, summary
