"""A real engine for tests and benchmarks: a controllable clock, execution records, the pattern
record a first capture stores, and the one way both open an engine (the real `Engine` on a
real RocksDB, ready)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pml_server.api.server import open_engine as open_served_engine
from pml_server.capture.normalize import NormalizedCode
from pml_server.config import Config, EngineConfig
from pml_server.domain.model import ExecutionRecord, ExecutionStatus, ToolCall
from pml_server.domain.records import ParamSpec, PatternRecord
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
    assert engine.admin.wait_ready(60)
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


def record_memory(engine: Engine, tenant: str, memory: Sequence[tuple[str, str]]) -> dict[str, str]:
    """A run of each (intent, tool) of `memory`, recorded for `tenant` as request `r{n}`; the
    capability id each tool's run joined, by tool."""
    return {
        tool: engine.record(tenant, make_record(f"r{n}", intent, [tool])).capability_id
        for n, (intent, tool) in enumerate(memory)
    }


def stored_record(normalized: NormalizedCode, tools: tuple[str, ...] = ("call",)) -> PatternRecord:
    """The pattern record a capture of today's build stores for a first run of `normalized`."""
    return PatternRecord(
        id="pat_1",
        code_hash=normalized.code_hash,
        template=normalized.template,
        original_code=normalized.redacted_code,
        language=normalized.language,
        tools_used=tools,
        params=tuple(ParamSpec(p.name, p.json_type, p.secret) for p in normalized.params),
        parameter_schema_json=normalized.schema_json,
        capability_id="cap_1",
        first_seen_ms=1,
    )
