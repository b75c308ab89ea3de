"""The wall clock stepped under a real server (docs/reliability.md, "Clock steps"): an NTP step, a
VM resumed after days, a clock set wrong then fixed. The server process reads its wall clock as
the machine's plus an offset the test steps (`testing/stepped_clock.py`): every wall clock its
Python reads (`time.time`, `time.time_ns`, the backups' `datetime.now`), its monotonic clock,
sleeps and waits left alone, as a step leaves them."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import urllib.request
from pathlib import Path

import pytest

from pml_server.backup import MANIFEST_NAME, BackupDir
from pml_server.client import PmlClient, make_record
from testing import stepped_clock
from testing.server_process import ServerProcess
from tests.reliability.test_otlp_split_runs import _export, _recorded_runs, free_port
from tests.support import eventually

HOUR = 3600
DAY = 24 * HOUR


class SteppedClock:
    """The server's wall clock: the machine's plus `offset` seconds, changed at will."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self.step_to(0)

    def step_to(self, offset_seconds: float) -> None:
        stepped_clock.set_offset(self._path, offset_seconds)

    @property
    def env(self) -> dict[str, str]:
        return {stepped_clock.ENV: str(self._path)}


@pytest.fixture
def clock(tmp_path: Path) -> SteppedClock:
    return SteppedClock(tmp_path / "clock-offset")


def _sequences(root: Path) -> dict[Path, int]:
    """Each whole backup under `root`, with the store's sequence number it holds."""
    complete = BackupDir(root, keep=2, store_id="lister").complete()
    return {path: json.loads((path / MANIFEST_NAME).read_text())["sequence"] for path in complete}


def _backups_written(process: ServerProcess) -> int:
    return process.log_path.read_text().count("backup written")


def _backup_now(process: ServerProcess) -> None:
    before = _backups_written(process)
    assert process.proc is not None
    os.kill(process.proc.pid, signal.SIGUSR2)
    assert eventually(lambda: _backups_written(process) > before, 60), process.log_tail()


def test_a_clock_stepped_back_keeps_the_newest_backup(tmp_path: Path, clock: SteppedClock) -> None:
    """Backups are named by the wall clock: the one taken after a step back is named before
    those it follows, and used to be pruned at once, the newest writes with it."""
    root = tmp_path / "backups"
    process = ServerProcess(
        tmp_path / "data", "--backup-dir", str(root), "--backup-keep", "2", env=clock.env
    )
    process.start()
    patterns: list[str] = []
    best = 0  # the highest sequence number a kept backup holds
    try:
        with PmlClient(process.target, timeout=30) as client:
            for i, offset in enumerate((0, 0, -DAY, -HOUR, -365 * DAY)):
                clock.step_to(offset)
                tool = f"tool{i}"
                captured = client.record(
                    make_record(f"task {i}", f"await mcp.{tool}()", tools=[tool])
                )
                patterns.append(captured.pattern)
                _backup_now(process)
                kept = _sequences(root)
                assert len(kept) == min(i + 1, 2)
                newest = max(kept, key=lambda path: kept[path])
                # the backup just taken holds this capture: it is kept, whatever its name
                assert kept[newest] > best, f"step {offset} s: kept {sorted(kept.values())}"
                best = kept[newest]
    finally:
        process.terminate()
    # the backup kept as newest serves every capture, the last one (a year back) too
    restored = tmp_path / "restored"
    shutil.copytree(newest, restored)
    served = ServerProcess(restored)
    served.start()
    try:
        with PmlClient(served.target, timeout=30) as client:
            assert {p.name for p in client.iter_patterns()} == set(patterns)
    finally:
        served.terminate()


