"""The development set of ../shared/devset (MetaTool + NESTFUL; its README): executions with
their tool sequences, held-apart queries with the expected group, read as they are stored."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pml_server.domain.model import ExecutionRecord, ToolCall

DEVSET = Path(
    os.environ.get("PML_DEVSET", Path(__file__).resolve().parents[3] / "shared" / "devset")
)
VARIANTS = {"default": DEVSET, "skewed": DEVSET / "skewed"}


@dataclass(frozen=True)
class DevExecution:
    id: str
    intent: str
    code: str
    language: str
    tools: tuple[str, ...]
    group: str
    source: str


@dataclass(frozen=True)
class DevQuery:
    id: str
    intent: str
    group: str
    tools: tuple[str, ...]
    source: str

    @property
    def multi_tool(self) -> bool:
        return len(self.tools) > 1


def available(variant: str = "default") -> bool:
    return (VARIANTS[variant] / "executions.jsonl").exists()


def read_executions(path: Path) -> list[DevExecution]:
    """The executions of a JSON-lines file in the dev set's form (its variants', the
    multistep set's)."""
    executions = []
    for line in path.read_text().splitlines():
        d = json.loads(line)
        executions.append(
            DevExecution(
                d["id"],
                d["intent"],
                d["code"],
                d["language"],
                tuple(d["tools"]),
                d["group"],
                d["source"],
            )
        )
    return executions


def load(variant: str = "default") -> tuple[list[DevExecution], list[DevQuery]]:
    root = VARIANTS[variant]
    executions = read_executions(root / "executions.jsonl")
    queries = []
    for line in (root / "queries.jsonl").read_text().splitlines():
        d = json.loads(line)
        queries.append(
            DevQuery(
                d["id"], d["intent"], d["expected_group"], tuple(d["expected_tools"]), d["source"]
            )
        )
    return executions, queries


class Execution(Protocol):
    """What a bench execution holds of a capture (`DevExecution`, the synthetic quality set's
    `LabelledExecution`)."""

    @property
    def intent(self) -> str: ...
    @property
    def code(self) -> str: ...
    @property
    def language(self) -> str: ...
    @property
    def tools(self) -> tuple[str, ...]: ...


def as_record(n: int, e: Execution, vector: Sequence[float] | None = None) -> ExecutionRecord:
    """Execution `e` as the `n`-th record of a fill (request id `x{n}`), with `vector` as its
    client vector when given (the bench cache's, so the server does not embed it)."""
    return ExecutionRecord(
        request_id=f"x{n}",
        intent=e.intent,
        code=e.code,
        language=e.language,
        tool_calls=tuple(ToolCall(t) for t in e.tools),
        intent_embedding=None if vector is None else tuple(float(v) for v in vector),
    )
