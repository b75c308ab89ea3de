"""The stored answer to a capture request id, replayed when the same request comes again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pml_server.capture import json_form
from pml_server.domain.model import CaptureOutcome, CaptureResult, ToolFailure


def encode_result(result: CaptureResult, now_ms: int) -> bytes:
    data = {
        "time_ms": now_ms,
        "outcome": result.outcome.value,
        "pattern_id": result.pattern_id,
        "capability_id": result.capability_id,
        "new_pattern": result.new_pattern,
        "tool_failures": [[f.tool, f.error] for f in result.tool_failures],
        "tool_mismatch": result.tool_mismatch,
    }
    return json_form.dumps(data)


def decode_result(raw: bytes) -> CaptureResult:
    data = json_form.loads(raw)
    return CaptureResult(
        outcome=CaptureOutcome(data["outcome"]),
        pattern_id=data["pattern_id"],
        capability_id=data["capability_id"],
        new_pattern=data["new_pattern"],
        tool_failures=tuple(ToolFailure(t, e) for t, e in data["tool_failures"]),
        tool_mismatch=data["tool_mismatch"],
        replayed=True,
    )


def replay_answer(raw: bytes, pattern_exists: Callable[[str], bool]) -> CaptureResult:
    """The stored first answer of a resent request id, told honestly: when its pattern has
    since been deleted, the answer names no pattern (nor capability) instead of a gone one."""
    result = decode_result(raw)
    if result.pattern_id and not pattern_exists(result.pattern_id):
        return replace(result, pattern_id="", capability_id="", new_pattern=False)
    return result
