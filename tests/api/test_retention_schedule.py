"""A served pml applies the seed's retention table by itself: no `pml retention` call, only its
schedule (a short interval here), flags a pattern with < 20% success after 10+ tries."""

from __future__ import annotations

import time

from pml_server.client import PmlClient, make_record
from pml_server.retention import RetentionConfig
from tests.conftest import StartServer

CODE = "await mcp.fetch_invoices({month: 'may'})"


def test_a_served_pml_flags_a_failing_pattern_by_itself(start: StartServer) -> None:
    server = start(retention=RetentionConfig(interval_seconds=0.2))
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        saved = client.record(make_record("Fetch unpaid invoices", CODE, tools=["fetch_invoices"]))
        failed = [("fetch_invoices", "timeout after 30s")]
        for _ in range(10):  # 11 tries, 1 success: 9% < 20%
            client.record(make_record("Fetch unpaid invoices", CODE, failed_tools=failed))
        pattern = client.get_pattern(saved.pattern)
        assert pattern.usage_count == 11
        assert pattern.success_count == 1
        deadline = time.monotonic() + 30
        while not pattern.flagged_for_removal and time.monotonic() < deadline:
            time.sleep(0.1)
            pattern = client.get_pattern(saved.pattern)
        assert pattern.flagged_for_removal, "the retention schedule never flagged the pattern"
        # Flagged, not deleted (auto-removal is off by default): still listed.
        assert [p.name for p in client.list_patterns().patterns] == [saved.pattern]


def test_retention_stays_off_when_switched_off(start: StartServer) -> None:
    server = start(retention_in_background=False, retention=RetentionConfig(interval_seconds=0.1))
    with PmlClient(f"127.0.0.1:{server.port}") as client:
        saved = client.record(make_record("Fetch unpaid invoices", CODE, tools=["fetch_invoices"]))
        failed = [("fetch_invoices", "timeout after 30s")]
        for _ in range(10):
            client.record(make_record("Fetch unpaid invoices", CODE, failed_tools=failed))
        time.sleep(1.0)  # ten intervals: the job would have run by now
        assert not client.get_pattern(saved.pattern).flagged_for_removal
        assert client.run_retention(apply=False).entries  # still available on demand
