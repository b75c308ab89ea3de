"""Shared helpers of the engine tests: records, a controllable clock, engine factories."""

from __future__ import annotations

import json
from pathlib import Path

from pml_server.config import EngineConfig
from pml_server.domain.model import ExecutionRecord, ExecutionStatus, ToolCall
from pml_server.engine import Engine


class Clock:
    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance_days(self, days: float) -> None:
        self.now_ms += int(days * 86_400_000)


def open_engine(
    path: Path, clock: Clock | None = None, embedder: str = "hashing", **overrides: object
) -> Engine:
    config = EngineConfig(data_dir=path, embedder=embedder, **overrides)  # type: ignore[arg-type]
    engine = Engine.open(config, clock or Clock())
    assert engine.wait_ready(60)
    return engine


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
