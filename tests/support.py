"""Helpers shared by the tests (the fixtures are in tests/conftest.py): a controllable clock,
execution records, the one way tests open an engine, and the pattern/candidate builders of the
ranking and retention tests."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from pml_server.api.server import open_engine as open_served_engine
from pml_server.config import Config, EngineConfig
from pml_server.domain.model import ExecutionRecord, ExecutionStatus, PatternView, ToolCall
from pml_server.ranking import DAY_MS, Candidate
from pml_server.service import Engine


class Clock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance_days(self, days: float) -> None:
        self.now_ms += int(days * 86_400_000)


def open_engine(
    where: Path | Config,
    clock: Clock | None = None,
    embedder: str = "hashing",
    **overrides: object,
) -> Engine:
    """The real `Engine` on a real RocksDB, ready (its indexes caught up). Given a directory:
    an engine of the hashing embedder (for speed) with any `EngineConfig` overrides and a
    controllable clock. Given a `Config`: exactly as `pml serve` opens it."""
    if isinstance(where, Config):
        assert clock is None, "a Config carries every setting"
        assert not overrides, "a Config carries every setting"
        engine = open_served_engine(where)
        assert isinstance(engine, Engine)
    else:
        config = EngineConfig(data_dir=where, embedder=embedder, **overrides)  # type: ignore[arg-type]
        engine = Engine.open(config, clock or Clock())
    assert engine.wait_ready(60)
    return engine


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


def code_for(tools: list[str], path: str = "a.json") -> str:
    lines = [f'const r{i} = await mcp.{t}({{path: "{path}"}});' for i, t in enumerate(tools)]
    return "\n".join(lines)


def make_record(
    request_id: str,
    intent: str,
    tools: list[str],
    *,
    failed: set[str] | None = None,
    path: str = "a.json",
    code: str | None = None,
    tags: tuple[str, ...] = (),
    duration_ms: float = 10.0,
) -> ExecutionRecord:
    failed = failed or set()
    calls = tuple(
        ToolCall(
            tool=t,
            arguments_json=json.dumps({"path": path}),
            ok=t not in failed,
            error=f"{t} failed: timeout after 30s" if t in failed else "",
            duration_ms=1.0,
        )
        for t in tools
    )
    return ExecutionRecord(
        request_id=request_id,
        intent=intent,
        code=code if code is not None else code_for(tools, path),
        language="javascript",
        tool_calls=calls,
        status=ExecutionStatus.FAILURE if failed else ExecutionStatus.SUCCESS,
        duration_ms=duration_ms,
        tags=tags,
    )


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