def _metric(port: int, result: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    prefix = f'pml_otlp_spans_total{{result="{result}"}} '
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(lines[0][len(prefix) :]) if lines else 0.0


@pytest.mark.parametrize("back", [HOUR, DAY, 365 * DAY])
def test_held_otlp_spans_settle_and_expire_after_a_clock_stepped_back(
    tmp_path: Path, clock: SteppedClock, back: int
) -> None:
    """A settling root held before the step is mapped with its calls one settle window after
    it, and held calls whose root never comes expire one hold after it: not once the clock has
    caught up again (docs/capture.md, "Runs split over several Exports")."""
    metrics_port = free_port()
    process = ServerProcess(
        tmp_path / "data",
        *("--metrics-port", str(metrics_port), "--otlp-settle-seconds", "0.5"),
        *("--otlp-pending-seconds", "2"),
        env=clock.env,
    )
    process.start()
    try:
        clock.step_to(back)  # a clock ahead, set right later
        settled, orphan = _recorded_runs([False, False])
        reply = _export(process.target, settled[-1:])
        assert "invoke_agent spans with no tool call held" in reply.partial_success.error_message
        assert "5 spans held" in _export(process.target, orphan[:-1]).partial_success.error_message
        clock.step_to(0)
        for span in settled[:-1]:
            assert _export(process.target, [span]).partial_success.rejected_spans == 0
        with PmlClient(process.target, timeout=30) as client:
            assert eventually(lambda: list(client.iter_patterns()), 20), process.log_tail()
            (pattern,) = client.iter_patterns()
        assert (pattern.usage_count, pattern.success_count) == (1, 1)
        time.sleep(2.5)  # past otlp_pending_seconds since the step
        _export(process.target, _recorded_runs([False])[0][:1])  # the tenant's next Export
        assert _metric(metrics_port, "expired") == 5
    finally:
        process.terminate()


def test_request_ids_and_scores_hold_across_clock_steps(
    tmp_path: Path, clock: SteppedClock
) -> None:
    """A clock set a year ahead then right, then back a day and an hour: every resent request
    id is replayed, never counted twice, a retention run between the steps forgets none of them
    (an answer stamped ahead of now is kept: docs/capture.md, Idempotency), and Suggest's score
    parts stay in their bounds (docs/ranking.md: a last use ahead of now is recency 1)."""
    process = ServerProcess(tmp_path / "data", env=clock.env)
    process.start()
    sent: dict[str, object] = {}
    try:
        with PmlClient(process.target, timeout=30) as client:

            def capture(request_id: str, tool: str) -> bool:
                record = make_record(
                    f"read the {tool} report",
                    f"await mcp.{tool}()",
                    tools=[tool],
                    request_id=request_id,
                    session_id="s1",
                )
                sent[request_id] = tool
                return bool(client.record(record).replayed)

            for n, offset in enumerate((365 * DAY, 0, -DAY, -DAY - HOUR, 0)):
                clock.step_to(offset)
                for step in ("a", "b"):
                    assert not capture(f"{n}-{step}", f"tool_{step}")
                client.run_retention(apply=True)
                for request_id, tool in sent.items():
                    assert capture(request_id, str(tool)), f"{request_id} at offset {offset}"
                answer = client.suggest("read the tool_a report", explain=True, session_id="s1")
                assert answer.suggestions
                for suggestion in answer.suggestions:
                    score = suggestion.score
                    assert 0 < score.recency <= 1
                    assert 1 <= score.transition < 2
                    # every other factor is in [0, 1] (docs/ranking.md, Formula); NaN fails too
                    assert 0 <= score.total <= score.transition, score
            usage = {p.tools_used[0]: p.usage_count for p in client.iter_patterns()}
    finally:
        process.terminate()
    assert usage == {"tool_a": 5, "tool_b": 5}  # each request id counted once


@pytest.mark.postgres
def test_a_root_first_run_split_across_replicas_whose_clocks_differ(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """Two replicas of one PostgreSQL store, clocks ten minutes apart: a run's root span reaches
    the one behind first, alone, its calls then the one ahead, an Export each. The one ahead
    took the root, held by a clock ten minutes behind its own, as settled: mapped it with the
    first span to arrive and held the calls until they expired, the run never captured. Now
    it is captured once, whole. (The clocks are stepped once both serve: grpc's Python layer
    takes its start's deadline from `time.time`, which a clock stepped ahead before the start
    pushes out by the step.)"""
    behind, ahead = SteppedClock(tmp_path / "behind"), SteppedClock(tmp_path / "ahead")
    flags = ("--store", postgres_dsn, "--otlp-settle-seconds", "2")
    a = ServerProcess(tmp_path / "a", *flags, env=behind.env)
    b = ServerProcess(tmp_path / "b", *flags, env=ahead.env)
    a.start()
    b.start()
    try:
        behind.step_to(-300)
        ahead.step_to(300)
        (spans,) = _recorded_runs([False])
        reply = _export(a.target, spans[-1:])
        assert "invoke_agent spans with no tool call held" in reply.partial_success.error_message
        for span in spans[:-1]:
            assert _export(b.target, [span]).partial_success.rejected_spans == 0
        with PmlClient(b.target) as client:
            assert eventually(lambda: list(client.iter_patterns()), 20), b.log_tail()
            time.sleep(3)  # past the settle window: a second capture would show by now
            (pattern,) = client.iter_patterns()
        assert list(pattern.tools_used) == ["read_file", "parse_json", "sum_column", "write_file"]
        assert (pattern.usage_count, pattern.success_count) == (1, 1)
    finally:
        a.terminate()
        b.terminate()
