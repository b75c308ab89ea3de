"""A data directory that stops taking writes (a full disk; here the process's file size limit,
which fails RocksDB's WAL append with EFBIG as a full disk fails it with ENOSPC): every capture
from then on is refused UNAVAILABLE, SIGTERM still stops the server cleanly, and a restart with
room again serves every capture acknowledged before the error."""

from __future__ import annotations

import resource
from pathlib import Path

from pml_server.client import PmlClient, PmlClientError, make_record
from testing.server_process import ServerProcess

# Room for some hundreds of these records in the WAL, not for all of them.
FILE_LIMIT_BYTES = 2 * 1024 * 1024
PADDING = "x" * 3000


def test_a_store_that_stops_taking_writes_refuses_captures_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    """Before: SIGTERM after the error exited 1 with a traceback (the close-time index snapshot
    could not be written, and the store was left unclosed)."""
    data = tmp_path / "data"
    process = ServerProcess(data, "--durability", "sync")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT_BYTES, hard))
    try:
        process.start()  # the server inherits the limit
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    acknowledged: list[str] = []
    refused: list[str] = []
    try:
        with PmlClient(process.target, timeout=10, retries=0) as client:
            for i in range(2000):
                record = make_record(
                    f"task {i} {PADDING}",
                    f"await mcp.tool_{i}({{note: '{PADDING}'}})",
                    tools=[f"tool_{i}"],
                    request_id=f"r{i}",
                )
                try:
                    client.record(record)
                except PmlClientError as err:
                    refused.append(err.code.name)
                    if len(refused) >= 5:
                        break
                    continue
                acknowledged.append(record.request_id)
        code = process.terminate()
    finally:
        process.kill()
    log = process.log_tail(20_000)
    assert acknowledged, log
    assert refused == ["UNAVAILABLE"] * 5, (refused, log)
    assert code == 0, log
    assert "Traceback" not in log, log
    restarted = ServerProcess(data, "--durability", "sync")
    restarted.start()
    try:
        with PmlClient(restarted.target, timeout=10) as client:
            assert client.stats().patterns == len(acknowledged)
        assert restarted.terminate() == 0, restarted.log_tail()
    finally:
        restarted.kill()
