"""Helpers of the tests (the fixtures are in tests/conftest.py): `pml serve` as a process, and
the pattern/candidate builders of the ranking and retention tests. The clock, execution records
and the one way to open an engine are `testing.engine`'s (shared with the benchmarks),
re-exported here."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from pml_server.config import config_of
from pml_server.domain.errors import PmlError, UnavailableError
from pml_server.domain.model import CaptureResult, ExecutionRecord, PatternView
from pml_server.ranking import DAY_MS
from pml_server.service import Engine
from testing.engine import Clock, code_for, make_record, open_engine
from testing.ranking_oracle import Candidate

__all__ = [
    "NOW_MS",
    "Clock",
    "CountedCalls",
    "candidate",
    "code_for",
    "count_calls",
    "eventually",
    "make_record",
    "npm_ci",
    "open_engine",
    "pattern",
    "refusing_its_first_batch",
    "slow_to_refuse_stats",
    "spawn_pml_serve",
    "stop_pml_serve",
]


def files_holding(data_dir: Path, text: str) -> list[str]:
    """The files under `data_dir` whose bytes hold `text` (any case): what a store left on
    disk, its write-ahead log and table files included."""
    wanted = text.upper().encode()
    return sorted(
        str(path.relative_to(data_dir))
        for path in data_dir.rglob("*")
        if path.is_file() and wanted in path.read_bytes().upper()
    )


class CountedCalls:
    """How many times a client called one of its stub's methods (`count_calls`)."""

    def __init__(self) -> None:
        self.count = 0


def count_calls(
    stub: object, method: str, before: Callable[[int], None] | None = None
) -> CountedCalls:
    """Replace `stub.method` (a client's gRPC stub) by one that counts each call, then runs
    `before(n)` for the n-th when given, then makes the call: the attempts a client made,
    its retries included."""
    calls = CountedCalls()
    real = getattr(stub, method)

    def counted(*args: object, **kwargs: object) -> object:
        calls.count += 1
        if before is not None:
            before(calls.count)
        return real(*args, **kwargs)

    setattr(stub, method, counted)
    return calls


def eventually(check: Callable[[], object], seconds: float = 10.0) -> bool:
    """Poll `check()` until it is true (then True) or `seconds` pass (then False): for what a
    server does in its own time (a settle thread, a keys file watcher)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def refusing_its_first_batch(data_dir: Path) -> tuple[Engine, list[int]]:
    """An engine as `pml serve` opens it whose index is still catching up (as while the
    indexes are restored at open) until one batch of records was refused for it: a
    StreamTraces stream acknowledges that batch's executions UNAVAILABLE, not captured. The
    list counts the refused batches (the test shows the server did refuse one)."""
    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    engine._state.readiness.clear()
    record_many = engine.record_many
    refused = [0]

    def first_batch_before_ready(
        tenant: str, records: Sequence[ExecutionRecord]
    ) -> list[CaptureResult | Exception]:
        try:
            return record_many(tenant, records)
        except PmlError:
            refused[0] += 1
            raise
        finally:
            engine._state.readiness.set_ready()  # caught up once the first batch was refused

    engine.record_many = first_batch_before_ready  # type: ignore[method-assign]
    return engine, refused


def slow_to_refuse_stats(data_dir: Path, seconds: float) -> tuple[Engine, list[int]]:
    """An engine whose GetStats answers UNAVAILABLE (a retryable refusal) only after `seconds`:
    a server too slow for the client's timeout, whose every answer invites a retry. The list
    counts the GetStats calls it saw."""
    engine = open_engine(config_of(data_dir=data_dir, embedder="hashing"))
    calls = [0]

    def slow_refusal(tenant: str) -> object:
        calls[0] += 1
        time.sleep(seconds)
        raise UnavailableError("busy: try again")

    engine.stats = slow_refusal  # type: ignore[assignment,method-assign]
    return engine, calls


def npm_ci(folder: Path, why: str, *installed: Path, timeout: float = 300) -> None:
    """Install `folder`'s Node packages at the exact versions of its committed lock file,
    unless every path of `installed` (inside its node_modules) shows they are there; fails the
    test saying npm is needed `why` when it is missing."""
    if all(path.exists() for path in installed):
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(f"npm is needed {why}")
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=folder,
        check=True,
        timeout=timeout,
    )


def spawn_pml_serve(*flags: str) -> tuple[subprocess.Popen[str], str]:
    """The `pml serve` entry point with `flags` as a process, and its target once it has
    printed the port it listens on."""
    pml = Path(sys.executable).parent / "pml"
    proc = subprocess.Popen(
        [str(pml), "serve", *flags], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"\(port (\d+)\)", line)
    if match is None:
        proc.kill()
        _, stderr = proc.communicate(timeout=60)
        raise AssertionError(f"pml serve did not start: {line!r} {stderr}")
    return proc, f"127.0.0.1:{match.group(1)}"


def stop_pml_serve(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """SIGTERM, then the process's stderr once it has exited. One that has not exited within
    `timeout` fails the test with every thread's traceback (`pml serve` dumps them on SIGUSR1)
    and is killed, without leaving its pipes to warn in another test."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        _, stderr = proc.communicate()
        tail = stderr[-20000:]
        raise AssertionError(
            f"pml serve did not exit within {timeout:g} s of SIGTERM; its threads:\n{tail}"
        ) from None


# ---- ranking and retention builders (no store) ----
NOW_MS = 1_800_000_000_000  # a fixed clock: the tests pass now_ms explicitly


def pattern(
    pattern_id: str,
    *,
    successes: int = 1,
    failures: int = 0,
    capability_id: str = "",
    tools: tuple[str, ...] = ("read_file",),
    days_unused: float = 0.0,
    flagged: bool = False,
    superseded_by: str = "",
    usage: int | None = None,
) -> PatternView:
    return PatternView(
        id=pattern_id,
        code_hash="sha256:" + pattern_id,
        template=f"// {pattern_id}",
        original_code=f"// {pattern_id}",
        language="typescript",
        tools_used=tools,
        params=(),
        parameter_schema_json="{}",
        usage_count=successes + failures if usage is None else usage,
        success_count=successes,
        failure_count=failures,
        first_seen_ms=NOW_MS - int(400 * DAY_MS),
        last_used_ms=NOW_MS - int(days_unused * DAY_MS),
        mean_duration_ms=1.0,
        capability_id=capability_id or "cap-" + pattern_id,
        flagged_for_removal=flagged,
        superseded_by=superseded_by,
    )


def candidate(
    p: PatternView, semantic: float, lexical: float = 0.0, tags: tuple[str, ...] = ()
) -> Candidate:
    return Candidate(p.capability_id, p, semantic, lexical, tags)


@contextlib.contextmanager
def small_tmpfs(where: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (created), a small disk to fill; unmounted after.
    Skips the test unless it runs as root and can mount one."""
    if os.geteuid() != 0:
        pytest.skip("needs root to mount a tmpfs")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr!r}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)
