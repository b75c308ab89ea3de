"""The capture benches' workload: the development set's executions (../shared/devset), real
intents with their real length distribution (median about 100 characters, a long tail to 750),
in file order, as client records and as the ExecutionRecord JSON lines `pml import` reads."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from google.protobuf import json_format

from pml_server._proto.pml.v1 import resources_pb2

DEVSET = Path(__file__).resolve().parents[3] / "shared" / "devset" / "executions.jsonl"


@cache
def executions() -> tuple[dict[str, object], ...]:
    with DEVSET.open() as lines:
        return tuple(json.loads(line) for line in lines if line.strip())


def intents(n: int | None = None) -> list[str]:
    rows = executions()[:n]
    return [str(row["intent"]) for row in rows]


def records(prefix: str, n: int | None = None) -> list[resources_pb2.ExecutionRecord]:
    """The first `n` executions as successful records, request ids `prefix`-<dev-set id>."""
    out = []
    for row in executions()[:n]:
        tools = [str(t) for t in row["tools"]]  # type: ignore[attr-defined]
        out.append(
            resources_pb2.ExecutionRecord(
                request_id=f"{prefix}-{row['id']}",
                intent=str(row["intent"]),
                code=str(row["code"]),
                language=str(row["language"]),
                tool_calls=[resources_pb2.ToolCall(tool=t, ok=True) for t in tools],
                status=resources_pb2.EXECUTION_STATUS_SUCCESS,
            )
        )
    return out


def write_jsonl(path: Path, prefix: str, n: int | None = None) -> int:
    """The executions as ExecutionRecord JSON lines (what `pml import` reads); returns n."""
    rows = records(prefix, n)
    with path.open("w") as out:
        for record in rows:
            out.write(json_format.MessageToJson(record, indent=None) + "\n")
    return len(rows)
